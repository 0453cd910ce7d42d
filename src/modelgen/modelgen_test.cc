#include "modelgen/modelgen.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <gtest/gtest.h>

#include <algorithm>

#include "common/fp16.h"
#include "kernels/quantize.h"
#include "modelgen/builtin_vocab.h"

namespace kvstash::modelgen {
namespace {

namespace fs = std::filesystem;
using gguf::TensorType;
using gguf::Value;
using gguf::ValueType;

const std::string kVocabDir = std::string(KVSTASH_SHARED_DIR) + "/vocab/";

class ModelgenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("modelgen_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::unique_ptr<gguf::File> generate(GenerateOptions o, const std::string& name) {
    o.out_path = path(name);
    Status st = generate_model(o);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    auto f = gguf::File::open(o.out_path);
    EXPECT_TRUE(f) << f.status().to_string();
    return f ? std::move(*f) : nullptr;
  }

  fs::path dir_;
};

GenerateOptions opts(const std::string& preset, TensorType type) {
  GenerateOptions o;
  o.preset = preset;
  o.type = type;
  return o;
}

std::uint64_t uint_of(const gguf::File& f, const std::string& key) {
  auto v = f.get_uint(key);
  EXPECT_TRUE(v) << key;
  return v ? *v : 0;
}

void expect_type(const gguf::File& f, const std::string& key, ValueType type) {
  const Value* v = f.find(key);
  ASSERT_NE(v, nullptr) << key;
  EXPECT_EQ(v->type, type) << key;
}

// What the file must say, written out independently of the generator's plan.
void check_tiny_model(const gguf::File& f, const std::string& preset, TensorType type) {
  const bool qwen = preset == "tiny";
  const std::string a = qwen ? "qwen2" : "llama";
  const std::uint64_t ff = qwen ? 128 : 160;
  EXPECT_EQ(*f.get_string("general.architecture"), a);
  EXPECT_EQ(*f.get_string("general.name"), "kvstash-random " + preset);
  EXPECT_EQ(uint_of(f, "general.alignment"), 32u);
  EXPECT_EQ(uint_of(f, "general.file_type"), type == TensorType::kF32 ? 0u : type == TensorType::kF16 ? 1u : 7u);
  EXPECT_EQ(uint_of(f, a + ".context_length"), 4096u);
  EXPECT_EQ(uint_of(f, a + ".embedding_length"), 64u);
  EXPECT_EQ(uint_of(f, a + ".block_count"), 2u);
  EXPECT_EQ(uint_of(f, a + ".feed_forward_length"), ff);
  EXPECT_EQ(uint_of(f, a + ".attention.head_count"), 4u);
  EXPECT_EQ(uint_of(f, a + ".attention.head_count_kv"), 2u);
  EXPECT_EQ(uint_of(f, a + ".rope.dimension_count"), 16u);
  EXPECT_EQ(*f.get_float(a + ".rope.freq_base"), qwen ? 1e6 : 5e5);
  EXPECT_EQ(*f.get_float(a + ".attention.layer_norm_rms_epsilon"), static_cast<double>(qwen ? 1e-6f : 1e-5f));
  expect_type(f, a + ".rope.freq_base", ValueType::kF32);
  expect_type(f, a + ".attention.layer_norm_rms_epsilon", ValueType::kF32);
  expect_type(f, a + ".block_count", ValueType::kU32);
  expect_type(f, "tokenizer.ggml.tokens", ValueType::kArray);
  expect_type(f, "tokenizer.ggml.token_type", ValueType::kArray);
  const auto tokens = *f.get_string_array("tokenizer.ggml.tokens");
  const std::uint64_t n_vocab = tokens.size();
  EXPECT_EQ(n_vocab, builtin_vocab_size(a));
  EXPECT_EQ(uint_of(f, a + ".vocab_size"), n_vocab);
  EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f.get_string("tokenizer.ggml.pre"), qwen ? "qwen2" : "llama-bpe");
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type")->size(), n_vocab);
  EXPECT_EQ(*f.get_bool("tokenizer.ggml.add_bos_token"), !qwen);
  EXPECT_EQ(tokens[*f.get_uint("tokenizer.ggml.eos_token_id")], qwen ? "<|endoftext|>" : "<|end_of_text|>");
  EXPECT_EQ(tokens[*f.get_uint("tokenizer.ggml.bos_token_id")], qwen ? "<|endoftext|>" : "<|begin_of_text|>");
  EXPECT_EQ(tokens[*f.get_uint("tokenizer.ggml.eot_token_id")], qwen ? "<|im_end|>" : "<|eot_id|>");
  EXPECT_NE(f.get_string("tokenizer.chat_template")->find(qwen ? "<|im_start|>" : "<|start_header_id|>"), std::string::npos);

  struct Want { std::string name; TensorType type; std::vector<std::uint64_t> dims; };
  std::vector<Want> want = {{"token_embd.weight", type, {64, n_vocab}}};
  for (int l = 0; l < 2; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    want.push_back({b + "attn_norm.weight", TensorType::kF32, {64}});
    want.push_back({b + "attn_q.weight", type, {64, 64}});
    want.push_back({b + "attn_k.weight", type, {64, 32}});
    want.push_back({b + "attn_v.weight", type, {64, 32}});
    if (qwen) {
      want.push_back({b + "attn_q.bias", TensorType::kF32, {64}});
      want.push_back({b + "attn_k.bias", TensorType::kF32, {32}});
      want.push_back({b + "attn_v.bias", TensorType::kF32, {32}});
    }
    want.push_back({b + "attn_output.weight", type, {64, 64}});
    want.push_back({b + "ffn_norm.weight", TensorType::kF32, {64}});
    want.push_back({b + "ffn_gate.weight", type, {64, ff}});
    want.push_back({b + "ffn_up.weight", type, {64, ff}});
    want.push_back({b + "ffn_down.weight", type, {ff, 64}});
  }
  want.push_back({"output_norm.weight", TensorType::kF32, {64}});
  if (!qwen) want.push_back({"output.weight", type, {64, n_vocab}});
  ASSERT_EQ(f.tensors().size(), want.size());
  for (const Want& w : want) {
    const gguf::TensorInfo* t = f.find_tensor(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->type, w.type) << w.name;
    EXPECT_EQ(t->dims, w.dims) << w.name;
  }
}

TEST_F(ModelgenTest, TinyPresetsMatchPlanAndRegenerateExactly) {
  for (const char* preset : {"tiny", "tiny-llama"}) {
    for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0}) {
      SCOPED_TRACE(std::string(preset) + " " + gguf::tensor_type_name(type));
      GenerateOptions o = opts(preset, type);
      auto f = generate(o, "m.gguf");
      ASSERT_NE(f, nullptr);
      check_tiny_model(*f, preset, type);

      auto plan = describe_model(o);
      ASSERT_TRUE(plan) << plan.status().to_string();
      ASSERT_EQ(f->metadata().size(), plan->metadata.size());
      for (std::size_t i = 0; i < plan->metadata.size(); ++i) {
        EXPECT_EQ(f->metadata()[i].first, plan->metadata[i].first);
        EXPECT_TRUE(f->metadata()[i].second == plan->metadata[i].second) << plan->metadata[i].first;
      }
      ASSERT_EQ(f->tensors().size(), plan->tensors.size());
      for (std::size_t i = 0; i < plan->tensors.size(); ++i) {
        const gguf::TensorInfo& t = f->tensors()[i];
        EXPECT_EQ(t.name, plan->tensors[i].name);
        std::vector<std::uint8_t> again(t.n_bytes);
        ASSERT_TRUE(fill_tensor(plan->preset, plan->tensors[i], o.seed, again).is_ok());
        EXPECT_EQ(std::memcmp(again.data(), t.data, t.n_bytes), 0) << t.name;
      }
    }
  }
}

TEST_F(ModelgenTest, ValuesHaveTheIntendedScale) {
  auto plan = describe_model(opts("tiny", TensorType::kF32));
  ASSERT_TRUE(plan);
  for (const TensorPlan& t : plan->tensors) {
    std::vector<float> v(t.n_elements());
    TensorValues(plan->preset, t, kDefaultSeed).next(v);
    double sum = 0, sum_sq = 0, lo = 1e9, hi = -1e9;
    for (float x : v) { sum += x; sum_sq += double{x} * x; lo = std::min<double>(lo, x); hi = std::max<double>(hi, x); }
    const double mean = sum / v.size(), sd = std::sqrt(sum_sq / v.size() - mean * mean);
    if (t.init == Init::kNorm) {
      EXPECT_GE(lo, 0.9) << t.name;
      EXPECT_LE(hi, 1.1) << t.name;
    } else if (t.init == Init::kMatrix) {
      // 1/sqrt(fan-in); the two projections that write into the residual stream get 3x.
      const bool residual_out = t.name.ends_with("attn_output.weight") || t.name.ends_with("ffn_down.weight");
      const double want = (residual_out ? 3.0 : 1.0) / std::sqrt(static_cast<double>(t.dims[0]));
      EXPECT_NEAR(sd, want, 0.2 * want) << t.name;
    } else if (t.init == Init::kEmbedding) {
      // tiny is tied: its embedding doubles as the output matrix and is scaled down to 0.25.
      EXPECT_NEAR(sd, plan->preset.tied_output ? 0.25 : 1.0, 0.05) << t.name;
    } else if (t.init == Init::kBias) {
      EXPECT_NEAR(sd, 0.1, 0.04) << t.name;
    }
  }
}

TEST_F(ModelgenTest, SameSeedSameFileOtherSeedDiffers) {
  GenerateOptions o = opts("tiny", TensorType::kF16);
  ASSERT_TRUE(generate(o, "a.gguf"));
  ASSERT_TRUE(generate(o, "b.gguf"));
  o.seed = 12345;
  ASSERT_TRUE(generate(o, "c.gguf"));
  const std::string a = read_bytes(path("a.gguf")), b = read_bytes(path("b.gguf")), c = read_bytes(path("c.gguf"));
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());  // same shapes
  EXPECT_NE(a, c);
}

TEST_F(ModelgenTest, VocabFileTokenizerKeysAreCopiedExactly) {
  for (const char* name : {"ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf"}) {
    const std::string vocab_path = kVocabDir + name;
    ASSERT_TRUE(fs::exists(vocab_path)) << vocab_path << " is absent (the shared vocabularies: ../shared/vocab)";
    auto vocab = gguf::File::open(vocab_path);
    ASSERT_TRUE(vocab) << vocab.status().to_string();
    GenerateOptions o = opts(std::string(name).find("qwen") != std::string::npos ? "tiny" : "tiny-llama", TensorType::kQ8_0);
    o.vocab_path = vocab_path;
    auto f = generate(o, "v.gguf");
    ASSERT_NE(f, nullptr);
    std::size_t copied = 0;
    for (const auto& [key, value] : (*vocab)->metadata()) {
      if (key.rfind("tokenizer.", 0) != 0) continue;
      ++copied;
      const Value* got = f->find(key);
      ASSERT_NE(got, nullptr) << key;
      EXPECT_TRUE(*got == value) << key;
    }
    std::size_t in_model = 0;
    for (const auto& kv : f->metadata()) in_model += kv.first.rfind("tokenizer.", 0) == 0 ? 1 : 0;
    EXPECT_EQ(in_model, copied);
    const std::uint64_t n_vocab = (*vocab)->get_string_array("tokenizer.ggml.tokens")->size();
    EXPECT_EQ(f->find_tensor("token_embd.weight")->dims[1], n_vocab);
    EXPECT_EQ(*f->get_uint(*f->get_string("general.architecture") + ".vocab_size"), n_vocab);
  }
}

TEST_F(ModelgenTest, Q8_0IsWithinQuantizationErrorOfF32) {
  GenerateOptions o = opts("tiny-llama", TensorType::kQ8_0);
  auto f = generate(o, "q.gguf");
  ASSERT_NE(f, nullptr);
  auto plan = describe_model(o);
  ASSERT_TRUE(plan);
  int checked = 0;
  for (const TensorPlan& t : plan->tensors) {
    if (t.type != TensorType::kQ8_0) continue;
    std::vector<float> exact(t.n_elements()), decoded(t.n_elements());
    TensorValues(plan->preset, t, o.seed).next(exact);
    kernels::dequantize_row_q8_0(f->find_tensor(t.name)->data, static_cast<std::int64_t>(exact.size()), decoded.data());
    for (std::size_t b = 0; b < exact.size(); b += 32) {
      float amax = 0;
      for (std::size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(exact[i]));
      const float d = amax / 127, d16 = f16_to_f32(f32_to_f16(d));
      // Rounding to the nearest quant costs d/2; storing d as f16 costs |d - d16| per quant step.
      const float bound = d / 2 + 127 * std::fabs(d - d16) + 1e-7f;
      for (std::size_t i = b; i < b + 32; ++i) ASSERT_LE(std::fabs(decoded[i] - exact[i]), bound) << t.name << " " << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 7 + 2);  // 7 matrices per layer, token_embd, output
}

TEST(BuiltinVocab, ByteTokensMergesAndSpecials) {
  EXPECT_EQ(byte_token(' '), "Ġ");
  EXPECT_EQ(byte_token('\n'), "Ċ");
  EXPECT_EQ(byte_token('a'), "a");
  EXPECT_EQ(byte_token(0), "Ā");
  EXPECT_EQ(byte_token(0xff), "ÿ");
  EXPECT_EQ(byte_token(0xad), "Ń");  // the last non-printable byte: U+0100 + 67
  const auto& merges = builtin_merges();
  ASSERT_EQ(merges.size(), static_cast<std::size_t>(kBuiltinMerges));
  EXPECT_EQ(merges, builtin_merges());
  auto kv = builtin_tokenizer_metadata("qwen2", 0);
  ASSERT_TRUE(kv);
  std::vector<std::string> tokens;
  std::vector<std::int64_t> types;
  for (auto& [k, v] : *kv) {
    if (k == "tokenizer.ggml.tokens") for (auto& item : std::get<gguf::Array>(v.data).items) tokens.push_back(std::get<std::string>(item.data));
    if (k == "tokenizer.ggml.token_type") for (auto& item : std::get<gguf::Array>(v.data).items) types.push_back(std::get<std::int64_t>(item.data));
  }
  ASSERT_EQ(tokens.size(), builtin_vocab_size("qwen2"));
  ASSERT_EQ(types.size(), tokens.size());
  std::set<std::string> known(tokens.begin(), tokens.end());
  EXPECT_EQ(known.size(), tokens.size()) << "token spellings are unique";
  EXPECT_TRUE(known.count("Ġthe")) << "the commonest English word is learnt";
  for (const std::string& m : merges) {
    const std::size_t space = m.find(' ');
    ASSERT_NE(space, std::string::npos) << m;
    EXPECT_TRUE(known.count(m.substr(0, space))) << m;
    EXPECT_TRUE(known.count(m.substr(space + 1))) << m;
    EXPECT_TRUE(known.count(m.substr(0, space) + m.substr(space + 1))) << m;
  }
  EXPECT_EQ(tokens[tokens.size() - 3], "<|endoftext|>");
  EXPECT_EQ(tokens.back(), "<|im_end|>");
  EXPECT_EQ(types.back(), 3);
  EXPECT_EQ(types[0], 1);
  EXPECT_FALSE(builtin_tokenizer_metadata("gpt-neox", 0));
}

TEST(Describe, BigPresetsHaveRealShapes) {
  auto qwen = describe_model(opts("qwen2.5-0.5b", TensorType::kF16));
  ASSERT_TRUE(qwen) << qwen.status().to_string();
  EXPECT_EQ(qwen->n_params, 494032768u);  // Qwen2.5-0.5B's published count
  EXPECT_EQ(qwen->tensors.size(), 1u + 24 * 12 + 1);
  EXPECT_EQ(qwen->preset.n_vocab, 151936u);
  const auto& tokens = std::get<gguf::Array>(std::find_if(qwen->metadata.begin(), qwen->metadata.end(), [](auto& kv) {
                                                return kv.first == "tokenizer.ggml.tokens";
                                              })->second.data).items;
  ASSERT_EQ(tokens.size(), 151936u);
  EXPECT_EQ(std::get<std::string>(tokens.back().data), "<|unused_" + std::to_string(151936 - builtin_vocab_size("qwen2") - 1) + "|>");

  auto q15 = describe_model(opts("qwen2.5-1.5b", TensorType::kQ8_0));
  ASSERT_TRUE(q15);
  EXPECT_EQ(q15->n_params, 1543714304u);  // Qwen2.5-1.5B's count with tied embeddings
  const TensorPlan* k = nullptr;
  for (const TensorPlan& t : q15->tensors) if (t.name == "blk.27.attn_k.weight") k = &t;
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dims, (std::vector<std::uint64_t>{1536, 256}));
  EXPECT_EQ(k->type, TensorType::kQ8_0);

  auto llama = describe_model(opts("llama-3.2-1b", TensorType::kBF16));
  ASSERT_TRUE(llama);
  EXPECT_EQ(llama->n_params, 1235814400u + 32);  // Llama 3.2 1B plus the 32 rope_freqs values
  bool has_output = false, has_freqs = false;
  for (const TensorPlan& t : llama->tensors) {
    has_output |= t.name == "output.weight";
    if (t.name == "rope_freqs.weight") {
      has_freqs = true;
      EXPECT_EQ(t.dims, (std::vector<std::uint64_t>{32}));
      EXPECT_EQ(t.type, TensorType::kF32);
    }
  }
  EXPECT_FALSE(has_output) << "tied";
  EXPECT_TRUE(has_freqs);
}

// Qwen3-0.6B: 596,049,920 parameters (its model card: 0.6B, 0.44B without the embedding), head_dim
// 128 over 16 heads of a 1024-wide model. Qwen3-30B-A3B: 30.5B in all, 3.3B active (model card),
// experts stored as [n_embd, 768, 128] and [768, n_embd, 128].
TEST(Describe, Qwen3PresetsHaveRealShapes) {
  auto dense = describe_model(opts("qwen3-0.6b", TensorType::kBF16));
  ASSERT_TRUE(dense) << dense.status().to_string();
  EXPECT_EQ(dense->n_params, 596049920u);
  // Qwen3-1.7B: 1.7B, 1.4B without the embedding (model card); 28 layers of 2048, ff 6144, tied.
  auto larger = describe_model(opts("qwen3-1.7b", TensorType::kBF16));
  ASSERT_TRUE(larger) << larger.status().to_string();
  EXPECT_EQ(larger->n_params, 1720574976u);
  EXPECT_EQ(larger->n_params - 151936u * 2048u, 1409410048u);  // with the norms
  auto find = [](const ModelPlan& plan, const std::string& name) -> const TensorPlan* {
    for (const TensorPlan& t : plan.tensors) if (t.name == name) return &t;
    return nullptr;
  };
  ASSERT_NE(find(*dense, "blk.27.attn_q_norm.weight"), nullptr);
  EXPECT_EQ(find(*dense, "blk.27.attn_q_norm.weight")->dims, (std::vector<std::uint64_t>{128}));
  EXPECT_EQ(find(*dense, "blk.0.attn_q.weight")->dims, (std::vector<std::uint64_t>{1024, 2048}));
  EXPECT_EQ(find(*dense, "blk.0.attn_output.weight")->dims, (std::vector<std::uint64_t>{2048, 1024}));
  EXPECT_EQ(find(*dense, "output.weight"), nullptr) << "tied";
  bool key_length = false;
  for (const auto& [key, value] : dense->metadata) key_length |= key == "qwen3.attention.key_length";
  EXPECT_TRUE(key_length);

  auto moe = describe_model(opts("qwen3-30b-a3b", TensorType::kF16));
  ASSERT_TRUE(moe) << moe.status().to_string();
  EXPECT_EQ(moe->n_params, 30532122624u);
  const TensorPlan* down = find(*moe, "blk.47.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dims, (std::vector<std::uint64_t>{768, 2048, 128}));
  EXPECT_EQ(find(*moe, "blk.0.ffn_gate_exps.weight")->dims, (std::vector<std::uint64_t>{2048, 768, 128}));
  EXPECT_EQ(find(*moe, "blk.0.ffn_gate_inp.weight")->type, TensorType::kF32);
  EXPECT_EQ(find(*moe, "blk.0.ffn_gate.weight"), nullptr);
  EXPECT_NE(find(*moe, "output.weight"), nullptr);
  // Active per token: everything but 120 of each layer's 128 experts.
  const std::uint64_t expert = 3ull * 2048 * 768;
  EXPECT_EQ(moe->n_params - 48ull * 120 * expert, 3353032704u);

  // qwen3moe-scaled: the same layers, 8 of them: the embeddings, the output and 8 of the 48
  // layers' parameters, and a Q4_K_M file of 2-4 GB for benchmarks against llama.cpp.
  GenerateOptions o = opts("qwen3moe-scaled", TensorType::kF16);
  o.scheme = "q4_k_m";
  auto scaled = describe_model(o);
  ASSERT_TRUE(scaled) << scaled.status().to_string();
  const std::uint64_t embeddings = 2ull * 151936 * 2048 + 2048;  // token_embd, output, output_norm
  const std::uint64_t layer = (moe->n_params - embeddings) / 48;
  EXPECT_EQ(layer * 48 + embeddings, moe->n_params);
  EXPECT_EQ(scaled->n_params, embeddings + 8 * layer);
  EXPECT_EQ(scaled->preset.n_layers, 8u);
  EXPECT_NE(find(*scaled, "blk.7.ffn_down_exps.weight"), nullptr);
  EXPECT_EQ(find(*scaled, "blk.8.attn_q.weight"), nullptr);
  EXPECT_EQ(find(*scaled, "blk.0.ffn_up_exps.weight")->dims, (std::vector<std::uint64_t>{2048, 768, 128}));
  EXPECT_EQ(find(*scaled, "blk.0.ffn_up_exps.weight")->type, TensorType::kQ4_K);
  EXPECT_EQ(find(*scaled, "blk.3.ffn_down_exps.weight")->type, TensorType::kQ6_K);  // (3 - 1) % 3 == 2
  EXPECT_EQ(find(*scaled, "blk.4.ffn_down_exps.weight")->type, TensorType::kQ4_K);
  EXPECT_GT(scaled->n_bytes, 2000000000u);
  EXPECT_LT(scaled->n_bytes, 4000000000u);
}

// Gemma 3 1B: 999,885,952 parameters; the window and the local layers' RoPE base in the metadata.
TEST(Describe, Gemma3PresetHasTheRealShape) {
  auto plan = describe_model(opts("gemma-3-1b", TensorType::kBF16));
  ASSERT_TRUE(plan) << plan.status().to_string();
  EXPECT_EQ(plan->n_params, 999885952u);
  bool window = false, base_swa = false, post_norm = false;
  for (const auto& [key, value] : plan->metadata) {
    if (key == "gemma3.attention.sliding_window") window = std::get<std::uint64_t>(value.data) == 512;
    base_swa |= key == "gemma3.rope.freq_base_swa";
  }
  for (const TensorPlan& t : plan->tensors) post_norm |= t.name == "blk.25.post_ffw_norm.weight";
  EXPECT_TRUE(window);
  EXPECT_TRUE(base_swa);
  EXPECT_TRUE(post_norm);
}

// Phi-3-mini-128k: 3,821,079,552 parameters (its published count) plus the 2 x 48 LongRoPE
// factors; fused attn_qkv and gate+up, no ffn_gate.
TEST(Describe, Phi3PresetHasTheRealShape) {
  auto plan = describe_model(opts("phi-3-mini", TensorType::kBF16));
  ASSERT_TRUE(plan) << plan.status().to_string();
  EXPECT_EQ(plan->n_params, 3821079552u + 96);
  const TensorPlan* qkv = nullptr;
  const TensorPlan* up = nullptr;
  bool gate = false, factors = false, original = false;
  for (const TensorPlan& t : plan->tensors) {
    if (t.name == "blk.31.attn_qkv.weight") qkv = &t;
    if (t.name == "blk.31.ffn_up.weight") up = &t;
    gate |= t.name.find("ffn_gate") != std::string::npos || t.name.find("attn_q.weight") != std::string::npos;
    factors |= t.name == "rope_factors_long.weight";
  }
  for (const auto& [key, value] : plan->metadata) {
    if (key == "phi3.rope.scaling.original_context_length") original = std::get<std::uint64_t>(value.data) == 4096;
  }
  ASSERT_NE(qkv, nullptr);
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(qkv->dims, (std::vector<std::uint64_t>{3072, 3 * 3072}));
  EXPECT_EQ(up->dims, (std::vector<std::uint64_t>{3072, 2 * 8192}));
  EXPECT_FALSE(gate);
  EXPECT_TRUE(factors);
  EXPECT_TRUE(original);
}

// gpt-oss-20b: 20,914,757,184 parameters (its published count); llama.cpp's MXFP4_MOE mixture puts
// the expert stacks in MXFP4 and every other matrix in Q8_0 (11.3 GiB, as the published file).
TEST(Describe, GptOssPresetHasTheRealShapeAndMxfp4Experts) {
  auto plan = describe_model(opts("gpt-oss-20b", TensorType::kBF16));
  ASSERT_TRUE(plan) << plan.status().to_string();
  EXPECT_EQ(plan->n_params, 20914757184u);
  GenerateOptions o = opts("gpt-oss-20b", TensorType::kF32);
  o.scheme = "mxfp4_moe";
  auto mixed = describe_model(o);
  ASSERT_TRUE(mixed) << mixed.status().to_string();
  int mxfp4 = 0;
  for (const TensorPlan& t : mixed->tensors) {
    const bool expert_stack = t.dims.size() == 3;
    if (expert_stack) {
      EXPECT_EQ(t.type, TensorType::kMXFP4) << t.name;
      ++mxfp4;
    } else if (t.name.ends_with("attn_q.weight") || t.name == "output.weight" || t.name == "token_embd.weight") {
      EXPECT_EQ(t.type, TensorType::kQ8_0) << t.name;
    } else if (t.name.ends_with(".bias") || t.name.ends_with("norm.weight") || t.name.ends_with("sinks.weight") ||
               t.name.ends_with("ffn_gate_inp.weight")) {
      EXPECT_EQ(t.type, TensorType::kF32) << t.name;
    }
  }
  EXPECT_EQ(mxfp4, 24 * 3);
  bool yarn = false, window = false, general_type = false;
  for (const auto& [key, value] : mixed->metadata) {
    if (key == "gpt-oss.rope.scaling.type") yarn = std::get<std::string>(value.data) == "yarn";
    if (key == "gpt-oss.attention.sliding_window") window = std::get<std::uint64_t>(value.data) == 128;
    if (key == "general.file_type") general_type = std::get<std::uint64_t>(value.data) == 38;
  }
  EXPECT_TRUE(yarn);
  EXPECT_TRUE(window);
  EXPECT_TRUE(general_type);
  // gpt-oss-scaled: the first 4 of those layers, every tensor of the real shape and type.
  GenerateOptions scaled_options = opts("gpt-oss-scaled", TensorType::kF32);
  scaled_options.scheme = "mxfp4_moe";
  auto scaled = describe_model(scaled_options);
  ASSERT_TRUE(scaled) << scaled.status().to_string();
  int scaled_stacks = 0, layer_tensors = 0, scaled_layer_tensors = 0;
  for (const TensorPlan& t : scaled->tensors) {
    const auto same = std::find_if(mixed->tensors.begin(), mixed->tensors.end(), [&](const TensorPlan& f) { return f.name == t.name; });
    ASSERT_NE(same, mixed->tensors.end()) << t.name;
    EXPECT_EQ(t.dims, same->dims) << t.name;
    EXPECT_EQ(t.type, same->type) << t.name;
    scaled_stacks += t.dims.size() == 3;
    scaled_layer_tensors += t.name.starts_with("blk.");
  }
  for (const TensorPlan& t : mixed->tensors) layer_tensors += t.name.starts_with("blk.");
  EXPECT_EQ(scaled_stacks, 4 * 3);
  EXPECT_EQ(scaled_layer_tensors * 24, layer_tensors * 4);
  // --type mxfp4 is for MoE presets only.
  EXPECT_EQ(describe_model(opts("tiny", TensorType::kMXFP4)).status().code(), StatusCode::kInvalidArgument);
}

// ministral-3-3b: 3,429,006,336 parameters (the published "3.4B language model"), head_dim 128
// over 3072 / 32 written as attention.key_length, and Ministral 3's YaRN and temperature keys.
TEST(Describe, Ministral3PresetHasTheRealShapeAndItsKeys) {
  auto plan = describe_model(opts("ministral-3-3b", TensorType::kBF16));
  ASSERT_TRUE(plan) << plan.status().to_string();
  EXPECT_EQ(plan->n_params, 3429006336u);
  std::map<std::string, double> nums;
  std::string rope_type;
  for (const auto& [key, value] : plan->metadata) {
    if (const auto* u = std::get_if<std::uint64_t>(&value.data)) nums[key] = static_cast<double>(*u);
    if (const auto* f = std::get_if<double>(&value.data)) nums[key] = *f;
    if (key == "mistral3.rope.scaling.type") rope_type = std::get<std::string>(value.data);
  }
  EXPECT_EQ(rope_type, "yarn");
  EXPECT_EQ(nums["mistral3.attention.key_length"], 128);
  EXPECT_EQ(nums["mistral3.rope.scaling.factor"], 16);
  EXPECT_EQ(nums["mistral3.rope.scaling.original_context_length"], 16384);
  EXPECT_EQ(nums["mistral3.rope.scaling.yarn_log_multiplier"], 1);
  EXPECT_FLOAT_EQ(static_cast<float>(nums["mistral3.attention.temperature_scale"]), 0.1f);
  EXPECT_EQ(nums["mistral3.context_length"], 262144);
}

// phi3 files carry Phi-3's special tokens: llama.cpp's loader looks up "</s>" by name for them.
TEST(Describe, Phi3VocabularyHasPhi3Specials) {
  auto plan = describe_model(opts("phi3-tiny", TensorType::kF32));
  ASSERT_TRUE(plan) << plan.status().to_string();
  for (const auto& [key, value] : plan->metadata) {
    if (key != "tokenizer.ggml.tokens") continue;
    const auto& items = std::get<gguf::Array>(value.data).items;
    std::vector<std::string> tokens;
    for (const auto& t : items) tokens.push_back(std::get<std::string>(t.data));
    for (const char* special : {"<unk>", "<s>", "</s>", "<|endoftext|>", "<|end|>", "<|assistant|>"}) {
      EXPECT_NE(std::find(tokens.begin(), tokens.end(), special), tokens.end()) << special;
    }
    return;
  }
  FAIL() << "no tokenizer.ggml.tokens";
}

TEST(Describe, Llama3RopeFreqs) {
  std::vector<float> f = llama3_rope_freqs(64, 500000.0f);
  ASSERT_EQ(f.size(), 32u);
  EXPECT_EQ(f.front(), 1.0f);  // the fastest rotations are left alone
  EXPECT_EQ(f.back(), 32.0f);  // the slowest are divided by the full factor
  for (std::size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
  int smooth = 0;
  for (float x : f) smooth += x > 1.0f && x < 32.0f;
  EXPECT_GT(smooth, 0) << "some dimensions fall in the smoothed band";
}

TEST(Describe, RejectsBadOptions) {
  EXPECT_EQ(describe_model(opts("gpt-5", TensorType::kF16)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(describe_model(opts("tiny", TensorType::kQ4_K)).status().code(), StatusCode::kInvalidArgument);
  GenerateOptions o = opts("tiny", TensorType::kF16);
  o.vocab_path = "/nonexistent/vocab.gguf";
  EXPECT_EQ(describe_model(o).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(generate_model(opts("tiny", TensorType::kF16)).code(), StatusCode::kInvalidArgument) << "no out path";
}

}  // namespace
}  // namespace kvstash::modelgen
