// The model shapes `kvstash gen-model` can produce: tiny ones for tests and the exact shapes of
// real Qwen2.5, Qwen3, Qwen3-MoE, Gemma 3, Phi-3, gpt-oss, Ministral 3 and Llama 3.2 checkpoints (from their config.json) for benchmarks.
//
// Thread safety: the preset table is immutable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::modelgen {

struct ModelPreset {
  std::string name;          // "qwen2.5-0.5b"
  std::string arch;          // "qwen2", "llama", "qwen3", "qwen3moe", "gemma3", "phi3", "gpt-oss" or "mistral3": the GGUF general.architecture
  std::uint32_t n_layers = 0;
  std::uint32_t n_embd = 0;
  std::uint32_t n_heads = 0;
  std::uint32_t n_kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t n_ff = 0;
  std::uint64_t n_vocab = 0;  // 0: the built-in vocabulary's size
  std::uint32_t n_ctx = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = true;    // no output.weight; the token embedding doubles as the output matrix
  bool qkv_bias = false;      // qwen2 carries attn_{q,k,v}.bias
  bool llama3_rope_freqs = false;  // write rope_freqs.weight with Llama 3's rope scaling
  // > 0 (qwen2 shapes): the Q and K biases get this standard deviation instead of 0.1, so every
  // head's pre-RoPE queries and keys sit in a cluster around a non-zero centre, as in trained
  // models (what KV eviction by TriAttention scoring relies on). Set from GenerateOptions.
  float qk_concentration = 0.0f;
  // qwen3, qwen3moe: attn_q_norm / attn_k_norm per layer, and attention.key_length written.
  bool qk_norm = false;
  // qwen3moe: routed experts in place of the dense feed-forward (n_ff is then only declared).
  std::uint32_t n_experts = 0;       // expert_count; 0: a dense model
  std::uint32_t n_experts_used = 0;  // expert_used_count
  std::uint32_t n_ff_expert = 0;     // expert_feed_forward_length
  // gemma3: post_attention_norm / post_ffw_norm per layer, and local layers (llama.cpp's default
  // pattern: 5 of every 6) attending to the last `sliding_window` tokens with rope_base_swa.
  bool post_norms = false;
  std::uint32_t sliding_window = 0;  // 0: no sliding_window key
  float rope_base_swa = 10000.0f;
  // phi3: attn_qkv holds Q, K and V; ffn_up holds the gate and up halves (no ffn_gate).
  bool fused_qkv_gate_up = false;
  // phi3 LongRoPE: > 0 writes rope.scaling.original_context_length, rope.scaling.attn_factor and
  // the rope_factors_long / rope_factors_short tensors (the long ones apply: n_ctx > it).
  std::uint32_t longrope_original_ctx = 0;
  float rope_attn_factor = 1.0f;
  // gpt-oss: attn_sinks and attn_output.bias per layer (Q/K/V biases via qkv_bias), the router's
  // and the experts' biases, the pre-feed-forward norm named post_attention_norm (no ffn_norm),
  // attention.key_length written; windowed layers alternate with full ones (llama.cpp's default
  // period 2: no pattern key written) and share the global RoPE.
  bool gpt_oss_layout = false;
  // YaRN: > 0 writes rope.scaling.type yarn, this factor and yarn_original_ctx.
  float yarn_factor = 0.0f;
  std::uint32_t yarn_original_ctx = 0;
  // mistral3: > 0 writes rope.scaling.yarn_log_multiplier (Ministral 3's mscale_all_dim) and
  // attention.temperature_scale (its llama_4_scaling_beta).
  float yarn_log_multiplier = 0.0f;
  float attn_temperature_scale = 0.0f;
};

// Llama 3's rope scaling (config.json "rope_scaling" of Llama 3.2 1B).
struct Llama3RopeScaling {
  float factor = 32.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_context = 8192.0f;
};

std::vector<std::string> preset_names();
const ModelPreset* find_preset(std::string_view name);  // nullptr when unknown

}  // namespace kvstash::modelgen
