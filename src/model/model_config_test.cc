// The per-layer description: what the loader maps each architecture to, and that whatever the
// forward pass does not run is refused by name rather than ignored.
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "model/architectures.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

using gguf::TensorType;

ModelConfig described(const std::string& preset) {
  auto file = gguf::File::open(testing::test_model_path(preset, TensorType::kF32));
  EXPECT_TRUE(file.has_value());
  ModelConfig c;
  if (file) {
    Status st = describe_architecture(**file, &c);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  }
  return c;
}

TEST(Architectures, Qwen2LayersHaveBiasesAndHalvesRope) {
  const ModelConfig c = described("tiny");
  ASSERT_EQ(static_cast<int>(c.layers.size()), c.n_layers);
  for (const LayerSpec& l : c.layers) {
    EXPECT_EQ(l.attention.kind, AttentionKind::kFull);
    EXPECT_TRUE(l.attention.qkv_bias);
    EXPECT_FALSE(l.attention.qk_norm);
    EXPECT_EQ(l.attention.rope.style, RopeStyle::kHalves);
    EXPECT_EQ(l.ffn.kind, FfnKind::kSwiGlu);
    EXPECT_EQ(l.ffn.n_ff, c.n_ff);
  }
  EXPECT_FALSE(c.has_moe());
}

TEST(Architectures, LlamaLayersHaveNoBiasesAndInterleavedRope) {
  const ModelConfig c = described("tiny-llama");
  for (const LayerSpec& l : c.layers) {
    EXPECT_FALSE(l.attention.qkv_bias);
    EXPECT_FALSE(l.attention.qk_norm);
    EXPECT_EQ(l.attention.rope.style, RopeStyle::kInterleaved);
  }
}

TEST(Architectures, Qwen3HasQkNormAndItsOwnHeadDim) {
  const ModelConfig c = described("qwen3-tiny");
  EXPECT_EQ(c.architecture, "qwen3");
  EXPECT_NE(c.head_dim, c.n_embd / c.n_heads);  // the preset is chosen so that they differ
  for (const LayerSpec& l : c.layers) {
    EXPECT_TRUE(l.attention.qk_norm);
    EXPECT_FALSE(l.attention.qkv_bias);
    EXPECT_EQ(l.attention.rope.style, RopeStyle::kHalves);
    EXPECT_EQ(l.ffn.kind, FfnKind::kSwiGlu);
  }
}

TEST(Architectures, Qwen3MoeLayersRouteToExperts) {
  const ModelConfig c = described("qwen3moe-tiny");
  EXPECT_TRUE(c.has_moe());
  for (const LayerSpec& l : c.layers) {
    EXPECT_TRUE(l.attention.qk_norm);
    ASSERT_EQ(l.ffn.kind, FfnKind::kMoe);
    EXPECT_GT(l.ffn.moe.n_experts, l.ffn.moe.n_used);
    EXPECT_GT(l.ffn.moe.n_ff_expert, 0);
    EXPECT_TRUE(l.ffn.moe.renormalize);
  }
}

TEST(Architectures, Gemma3HasLocalLayersWithTheirOwnRope) {
  const ModelConfig c = described("gemma3-tiny");
  ASSERT_EQ(c.n_layers, 7);
  EXPECT_TRUE(c.has_local_layers());
  EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);  // sqrt(64)
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / std::sqrt(32.0f));
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerSpec& l = c.layers[static_cast<std::size_t>(i)];
    const bool local = i % 6 < 5;  // llama.cpp's default pattern: layer 5 global
    EXPECT_EQ(l.attention.kind, local ? AttentionKind::kSlidingWindow : AttentionKind::kFull) << i;
    EXPECT_EQ(l.attention.window, local ? 8 : 0) << i;
    EXPECT_FLOAT_EQ(l.attention.rope.base, local ? 10000.0f : 1e6f) << i;
    EXPECT_TRUE(l.attention.qk_norm);
    EXPECT_TRUE(l.post_attention_norm);
    EXPECT_TRUE(l.post_ffn_norm);
    EXPECT_EQ(l.ffn.kind, FfnKind::kGeluGated);
  }
  EXPECT_TRUE(check_runnable(c).is_ok());
}

// A copy of `preset`'s F32 file with metadata keys set (added or replaced), for mapping tests.
std::unique_ptr<gguf::File> with_keys(const std::string& preset, const std::string& name,
                                      const std::vector<std::pair<std::string, gguf::Value>>& keys) {
  auto src = gguf::File::open(testing::test_model_path(preset, TensorType::kF32));
  EXPECT_TRUE(src.has_value());
  gguf::Writer w;
  for (const auto& [k, v] : (*src)->metadata()) w.set(k, v);
  for (const auto& [k, v] : keys) w.set(k, v);
  for (const auto& t : (*src)->tensors()) EXPECT_TRUE(w.add_tensor(t.name, t.type, t.dims).is_ok());
  // Per process: the tests of this binary may run in parallel with another copy of it.
  const std::string out = std::string(KVSTASH_BINARY_DIR) + "/test-models/pid" + std::to_string(::getpid()) + "-" + name;
  EXPECT_TRUE(w.write(out, [&](std::size_t i, std::span<std::uint8_t> bytes) {
                 std::memcpy(bytes.data(), (*src)->tensors()[i].data, bytes.size());
                 return Status::ok();
               }).is_ok());
  auto f = gguf::File::open(out);
  std::filesystem::remove(out);  // the mapping stays valid
  EXPECT_TRUE(f.has_value());
  return f ? std::move(*f) : nullptr;
}

TEST(Architectures, RopeScalingLinearIsAppliedOthersAreRefusedByName) {
  auto linear = with_keys("qwen3-tiny", "rope-linear.gguf",
                          {{"qwen3.rope.scaling.type", gguf::Value::string("linear")},
                           {"qwen3.rope.scaling.factor", gguf::Value::f32(4.0f)}});
  ASSERT_TRUE(linear);
  ModelConfig c;
  ASSERT_TRUE(describe_architecture(*linear, &c).is_ok());
  EXPECT_FLOAT_EQ(c.rope_scale, 0.25f);
  EXPECT_FLOAT_EQ(c.layers[1].attention.rope.scale, 0.25f);

  // YaRN: the scale, its original context, and cos/sin × (1 + 0.1 ln factor) on every layer.
  auto yarn = with_keys("qwen3-tiny", "rope-yarn.gguf",
                        {{"qwen3.rope.scaling.type", gguf::Value::string("yarn")},
                         {"qwen3.rope.scaling.factor", gguf::Value::f32(4.0f)},
                         {"qwen3.rope.scaling.original_context_length", gguf::Value::u32(1024)}});
  ASSERT_TRUE(yarn);
  ModelConfig y;
  ASSERT_TRUE(describe_architecture(*yarn, &y).is_ok());
  EXPECT_FLOAT_EQ(y.layers[1].attention.rope.scale, 0.25f);
  EXPECT_EQ(y.layers[1].attention.rope.yarn_original_ctx, 1024);
  EXPECT_FLOAT_EQ(y.layers[1].attention.rope.magnitude, static_cast<float>(1.0 + 0.1 * std::log(4.0)));

  auto longrope = with_keys("qwen3-tiny", "rope-longrope.gguf",
                            {{"qwen3.rope.scaling.type", gguf::Value::string("longrope")},
                             {"qwen3.rope.scaling.factor", gguf::Value::f32(4.0f)}});
  ASSERT_TRUE(longrope);
  ModelConfig lr;
  const Status st = describe_architecture(*longrope, &lr);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("'longrope'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("supported: none, llama3, linear, yarn"), std::string::npos) << st.message();
}

// A llama file with attention.sliding_window (Mistral 7B v0.1) windows every layer, its RoPE the
// global one; without the key (tiny-llama) every layer is full.
TEST(Architectures, MistralLlamaWindowsEveryLayer) {
  const ModelConfig m = described("mistral-tiny");
  for (const LayerSpec& l : m.layers) {
    EXPECT_EQ(l.attention.kind, AttentionKind::kSlidingWindow);
    EXPECT_EQ(l.attention.window, 8);
    EXPECT_TRUE(l.attention.rope == m.full_rope());
  }
  for (const LayerSpec& l : described("tiny-llama").layers) EXPECT_EQ(l.attention.kind, AttentionKind::kFull);
}

// mistral3: llama's interleaved RoPE with YaRN (factor 16 over 32), whose magnitude the
// yarn_log_multiplier of 1 cancels; every layer's queries get the temperature 0.1 over 32 positions.
TEST(Architectures, Mistral3HasYarnAndQueryTemperature) {
  const ModelConfig c = described("mistral3-tiny");
  EXPECT_EQ(c.architecture, "mistral3");
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c.head_dim, 32);  // attention.key_length: 4 heads of 32 over 64
  EXPECT_FLOAT_EQ(c.rope_scale, 1.0f / 16.0f);
  EXPECT_EQ(c.rope_yarn_original_ctx, 32);
  EXPECT_FLOAT_EQ(c.rope_magnitude, 1.0f);  // (1 + 0.1 ln 16) / (1 + 0.1 · 1 · ln 16)
  ASSERT_EQ(c.n_layers, 2);
  for (const LayerSpec& l : c.layers) {
    EXPECT_EQ(l.attention.kind, AttentionKind::kFull);
    EXPECT_FALSE(l.attention.qkv_bias);
    EXPECT_FLOAT_EQ(l.attention.temperature_scale, 0.1f);
    EXPECT_EQ(l.attention.temperature_length, 32);
    EXPECT_EQ(l.ffn.kind, FfnKind::kSwiGlu);
    EXPECT_TRUE(l.attention.rope == c.full_rope());
  }
  EXPECT_FALSE(c.has_local_layers());

  // A multiplier of 2: cos and sin × (1 + 0.1 ln 16) / (1 + 0.2 ln 16), as llama.cpp's yarn_attn_factor.
  auto mul2 = with_keys("mistral3-tiny", "mistral3-mul2.gguf", {{"mistral3.rope.scaling.yarn_log_multiplier", gguf::Value::f32(2.0f)}});
  ASSERT_TRUE(mul2);
  ModelConfig m;
  ASSERT_TRUE(describe_architecture(*mul2, &m).is_ok());
  EXPECT_FLOAT_EQ(m.rope_magnitude, static_cast<float>((1.0 + 0.1 * std::log(16.0)) / (1.0 + 0.2 * std::log(16.0))));

  // Without the temperature key: none.
  auto cold = with_keys("mistral3-tiny", "mistral3-cold.gguf", {{"mistral3.attention.temperature_scale", gguf::Value::f32(0.0f)}});
  ASSERT_TRUE(cold);
  ModelConfig k;
  ASSERT_TRUE(describe_architecture(*cold, &k).is_ok());
  EXPECT_EQ(k.layers[0].attention.temperature_scale, 0.0f);
}

// What mistral3 may carry that is not built is refused by name: experts; yarn_log_multiplier on
// another architecture (llama.cpp's loaders for those ignore it) likewise.
TEST(Architectures, Mistral3ExpertsAndForeignYarnLogMultiplierAreRefused) {
  auto moe = with_keys("mistral3-tiny", "mistral3-moe.gguf", {{"mistral3.expert_count", gguf::Value::u32(8)}});
  ASSERT_TRUE(moe);
  ModelConfig c;
  Status st = describe_architecture(*moe, &c);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("mistral3 with experts"), std::string::npos) << st.message();

  auto qwen = with_keys("qwen3-tiny", "qwen3-yarn-mul.gguf",
                        {{"qwen3.rope.scaling.type", gguf::Value::string("yarn")},
                         {"qwen3.rope.scaling.factor", gguf::Value::f32(4.0f)},
                         {"qwen3.rope.scaling.yarn_log_multiplier", gguf::Value::f32(1.0f)}});
  ASSERT_TRUE(qwen);
  st = describe_architecture(*qwen, &c);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("yarn_log_multiplier"), std::string::npos) << st.message();
}

// gpt-oss: even layers windowed, odd full, all with the global YaRN RoPE and sinks; the experts
// ranked by logit, softmax over the k kept, biased, with the clamped SwiGLU.
TEST(Architectures, GptOssAlternatesWindowsWithSinksAndBiasedExperts) {
  const ModelConfig c = described("gpt-oss-tiny");
  EXPECT_EQ(c.architecture, "gpt-oss");
  ASSERT_EQ(c.n_layers, 4);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerSpec& l = c.layers[static_cast<std::size_t>(i)];
    EXPECT_EQ(l.attention.kind == AttentionKind::kSlidingWindow, i % 2 == 0) << i;
    if (i % 2 == 0) {
      EXPECT_EQ(l.attention.window, 8);
    }
    EXPECT_TRUE(l.attention.sinks);
    EXPECT_TRUE(l.attention.qkv_bias);
    EXPECT_TRUE(l.attention.output_bias);
    EXPECT_TRUE(l.attention.rope == c.full_rope()) << i;  // local layers share the global RoPE
    EXPECT_EQ(l.ffn.kind, FfnKind::kMoe);
    EXPECT_EQ(l.ffn.moe.gating, ExpertGating::kTopKSoftmax);
    EXPECT_FALSE(l.ffn.moe.renormalize);
    EXPECT_EQ(l.ffn.moe.activation, ExpertActivation::kClampedSwiGlu);
    EXPECT_TRUE(l.ffn.moe.router_bias);
    EXPECT_TRUE(l.ffn.moe.expert_biases);
  }
  EXPECT_EQ(c.rope_yarn_original_ctx, 4096);
  EXPECT_FLOAT_EQ(c.rope_scale, 1.0f / 32.0f);
  EXPECT_FLOAT_EQ(c.rope_magnitude, static_cast<float>(1.0 + 0.1 * std::log(32.0)));
}

// phi3's LongRoPE: the long factors when the model's context exceeds the original one, the short
// ones otherwise; rope.scaling.attn_factor scales every layer's rotation.
TEST(Architectures, Phi3LongRopePicksItsFactorsByContext) {
  const ModelConfig c = described("phi3-tiny");  // context 4096 over an original 512
  EXPECT_EQ(c.architecture, "phi3");
  EXPECT_EQ(c.rope_factors_tensor, "rope_factors_long.weight");
  EXPECT_EQ(c.rope_style, RopeStyle::kHalves);
  EXPECT_NEAR(c.rope_magnitude, 1.19024f, 1e-5f);
  for (const LayerSpec& l : c.layers) {
    EXPECT_EQ(l.attention.kind, AttentionKind::kFull);
    EXPECT_FLOAT_EQ(l.attention.rope.magnitude, c.rope_magnitude);
  }
  EXPECT_FALSE(c.has_local_layers());
  auto within = with_keys("phi3-tiny", "phi3-short.gguf",
                          {{"phi3.rope.scaling.original_context_length", gguf::Value::u32(4096)}});
  ASSERT_TRUE(within);
  ModelConfig s;
  ASSERT_TRUE(describe_architecture(*within, &s).is_ok());
  EXPECT_EQ(s.rope_factors_tensor, "rope_factors_short.weight");
}

// gemma3 files may name the local layers one by one (a bool per layer) instead of a period.
TEST(Architectures, Gemma3WindowPatternAsAPerLayerArray) {
  gguf::Array pattern;
  pattern.elem_type = gguf::ValueType::kBool;
  for (bool local : {true, false, true, true, false, false, true}) pattern.items.push_back(gguf::Value::boolean(local));
  gguf::Value value;
  value.type = gguf::ValueType::kArray;
  value.data = pattern;
  auto f = with_keys("gemma3-tiny", "gemma3-pattern.gguf", {{"gemma3.attention.sliding_window_pattern", value}});
  ASSERT_TRUE(f);
  ModelConfig c;
  ASSERT_TRUE(describe_architecture(*f, &c).is_ok());
  const bool want[7] = {true, false, true, true, false, false, true};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(c.layers[static_cast<std::size_t>(i)].attention.kind == AttentionKind::kSlidingWindow, want[i]) << i;
    EXPECT_FLOAT_EQ(c.layers[static_cast<std::size_t>(i)].attention.rope.base, want[i] ? 10000.0f : 1e6f) << i;
  }
  // A period of 3: layers 0, 1, 3, 4 and 6 local.
  auto p3 = with_keys("gemma3-tiny", "gemma3-p3.gguf", {{"gemma3.attention.sliding_window_pattern", gguf::Value::u32(3)}});
  ASSERT_TRUE(p3);
  ModelConfig c3;
  ASSERT_TRUE(describe_architecture(*p3, &c3).is_ok());
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(c3.layers[static_cast<std::size_t>(i)].attention.kind == AttentionKind::kSlidingWindow, i % 3 < 2) << i;
  }
}

TEST(CheckRunnable, RefusesWhatForwardDoesNotRunByName) {
  const ModelConfig base = described("tiny");
  ASSERT_TRUE(check_runnable(base).is_ok());
  struct Case {
    const char* expect_in_message;
    void (*change)(ModelConfig&);
  };
  const Case cases[] = {
      {"RoPE style", [](ModelConfig& c) { c.layers[1].attention.rope.style = RopeStyle::kInterleaved; }},
  };
  for (const Case& k : cases) {
    ModelConfig c = base;
    k.change(c);
    const Status st = check_runnable(c);
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << k.expect_in_message;
    EXPECT_NE(st.message().find(k.expect_in_message), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("'qwen2'"), std::string::npos) << st.message();
  }
  ModelConfig bad_moe = base;
  bad_moe.layers[0].ffn.kind = FfnKind::kMoe;  // no experts described
  EXPECT_EQ(check_runnable(bad_moe).code(), StatusCode::kInternal);
  ModelConfig no_window = base;
  no_window.layers[0].attention.kind = AttentionKind::kSlidingWindow;  // window 0
  EXPECT_EQ(check_runnable(no_window).code(), StatusCode::kInternal);
  // What forward runs: windows, their own RoPE base, GELU, post-norms, a soft-cap.
  ModelConfig runnable = base;
  runnable.layers[0].attention.kind = AttentionKind::kSlidingWindow;
  runnable.layers[0].attention.window = 4;
  runnable.layers[0].attention.rope.base = 10000.0f;
  runnable.layers[1].ffn.kind = FfnKind::kGeluGated;
  runnable.layers[1].post_ffn_norm = true;
  runnable.logit_softcap = 30.0f;
  EXPECT_TRUE(check_runnable(runnable).is_ok());
  EXPECT_TRUE(runnable.has_local_layers());
  EXPECT_FALSE(base.has_local_layers());
}

}  // namespace
}  // namespace kvstash
