// What a loaded model computes, as data: the model-wide shape and, per layer, which attention,
// norms, biases, RoPE and feed-forward it runs. The loader maps each GGUF architecture onto this
// description (model/architectures.cc); the forward pass walks it and has no per-architecture
// branches, so a new architecture is a mapping plus whatever kernel is genuinely new.
//
// Every kind named here is either run by forward() or refused at load by name
// (check_runnable): the description never holds something the forward pass would ignore.
//
// Thread safety: plain values; a Model's config is immutable after load.
#pragma once

#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash {

enum class RopeStyle {
  kInterleaved,  // GGUF `llama`: rotate pairs (x[2i], x[2i+1]); Q/K rows were permuted by the converter
  kHalves,       // GGUF `qwen2`, `qwen3` (NEOX style): rotate pairs (x[i], x[i + d/2])
};

// Rotary position embedding of one layer. Per-pair frequency divisors (Llama 3's rope_freqs.weight)
// are a tensor, held by the Model; they apply to every layer that has them.
struct RopeSpec {
  float base = 10000.0f;                 // the angle of pair i per position is base^(-2i/head_dim) * scale
  float scale = 1.0f;                    // linear rope scaling: 1 / rope.scaling.factor; 1: none
  RopeStyle style = RopeStyle::kInterleaved;
  // cos and sin are multiplied by it, so Q.K by its square (llama.cpp's attn_factor:
  // rope.scaling.attn_factor, phi3's LongRoPE); 1: none.
  float magnitude = 1.0f;
  // YaRN (rope.scaling.type yarn; gpt-oss): > 0 is the original context. Pair i's angle blends
  // the scaled (× scale) and unscaled ones by a ramp over the pairs whose wavelength lies between
  // those that turn beta_fast and beta_slow times in the original context (llama.cpp's
  // ggml_rope_yarn_corr_dims); magnitude then includes 1 + 0.1 ln(1 / scale).
  int yarn_original_ctx = 0;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  bool operator==(const RopeSpec&) const = default;
};

enum class AttentionKind {
  kFull,           // causal over every earlier token of the sequence
  kSlidingWindow,  // causal, key j visible to query i iff i - j < window (gemma3's local layers)
};

struct AttentionSpec {
  AttentionKind kind = AttentionKind::kFull;
  int window = 0;          // kSlidingWindow only: tokens a query sees, itself included
  bool qkv_bias = false;   // attn_{q,k,v}.bias added after the projections (qwen2)
  bool qk_norm = false;    // RMSNorm of every Q and K head (head_dim wide, one weight vector for all
                           // heads) before RoPE (qwen3)
  bool output_bias = false;  // attn_output.bias added after the output projection (gpt-oss)
  // One learned logit per query head (attn_sinks) that joins each softmax's denominator only: the
  // head may attend to "nothing" (gpt-oss). With either kind.
  bool sinks = false;
  RopeSpec rope;
  // Query temperature by position (mistral3's attention.temperature_scale, Llama 4's): after RoPE,
  // Q of the token at position p is multiplied by 1 + temperature_scale * ln(1 + floor(p /
  // temperature_length)), so far tokens sharpen their attention. temperature_scale 0: none.
  float temperature_scale = 0.0f;
  int temperature_length = 0;  // > 0 whenever temperature_scale is not 0 (the YaRN original context)
};

enum class FfnKind {
  kSwiGlu,     // down(silu(gate(x)) * up(x))
  kGeluGated,  // down(gelu_tanh(gate(x)) * up(x)) (gemma3), GELU as llama.cpp's CPU F16 table gives it
  kMoe,        // a router picks experts per token, each a SwiGLU; their outputs weighted and summed
};

// How the router's logits become expert weights.
enum class ExpertGating {
  kSoftmaxTopK,    // softmax over all experts, keep the top k; renormalised to sum 1 when `renormalize` (qwen3moe)
  kTopKSoftmax,    // the k largest logits, then softmax over those k (gpt-oss; llama.cpp's SOFTMAX_WEIGHT)
};

// What an expert computes between its gate/up and down projections.
enum class ExpertActivation {
  kSwiGlu,         // silu(gate) * up
  // gpt-oss's: g = min(gate, limit), u = clamp(up, -limit, limit), g * sigmoid(alpha g) * (u + 1),
  // alpha 1.702, limit 7 (llama.cpp's swiglu_oai).
  kClampedSwiGlu,
};

struct MoeSpec {
  int n_experts = 0;      // routed experts per layer (expert_count)
  int n_used = 0;         // experts each token runs (expert_used_count)
  int n_ff_expert = 0;    // hidden width of one expert (expert_feed_forward_length)
  ExpertGating gating = ExpertGating::kSoftmaxTopK;
  bool renormalize = true;  // divide the k kept weights by their sum
  ExpertActivation activation = ExpertActivation::kSwiGlu;
  bool router_bias = false;   // ffn_gate_inp.bias added to the router's logits (gpt-oss)
  bool expert_biases = false;  // ffn_{gate,up,down}_exps.bias: per expert, added after each projection (gpt-oss)
};

struct FfnSpec {
  FfnKind kind = FfnKind::kSwiGlu;
  int n_ff = 0;  // hidden width of the dense feed-forward (kSwiGlu, kGeluGated)
  MoeSpec moe;   // kMoe only
};

// One transformer block: x += [post_norm](attention(norm(x))); x += [post_norm](ffn(norm(x))).
struct LayerSpec {
  AttentionSpec attention;
  bool post_attention_norm = false;  // RMSNorm of the attention output before the residual add (gemma3)
  bool post_ffn_norm = false;        // the same for the feed-forward output (gemma3)
  FfnSpec ffn;
};

struct ModelConfig {
  std::string architecture;  // GGUF general.architecture: "llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "gpt-oss" or "mistral3"
  std::string name;          // general.name, or the file's stem
  int n_layers = 0;
  int n_embd = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;          // may differ from n_embd / n_heads (qwen3: attention.key_length)
  int n_ff = 0;              // feed_forward_length; for MoE models the dense width the file declares
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  // The RoPE of the full-attention layers (Model::rope_inv_freq); KV compaction
  // (engine/kv_compactor.h) re-rotates keys with it, so a model whose layers differ (gemma3's
  // local layers) refuses compacted sequences (forward: kInternal).
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;  // linear rope scaling of the full-attention layers: 1 / factor
  RopeStyle rope_style = RopeStyle::kInterleaved;
  float rope_magnitude = 1.0f;  // RopeSpec::magnitude of the full-attention layers
  // The tensor of per-pair frequency divisors applied to every layer, when the file has it: Llama
  // 3's rope_freqs.weight, or phi3's LongRoPE rope_factors_long / rope_factors_short (architectures.cc
  // picks one for the context).
  std::string rope_factors_tensor = "rope_freqs.weight";
  int rope_yarn_original_ctx = 0;  // RopeSpec's YaRN of the full-attention layers; 0: none
  float rope_yarn_beta_fast = 32.0f, rope_yarn_beta_slow = 1.0f;
  RopeSpec full_rope() const {
    return {rope_base, rope_scale, rope_style, rope_magnitude, rope_yarn_original_ctx, rope_yarn_beta_fast, rope_yarn_beta_slow};
  }
  bool tied_output = false;      // the output projection is token_embd
  float embedding_scale = 1.0f;  // token embeddings are multiplied by it (gemma3: sqrt(n_embd)); 1: none
  float attention_scale = 0.0f;  // Q.K multiplier; 0: 1 / sqrt(head_dim)
  float logit_softcap = 0.0f;    // > 0: logits = cap * tanh(logits / cap) (final_logit_softcapping)
  std::vector<LayerSpec> layers;  // n_layers entries

  int kv_row_elems() const { return n_kv_heads * head_dim; }  // K (or V) elements per token per layer
  bool has_moe() const;  // some layer's feed-forward is kMoe
  // Some layer's attention or RoPE is not the model-wide full attention with rope_base/rope_style.
  bool has_local_layers() const;
};

// kUnsupported naming the first thing in `c` that forward() does not run (a RoPE style that
// differs between layers); kInternal for a description that contradicts itself
// (no experts, no window width); ok otherwise.
Status check_runnable(const ModelConfig& c);

}  // namespace kvstash
