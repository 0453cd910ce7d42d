#include "modelgen/presets.h"

#include <array>

namespace kvstash::modelgen {
namespace {

// Shapes from each model's config.json (hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings, rope_theta,
// rms_norm_eps, tie_word_embeddings).
// tiny-k: the smallest shape whose rows are whole 256-weight K super-blocks, for tests of the K
// quantization types in a model (tiny's 64-wide rows fall back to 32-weight types).
// qwen3-tiny and qwen3moe-tiny: head_dim 32 with 4 heads of a 64-wide model, so that
// n_heads * head_dim != n_embd as in real Qwen3 (0.6B: 16 x 128 over 1024); qwen3moe-tiny has 16
// experts (not 8: llama.cpp's quantizer treats exactly 8 as Mixtral) of which 4 run per token, and
// its own output matrix (Qwen3-30B-A3B does not tie it).
// Qwen3-0.6B and Qwen3-30B-A3B: config.json's head_dim 128, moe_intermediate_size 768,
// num_experts 128, num_experts_per_tok 8, norm_topk_prob true, max_position_embeddings 40960.
// qwen3moe-scaled: Qwen3-30B-A3B's layers in 8 of its 48 (a 3.4 GB Q4_K_M file, where the real one's
// 18 GB does not fit a benchmark machine beside everything else), for MoE speed against llama.cpp.
ModelPreset qwen3(std::string name, std::string arch, std::uint32_t layers, std::uint32_t embd, std::uint32_t heads,
                  std::uint32_t kv_heads, std::uint32_t head_dim, std::uint32_t ff, std::uint64_t vocab, std::uint32_t ctx,
                  bool tied, std::uint32_t experts = 0, std::uint32_t used = 0, std::uint32_t ff_expert = 0) {
  ModelPreset p{std::move(name), std::move(arch), layers, embd, heads, kv_heads, head_dim, ff, vocab, ctx,
                1e6f, 1e-6f, tied, false, false};
  p.qk_norm = true;
  p.n_experts = experts;
  p.n_experts_used = used;
  p.n_ff_expert = ff_expert;
  return p;
}

// Gemma 3 1B: hidden 1152, 26 layers, 4 heads of 256, 1 KV head, intermediate 6912, vocab 262144,
// sliding_window 512, rope_theta 1e6 and rope_local_base_freq 1e4, tied. gemma3-tiny: 7 layers, so
// that layer 5 is global and 6 local again; a window of 8 that the tests' prompts pass.
ModelPreset gemma3(std::string name, std::uint32_t layers, std::uint32_t embd, std::uint32_t heads,
                   std::uint32_t kv_heads, std::uint32_t head_dim, std::uint32_t ff, std::uint64_t vocab, std::uint32_t ctx,
                   std::uint32_t window) {
  ModelPreset p{std::move(name), "gemma3", layers, embd, heads, kv_heads, head_dim, ff, vocab, ctx,
                1e6f, 1e-6f, true, false, false};
  p.qk_norm = true;
  p.post_norms = true;
  p.sliding_window = window;
  p.rope_base_swa = 10000.0f;
  return p;
}

// Phi-3-mini-128k-instruct: hidden 3072, 32 layers, 32 heads (and KV heads) of 96, intermediate
// 8192, vocab 32064, max_position_embeddings 131072, original_max_position_embeddings 4096,
// rope_theta 10000, rms_norm_eps 1e-5, untied; LongRoPE with attn_factor sqrt(1 + ln(32) / ln(4096))
// (the converter's). phi3-tiny: the same layout at 64 wide, n_ctx 4096 over an original 512 so the
// long factors apply (also under llama.cpp's -c 1024 of scripts/record-golden.sh).
ModelPreset phi3(std::string name, std::uint32_t layers, std::uint32_t embd, std::uint32_t heads, std::uint32_t kv_heads,
                 std::uint32_t head_dim, std::uint32_t ff, std::uint64_t vocab, std::uint32_t ctx, std::uint32_t original) {
  ModelPreset p{std::move(name), "phi3", layers, embd, heads, kv_heads, head_dim, ff, vocab, ctx,
                10000.0f, 1e-5f, false, false, false};
  p.fused_qkv_gate_up = true;
  p.longrope_original_ctx = original;
  p.rope_attn_factor = 1.1902380714238083f;
  return p;
}

// gpt-oss-20b (config.json): hidden 2880, 24 layers, 64 heads of 64, 8 KV heads, 32 experts of
// 2880, 4 used, sliding_window 128 on even layers, rope_theta 150000 with YaRN factor 32 over
// 4096, max_position_embeddings 131072, rms_norm_eps 1e-5, vocab 201088, untied. gpt-oss-tiny: 4
// layers (two windowed, two full), 64 wide, 4 heads of 32 (128 != 64, as 4096 != 2880), 2 KV, a
// window of 8 that the tests' prompts pass, 16 experts (not 8: llama.cpp's quantizer treats 8 as
// Mixtral) of width 64, 4 used; the real RoPE (its YaRN ramp falls inside 16 pairs). gpt-oss-scaled:
// gpt-oss-20b with 4 of its 24 layers (every per-layer shape and the vocabulary real; about 3 GB as
// `mxfp4_moe`), for benchmarks against llama.cpp on a machine where the 12 GB of the real one do not fit.
ModelPreset gpt_oss(std::string name, std::uint32_t layers, std::uint32_t embd, std::uint32_t heads,
                    std::uint32_t kv_heads, std::uint32_t head_dim, std::uint64_t vocab, std::uint32_t experts,
                    std::uint32_t ff_expert, std::uint32_t window) {
  ModelPreset p{std::move(name), "gpt-oss", layers, embd, heads, kv_heads, head_dim, ff_expert, vocab, 131072,
                150000.0f, 1e-5f, false, true, false};
  p.gpt_oss_layout = true;
  p.n_experts = experts;
  p.n_experts_used = 4;
  p.n_ff_expert = ff_expert;
  p.sliding_window = window;
  p.yarn_factor = 32.0f;
  p.yarn_original_ctx = 4096;
  return p;
}

// mistral-tiny: tiny-llama's shape (ff 128) with a window of 8 on every layer (llama.attention.sliding_window,
// as Mistral 7B v0.1's 4096).
ModelPreset mistral_tiny() {
  ModelPreset p{"mistral-tiny", "llama", 2, 64, 4, 2, 16, 128, 0, 4096, 1e6f, 1e-5f, false, false, false};
  p.sliding_window = 8;
  return p;
}

// Ministral 3 (mistral3; config.json text_config): rope_theta 1e6, YaRN factor 16 over
// original_max_position_embeddings 16384 (max_position_embeddings 262144), beta_fast 32,
// beta_slow 1, mscale_all_dim 1, llama_4_scaling_beta 0.1; head_dim 128 over hidden 3072 with 32
// heads (4096 != 3072), 8 KV heads, rms_norm_eps 1e-5; the 3B: 26 layers, intermediate 9216,
// vocab 131072, tied. mistral3-tiny: the same layout at 64 wide (4 heads of 32, 2 KV, 2 layers,
// untied) with an original context of 32, so that the tests' prompts (up to 103 positions) cross
// three temperature steps (Q × 1 + 0.1 ln(1 + floor(pos / 32))).
ModelPreset mistral3(std::string name, std::uint32_t layers, std::uint32_t embd, std::uint32_t heads,
                     std::uint32_t kv_heads, std::uint32_t head_dim, std::uint32_t ff, std::uint64_t vocab, std::uint32_t ctx,
                     bool tied, std::uint32_t original) {
  ModelPreset p{std::move(name), "mistral3", layers, embd, heads, kv_heads, head_dim, ff, vocab, ctx,
                1e6f, 1e-5f, tied, false, false};
  p.yarn_factor = 16.0f;
  p.yarn_original_ctx = original;
  p.yarn_log_multiplier = 1.0f;
  p.attn_temperature_scale = 0.1f;
  return p;
}

const std::array<ModelPreset, 22>& presets() {
  static const std::array<ModelPreset, 22> kPresets = {{
      {"tiny", "qwen2", 2, 64, 4, 2, 16, 128, 0, 4096, 1e6f, 1e-6f, true, true, false},
      {"tiny-k", "qwen2", 2, 256, 4, 2, 64, 512, 0, 4096, 1e6f, 1e-6f, true, true, false},
      {"tiny-llama", "llama", 2, 64, 4, 2, 16, 160, 0, 4096, 5e5f, 1e-5f, false, false, false},
      {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e6f, 1e-6f, true, true, false},
      {"qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1e6f, 1e-6f, true, true, false},
      {"llama-3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 5e5f, 1e-5f, true, false, true},
      qwen3("qwen3-tiny", "qwen3", 2, 64, 4, 2, 32, 128, 0, 4096, true),
      qwen3("qwen3moe-tiny", "qwen3moe", 2, 64, 4, 2, 32, 128, 0, 4096, false, 16, 4, 32),
      qwen3("qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, true),
      qwen3("qwen3-1.7b", "qwen3", 28, 2048, 16, 8, 128, 6144, 151936, 40960, true),
      qwen3("qwen3-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 128, 6144, 151936, 40960, false, 128, 8, 768),
      qwen3("qwen3moe-scaled", "qwen3moe", 8, 2048, 32, 4, 128, 6144, 151936, 40960, false, 128, 8, 768),
      gemma3("gemma3-tiny", 7, 64, 4, 2, 32, 128, 0, 4096, 8),
      gemma3("gemma-3-1b", 26, 1152, 4, 1, 256, 6912, 262144, 32768, 512),
      phi3("phi3-tiny", 2, 64, 4, 2, 16, 160, 0, 4096, 512),
      phi3("phi-3-mini", 32, 3072, 32, 32, 96, 8192, 32064, 131072, 4096),
      mistral_tiny(),
      gpt_oss("gpt-oss-tiny", 4, 64, 4, 2, 32, 0, 16, 64, 8),
      gpt_oss("gpt-oss-20b", 24, 2880, 64, 8, 64, 201088, 32, 2880, 128),
      gpt_oss("gpt-oss-scaled", 4, 2880, 64, 8, 64, 201088, 32, 2880, 128),
      mistral3("mistral3-tiny", 2, 64, 4, 2, 32, 160, 0, 4096, false, 32),
      mistral3("ministral-3-3b", 26, 3072, 32, 8, 128, 9216, 131072, 262144, true, 16384),
  }};
  return kPresets;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelPreset& p : presets()) names.push_back(p.name);
  return names;
}

const ModelPreset* find_preset(std::string_view name) {
  for (const ModelPreset& p : presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace kvstash::modelgen
