// The quantization recipes (which tensor gets which type) and `kvstash quantize`'s conversion.
#include "modelgen/quantize_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/fp16.h"
#include "kernels/reference_dequant.h"
#include "modelgen/modelgen.h"
#include "modelgen/test_models.h"

namespace kvstash::modelgen {
namespace {

using gguf::TensorType;

std::map<std::string, TensorType> planned_types(const std::string& preset, const std::string& scheme) {
  GenerateOptions o;
  o.preset = preset;
  o.scheme = scheme;
  auto plan = describe_model(o);
  EXPECT_TRUE(plan) << plan.status().to_string();
  std::map<std::string, TensorType> types;
  if (plan) {
    for (const TensorPlan& t : plan->tensors) types[t.name] = t.type;
  }
  return types;
}

// Qwen2.5-0.5B: rows of 896 are not whole K super-blocks, so Q4_K falls back to Q5_0 and Q6_K to
// Q8_0 (as in the Q4_K_M files published for this model); ffn_down (rows of 4864) keeps K types.
// use_more_bits over 24 layers: 0-2, 21-23 and every third from 5 (5, 8, ..., 20).
TEST(QuantRecipe, Q4KMOnQwen05B) {
  auto t = planned_types("qwen2.5-0.5b", "q4_k_m");
  EXPECT_EQ(t["token_embd.weight"], TensorType::kQ8_0);  // tied: the output's rule, 896 % 256 != 0
  EXPECT_EQ(t["blk.0.attn_q.weight"], TensorType::kQ5_0);
  EXPECT_EQ(t["blk.0.attn_v.weight"], TensorType::kQ8_0);
  EXPECT_EQ(t["blk.4.attn_v.weight"], TensorType::kQ5_0);
  EXPECT_EQ(t["blk.5.attn_v.weight"], TensorType::kQ8_0);
  EXPECT_EQ(t["blk.0.ffn_down.weight"], TensorType::kQ6_K);
  EXPECT_EQ(t["blk.4.ffn_down.weight"], TensorType::kQ4_K);
  EXPECT_EQ(t["blk.8.ffn_down.weight"], TensorType::kQ6_K);
  EXPECT_EQ(t["blk.23.ffn_down.weight"], TensorType::kQ6_K);
  EXPECT_EQ(t["blk.0.ffn_gate.weight"], TensorType::kQ5_0);
  EXPECT_EQ(t["blk.0.attn_norm.weight"], TensorType::kF32);
  EXPECT_EQ(t["blk.0.attn_q.bias"], TensorType::kF32);
}

// Llama-3.2-1B (16 layers, 8 KV heads for 32): every row is whole super-blocks.
TEST(QuantRecipe, MixturesOnLlama32_1B) {
  auto m = planned_types("llama-3.2-1b", "q4_k_m");
  EXPECT_EQ(m["token_embd.weight"], TensorType::kQ6_K);  // tied embedding = output
  EXPECT_EQ(m["blk.0.attn_q.weight"], TensorType::kQ4_K);
  EXPECT_EQ(m["blk.1.attn_v.weight"], TensorType::kQ6_K);   // first eighth
  EXPECT_EQ(m["blk.3.attn_v.weight"], TensorType::kQ4_K);
  EXPECT_EQ(m["blk.4.attn_v.weight"], TensorType::kQ6_K);   // (4 - 2) % 3 == 2
  EXPECT_EQ(m["blk.14.ffn_down.weight"], TensorType::kQ6_K);  // last eighth
  EXPECT_EQ(m["blk.0.attn_output.weight"], TensorType::kQ4_K);
  EXPECT_EQ(m["rope_freqs.weight"], TensorType::kF32);

  auto s = planned_types("llama-3.2-1b", "q4_k_s");
  EXPECT_EQ(s["blk.3.attn_v.weight"], TensorType::kQ5_K);
  EXPECT_EQ(s["blk.4.attn_v.weight"], TensorType::kQ4_K);
  EXPECT_EQ(s["blk.1.ffn_down.weight"], TensorType::kQ5_K);  // first n/8 = 2 layers
  EXPECT_EQ(s["blk.2.ffn_down.weight"], TensorType::kQ4_K);

  auto q3 = planned_types("llama-3.2-1b", "q3_k_m");
  EXPECT_EQ(q3["blk.1.attn_v.weight"], TensorType::kQ5_K);
  EXPECT_EQ(q3["blk.2.attn_v.weight"], TensorType::kQ4_K);
  EXPECT_EQ(q3["blk.0.ffn_down.weight"], TensorType::kQ5_K);  // first n/16 = 1 layer
  EXPECT_EQ(q3["blk.1.ffn_down.weight"], TensorType::kQ4_K);
  EXPECT_EQ(q3["blk.0.attn_output.weight"], TensorType::kQ4_K);
  EXPECT_EQ(q3["blk.0.ffn_up.weight"], TensorType::kQ3_K);

  auto q2 = planned_types("llama-3.2-1b", "q2_k");
  EXPECT_EQ(q2["blk.0.attn_v.weight"], TensorType::kQ4_K);  // 4 heads per KV head
  EXPECT_EQ(q2["blk.0.ffn_down.weight"], TensorType::kQ3_K);
  EXPECT_EQ(q2["blk.0.attn_output.weight"], TensorType::kQ3_K);
  EXPECT_EQ(q2["blk.0.ffn_up.weight"], TensorType::kQ2_K);

  auto q6 = planned_types("llama-3.2-1b", "q6_k");
  EXPECT_EQ(q6["blk.0.ffn_up.weight"], TensorType::kQ6_K);
  auto q8 = planned_types("llama-3.2-1b", "q8_0");
  EXPECT_EQ(q8["token_embd.weight"], TensorType::kQ8_0);
  auto q40 = planned_types("llama-3.2-1b", "Q4_0");  // names are case-insensitive
  EXPECT_EQ(q40["token_embd.weight"], TensorType::kQ6_K);
  EXPECT_EQ(q40["blk.0.ffn_up.weight"], TensorType::kQ4_0);
}

// Rows too short even for a 32-weight block fall back to F16.
// Qwen3-30B-A3B (48 layers, 128 experts, 4 KV heads for 32): the 3-D expert stacks take the
// matrices' rules by name (ffn_down_exps is an ffn_down), the router keeps F32, and 128 experts
// are not Mixtral's 8, so attn_v keeps the dense rule.
TEST(QuantRecipe, Q4KMOnQwen3_30B_A3B) {
  auto t = planned_types("qwen3-30b-a3b", "q4_k_m");
  EXPECT_EQ(t["output.weight"], TensorType::kQ6_K);
  EXPECT_EQ(t["token_embd.weight"], TensorType::kQ4_K);
  EXPECT_EQ(t["blk.0.ffn_gate_inp.weight"], TensorType::kF32);
  EXPECT_EQ(t["blk.0.ffn_gate_exps.weight"], TensorType::kQ4_K);
  EXPECT_EQ(t["blk.0.ffn_up_exps.weight"], TensorType::kQ4_K);
  EXPECT_EQ(t["blk.0.ffn_down_exps.weight"], TensorType::kQ6_K);   // first eighth
  EXPECT_EQ(t["blk.7.ffn_down_exps.weight"], TensorType::kQ4_K);   // (7 - 6) % 3 != 2
  EXPECT_EQ(t["blk.8.ffn_down_exps.weight"], TensorType::kQ6_K);   // (8 - 6) % 3 == 2
  EXPECT_EQ(t["blk.0.attn_v.weight"], TensorType::kQ6_K);
  EXPECT_EQ(t["blk.7.attn_v.weight"], TensorType::kQ4_K);
  EXPECT_EQ(t["blk.0.attn_k.weight"], TensorType::kQ4_K);
  EXPECT_EQ(t["blk.0.attn_q_norm.weight"], TensorType::kF32);
}

// Exactly 8 experts (Mixtral's shape): llama.cpp bumps attn_v and attn_k to Q8_0 and attn_output to Q5_K.
TEST(QuantRecipe, EightExpertBumps) {
  const ModelShapeForQuant shape{32, 4, true, 8};
  const QuantScheme& q4km = *find_quant_scheme("q4_k_m");
  EXPECT_EQ(choose_tensor_type(q4km, "blk.3.attn_v.weight", {4096, 1024}, TensorType::kF16, shape), TensorType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(q4km, "blk.3.attn_k.weight", {4096, 1024}, TensorType::kF16, shape), TensorType::kQ8_0);
  EXPECT_EQ(choose_tensor_type(q4km, "blk.3.attn_output.weight", {4096, 4096}, TensorType::kF16, shape), TensorType::kQ5_K);
  EXPECT_EQ(choose_tensor_type(*find_quant_scheme("q5_k_m"), "blk.3.attn_output.weight", {4096, 4096}, TensorType::kF16, shape),
            TensorType::kQ5_K);  // q5_k_m's base: not in the bumped list, and its own base anyway
  const ModelShapeForQuant dense{32, 4, true, 0};
  EXPECT_EQ(choose_tensor_type(q4km, "blk.3.attn_k.weight", {4096, 1024}, TensorType::kF16, dense), TensorType::kQ4_K);
}

TEST(QuantRecipe, FallbackChain) {
  const ModelShapeForQuant shape{4, 1, true};
  const QuantScheme* q4km = find_quant_scheme("q4_k_m");
  ASSERT_NE(q4km, nullptr);
  EXPECT_EQ(choose_tensor_type(*q4km, "blk.1.ffn_up.weight", {512, 8}, TensorType::kF16, shape), TensorType::kQ4_K);
  EXPECT_EQ(choose_tensor_type(*q4km, "blk.1.ffn_up.weight", {96, 8}, TensorType::kF16, shape), TensorType::kQ5_0);
  EXPECT_EQ(choose_tensor_type(*q4km, "blk.1.ffn_up.weight", {40, 8}, TensorType::kF16, shape), TensorType::kF16);
  EXPECT_EQ(choose_tensor_type(*find_quant_scheme("q5_k_s"), "blk.1.ffn_up.weight", {96, 8}, TensorType::kF16, shape),
            TensorType::kQ5_1);
  EXPECT_EQ(choose_tensor_type(*find_quant_scheme("q2_k"), "blk.1.ffn_up.weight", {96, 8}, TensorType::kF16, shape),
            TensorType::kQ4_0);
  EXPECT_EQ(choose_tensor_type(*q4km, "output_norm.weight", {512}, TensorType::kF32, shape), TensorType::kF32);
  EXPECT_EQ(find_quant_scheme("q4_k_x"), nullptr);
}

// A file written by quantize reads back with the same tensors (names, order, shapes), the types
// of the recipe, the metadata plus file_type, the unconverted tensors byte for byte, and the
// converted ones within their quantization step of the source.
// qwen3moe-tiny: the 3-D expert tensors convert row by row like matrices; the router stays as stored.
class QuantizePresets : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Presets, QuantizePresets, ::testing::Values("tiny-k", "qwen3moe-tiny"), [](const auto& info) {
  std::string n = info.param;
  for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

TEST_P(QuantizePresets, WrittenFileReadsBackWithTheSameTensors) {
  const std::string preset = GetParam();
  const std::string src = testing::test_model_path(preset, TensorType::kF16);
  const std::string out = std::string(KVSTASH_BINARY_DIR) + "/test-models/quantize-test-" + preset + "-q4_k_m.gguf";
  ThreadPool pool(2);
  int progress_lines = 0;
  QuantizeOptions o{src, out, "q4_k_m", [&](const std::string&) { ++progress_lines; }};
  auto summary = quantize_model(o, pool);
  ASSERT_TRUE(summary) << summary.status().to_string();
  auto in = gguf::File::open(src);
  auto q = gguf::File::open(out);
  ASSERT_TRUE(in && q);
  EXPECT_EQ(progress_lines, static_cast<int>((*in)->tensors().size()));
  EXPECT_EQ(*(*q)->get_uint("general.file_type"), 15u);
  EXPECT_EQ(*(*q)->get_uint("general.quantization_version"), 2u);
  EXPECT_EQ(*(*q)->get_string("general.architecture"), *(*in)->get_string("general.architecture"));
  EXPECT_TRUE(*(*q)->find("tokenizer.ggml.tokens") == *(*in)->find("tokenizer.ggml.tokens"));
  const auto planned = planned_types(preset, "q4_k_m");
  ASSERT_EQ((*q)->tensors().size(), (*in)->tensors().size());
  for (std::size_t i = 0; i < (*in)->tensors().size(); ++i) {
    const gguf::TensorInfo& a = (*in)->tensors()[i];
    const gguf::TensorInfo& b = (*q)->tensors()[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.dims, b.dims);
    EXPECT_EQ(b.type, planned.at(a.name));
    if (a.name.find("_exps.weight") != std::string::npos) {
      EXPECT_EQ(a.dims.size(), 3u);
      EXPECT_NE(a.type, b.type) << "expert tensors are quantized";
    }
    if (a.name.find("ffn_gate_inp") != std::string::npos) EXPECT_EQ(b.type, TensorType::kF32) << "the router is kept";
    if (a.type == b.type) {
      ASSERT_EQ(a.n_bytes, b.n_bytes);
      EXPECT_EQ(0, std::memcmp(a.data, b.data, a.n_bytes));
      continue;
    }
    kernels::WeightType wt = kernels::WeightType::kF32;
    for (kernels::WeightType w : kernels::kAllWeightTypes) {
      if (gguf::tensor_type_name(b.type) == kernels::weight_type_name(w)) wt = w;
    }
    std::vector<double> back(b.n_elements);
    kernels::reference_dequantize_row(wt, b.data, static_cast<std::int64_t>(b.n_elements), back.data());
    double max_src = 0.0, max_err = 0.0;
    for (std::uint64_t k = 0; k < a.n_elements; ++k) {
      std::uint16_t h;
      std::memcpy(&h, a.data + 2 * k, 2);
      const double v = f16_to_f32(h);
      max_src = std::max(max_src, std::fabs(v));
      max_err = std::max(max_err, std::fabs(v - back[k]));
    }
    // 4 bits over a group's range of at most 2 max|w|, plus the scale's own rounding.
    EXPECT_LT(max_err, 2.0 * max_src / 15.0) << gguf::tensor_type_name(b.type);
  }
  EXPECT_GT(summary->tensors_converted, 0);
  EXPECT_LT(summary->bytes_out, summary->bytes_in / 2);
}

TEST(Quantize, RefusesUnknownTypesAndQuantizedInput) {
  ThreadPool pool(1);
  const std::string src = testing::test_model_path("tiny-k", TensorType::kF16);
  const std::string dir = std::string(KVSTASH_BINARY_DIR) + "/test-models/";
  auto bad = quantize_model({src, dir + "never.gguf", "q4_k_xl", nullptr}, pool);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("q4_k_xl"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "never.gguf"));

  const std::string q8 = testing::test_model_path("tiny-k", TensorType::kQ8_0);
  auto requant = quantize_model({q8, dir + "never.gguf", "q4_k_m", nullptr}, pool);
  ASSERT_FALSE(requant);
  EXPECT_EQ(requant.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(requant.status().message().find("q8_0"), std::string::npos) << requant.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir + "never.gguf"));
}

}  // namespace
}  // namespace kvstash::modelgen
