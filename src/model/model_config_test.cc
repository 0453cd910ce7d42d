// The per-layer description: what the loader maps each architecture to, and that whatever the
// forward pass does not run is refused by name rather than ignored.
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(CheckRunnable, RefusesWhatForwardDoesNotRunByName) {
  const ModelConfig base = described("tiny");
  ASSERT_TRUE(check_runnable(base).is_ok());
  struct Case {
    const char* expect_in_message;
    void (*change)(ModelConfig&);
  };
  const Case cases[] = {
      {"sinks", [](ModelConfig& c) { c.layers[0].attention.kind = AttentionKind::kSinks; }},
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
