// The batched forward pass over a paged f16 KV cache, walking the ModelConfig's layer
// descriptions (model_config.h).
//
// Embedding (× the model's embedding scale). Per layer: RMSNorm → Q, K, V projections (+ bias where
// the layer has them) → per-head RMSNorm of Q and K where the layer has QK-norm → RoPE at each
// token's absolute position, with the layer's RoPE table (→ Q × its position's temperature where the
// layer has one: mistral3) → K, V stored into the pool → causal attention over the sequence's
// positions, or its last `window` of them for a sliding-window layer, with a per-head sink logit in
// the denominator where the layer has sinks (GQA: query head h reads KV head h / (n_heads /
// n_kv_heads)) → output projection (+ bias) (→ post-norm) + residual → RMSNorm → feed-forward
// (SwiGLU, GELU-gated, or a mixture of experts: model/moe.h) (→ post-norm) + residual. Then the
// final norm and the output projection for the rows that need logits (→ soft-cap).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "model/attention.h"
#include "model/model.h"

namespace kvstash {

const char* ForwardProfile::name(int phase) {
  static constexpr const char* kNames[kPhases] = {"embed",   "norms",   "qkv",  "bias+rope+kv", "attention", "attn output",
                                                  "gate+up", "silu*up", "down", "experts", "residual", "output"};
  return phase >= 0 && phase < kPhases ? kNames[phase] : "?";
}

namespace {

using attention::AttentionPlan;
using attention::TokenSlot;

// Closes forward()'s phases one after another into a ForwardProfile; does nothing without one.
class PhaseClock {
 public:
  explicit PhaseClock(ForwardProfile* profile) : profile_(profile) {
    if (profile_ == nullptr) return;
    ++profile_->passes;
    last_ = std::chrono::steady_clock::now();
  }
  // The time since the previous end() (or the start) goes to `phase`, with the bytes of `weights`
  // and `more_bytes`.
  void end(ForwardProfile::Phase phase, std::initializer_list<const kernels::WeightView*> weights = {},
           std::int64_t more_bytes = 0) {
    if (profile_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    profile_->seconds[phase] += std::chrono::duration<double>(now - last_).count();
    for (const kernels::WeightView* w : weights) profile_->weight_bytes[phase] += w->rows * static_cast<std::int64_t>(w->row_bytes);
    profile_->weight_bytes[phase] += more_bytes;
    last_ = now;
  }

 private:
  ForwardProfile* profile_;
  std::chrono::steady_clock::time_point last_;
};

// cos/sin of every rotated pair for every new token, computed once per forward pass in double
// (angles reach 1e5 radians at long contexts, where float loses the fraction).
struct RopeTable {
  std::vector<float> cos, sin;  // [token][pair]
  void build(const std::vector<TokenSlot>& slots, const std::vector<float>& inv_freq, float magnitude) {
    const std::size_t half = inv_freq.size();
    cos.resize(slots.size() * half);
    sin.resize(slots.size() * half);
    for (std::size_t t = 0; t < slots.size(); ++t) {
      for (std::size_t i = 0; i < half; ++i) {
        double angle = static_cast<double>(slots[t].pos) * static_cast<double>(inv_freq[i]);
        cos[t * half + i] = static_cast<float>(std::cos(angle)) * magnitude;
        sin[t * half + i] = static_cast<float>(std::sin(angle)) * magnitude;
      }
    }
  }
};

void apply_rope(float* head, int head_dim, RopeStyle style, const float* cs, const float* sn) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    // llama (GGUF): the converter permuted Q/K rows so that rotated pairs are adjacent;
    // qwen2 (NEOX layout): pair i is (i, i + half), as in the original checkpoints.
    const int a = style == RopeStyle::kInterleaved ? 2 * i : i;
    const int b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cs[i] - x1 * sn[i];
    head[b] = x0 * sn[i] + x1 * cs[i];
  }
}

// Adds one token's pre-RoPE query to the running statistics (BatchSequence::q_stats).
void add_query_stats(const float* q, int n_heads, int head_dim, RopeStyle style, float* stats) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    const float* head = q + static_cast<std::size_t>(h) * head_dim;
    float* out = stats + static_cast<std::size_t>(h) * half * 3;
    for (int i = 0; i < half; ++i) {
      const int a = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      out[3 * i] += head[a];
      out[3 * i + 1] += head[b];
      out[3 * i + 2] += std::sqrt(head[a] * head[a] + head[b] * head[b]);
    }
  }
}

// QK-norm: RMSNorm of each head_dim-wide head of each row, with one weight vector for all heads.
void norm_heads(float* rows, int n_rows, int n_heads, int head_dim, const std::vector<float>& weight, float eps) {
  const std::size_t n = static_cast<std::size_t>(n_rows) * n_heads;
  for (std::size_t i = 0; i < n; ++i) {
    float* head = rows + i * static_cast<std::size_t>(head_dim);
    kernels::rms_norm(head, weight.data(), head_dim, eps, head);
  }
}

void add_bias(float* rows, int n_rows, const std::vector<float>& bias) {
  if (bias.empty()) return;
  const int n = static_cast<int>(bias.size());
  for (int t = 0; t < n_rows; ++t) kernels::add_inplace(rows + static_cast<std::size_t>(t) * n, bias.data(), n);
}

// The preconditions of forward(), checked before any byte of the pool is written.
Status check_batch(const ForwardBatch& batch, const KvPoolView& kv, const ModelConfig& c) {
  if (kv.n_layers != c.n_layers || kv.n_kv_heads != c.n_kv_heads || kv.head_dim != c.head_dim) {
    return internal_error("forward: the KV pool is shaped for " + std::to_string(kv.n_layers) + " layers of " +
                          std::to_string(kv.n_kv_heads) + " KV heads of " + std::to_string(kv.head_dim) +
                          ", the model has " + std::to_string(c.n_layers) + " of " + std::to_string(c.n_kv_heads) +
                          " of " + std::to_string(c.head_dim));
  }
  const int n_vocab = c.n_vocab;
  std::size_t n_tokens = 0;
  for (std::size_t s = 0; s < batch.sequences.size(); ++s) {
    const BatchSequence& seq = batch.sequences[s];
    if (seq.n_new < 1 || seq.pos_start < 0 || seq.first_slot() < 0 || seq.first_slot() > seq.pos_start) {
      return internal_error("forward: sequence " + std::to_string(s) + " has n_new " + std::to_string(seq.n_new) +
                            " at position " + std::to_string(seq.pos_start));
    }
    if (c.has_local_layers() && seq.first_slot() != seq.pos_start) {
      // A window is over positions and local layers rotate with their own base: compacted slots
      // (engine/kv_compactor.h) would see the wrong keys.
      return internal_error("forward: sequence " + std::to_string(s) + " has compacted KV (slot " +
                            std::to_string(seq.first_slot()) + " at position " + std::to_string(seq.pos_start) +
                            "); KV compaction is not supported for " + c.architecture + "'s sliding-window layers");
    }
    const std::int64_t end = std::int64_t{seq.first_slot()} + seq.n_new;
    const std::int64_t needed = (end + kv.block_size - 1) / kv.block_size;
    if (seq.block_table == nullptr || needed > seq.n_blocks) {
      return internal_error("forward: sequence " + std::to_string(s) + " writes KV slots up to " +
                            std::to_string(end - 1) + ", which need " + std::to_string(needed) +
                            " KV blocks; its block table holds " + std::to_string(seq.n_blocks));
    }
    for (std::int64_t b = 0; b < needed; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= kv.n_blocks) {
        return internal_error("forward: sequence " + std::to_string(s) + " names KV block " +
                              std::to_string(seq.block_table[b]) + ", outside the pool of " + std::to_string(kv.n_blocks));
      }
    }
    if (kv.split()) {
      // The window layers read (and write) the blocks from the first token's window on: those
      // must still have their window part (model.h; the engine frees only blocks before it).
      const std::int64_t first = std::max(0, seq.first_slot() + 1 - kv.max_window) / kv.block_size;
      for (std::int64_t b = first; b < needed; ++b) {
        if (kv.window_of[seq.block_table[b]] < 0) {
          return internal_error("forward: sequence " + std::to_string(s) + " attends to KV block " +
                                std::to_string(seq.block_table[b]) + " (slots from " + std::to_string(b * kv.block_size) +
                                ") whose window layers' KV was freed");
        }
      }
    }
    n_tokens += static_cast<std::size_t>(seq.n_new);
  }
  if (n_tokens != batch.tokens.size()) {
    return internal_error("forward: the sequences hold " + std::to_string(n_tokens) + " new tokens, the batch " +
                          std::to_string(batch.tokens.size()));
  }
  for (TokenId t : batch.tokens) {
    if (t < 0 || t >= n_vocab) return internal_error("forward: token id " + std::to_string(t) + " is out of range");
  }
  return Status::ok();
}

}  // namespace

Status Model::forward(const ForwardBatch& batch, const KvPoolView& kv, float* logits, ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const int T = static_cast<int>(batch.tokens.size());
  if (Status st = check_batch(batch, kv, c); !st) return st;
  if (T == 0) return Status::ok();
  // A background copy of the weights swaps its views in between two passes, never during one.
  std::shared_lock weights_in_place(weights_swap_);
  const int d = c.n_embd, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads;
  const int q_dim = nh * hd, kv_dim = nkv * hd, half = hd / 2;
  int ff = 0;  // the widest dense feed-forward
  for (const LayerSpec& spec : c.layers) {
    if (spec.ffn.kind != FfnKind::kMoe) ff = std::max(ff, spec.ffn.n_ff);
  }
  const auto sz = [](long a, long b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };

  using Phase = ForwardProfile::Phase;
  PhaseClock clock(batch.profile);
  std::vector<TokenSlot> slots;
  slots.reserve(static_cast<std::size_t>(T));
  for (int s = 0; s < static_cast<int>(batch.sequences.size()); ++s) {
    const BatchSequence& seq = batch.sequences[static_cast<std::size_t>(s)];
    for (int i = 0; i < seq.n_new; ++i) slots.push_back({seq.pos_start + i, seq.first_slot() + i, s});
  }
  std::vector<RopeTable> ropes(rope_inv_freqs_.size());
  for (std::size_t r = 0; r < ropes.size(); ++r) ropes[r].build(slots, rope_inv_freqs_[r], rope_magnitudes_[r]);

  std::vector<float> x(sz(T, d)), xn(sz(T, d)), q(sz(T, q_dim)), k(sz(T, kv_dim)), v(sz(T, kv_dim)),
      att(sz(T, q_dim)), gate(sz(T, ff)), up(sz(T, ff)), moe_out(c.has_moe() ? sz(T, d) : 0);
  for (int t = 0; t < T; ++t) {
    const TokenId tok = batch.tokens[static_cast<std::size_t>(t)];
    kernels::dequantize_rows(token_embd_, tok, tok + 1, &x[sz(t, d)]);
  }
  if (c.embedding_scale != 1.0f) {
    for (float& value : x) value *= c.embedding_scale;
  }
  const float scale = c.attention_scale > 0 ? c.attention_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const AttentionPlan attention_plan(slots, nkv, nh / nkv, pool.size());
  clock.end(Phase::kEmbed);

  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[static_cast<std::size_t>(l)];
    const LayerSpec& spec = c.layers[static_cast<std::size_t>(l)];
    const RopeStyle rope_style = spec.attention.rope.style;
    const RopeTable& rope = ropes[static_cast<std::size_t>(L.rope)];
    const int window = spec.attention.kind == AttentionKind::kSlidingWindow ? spec.attention.window : 0;
    for (int t = 0; t < T; ++t) kernels::rms_norm(&x[sz(t, d)], L.attn_norm.data(), d, c.rms_eps, &xn[sz(t, d)]);
    clock.end(Phase::kNorms);
    // Q, K and V share their input: one pool run for the three on the decode path.
    const kernels::WeightView qkv_w[] = {L.wq, L.wk, L.wv};
    float* const qkv_y[] = {q.data(), k.data(), v.data()};
    kernels::matmul_many(qkv_w, xn.data(), T, qkv_y, pool);
    clock.end(Phase::kQkv, {&L.wq, &L.wk, &L.wv});
    add_bias(q.data(), T, L.bq);
    add_bias(k.data(), T, L.bk);
    add_bias(v.data(), T, L.bv);
    if (spec.attention.qk_norm) {
      norm_heads(q.data(), T, nh, hd, L.q_norm, c.rms_eps);
      norm_heads(k.data(), T, nkv, hd, L.k_norm, c.rms_eps);
    }
    for (int t = 0; t < T; ++t) {
      const float* cs = &rope.cos[sz(t, half)];
      const float* sn = &rope.sin[sz(t, half)];
      const TokenSlot& slot = slots[static_cast<std::size_t>(t)];
      const BatchSequence& seq = batch.sequences[static_cast<std::size_t>(slot.seq)];
      if (seq.q_stats) add_query_stats(&q[sz(t, q_dim)], nh, hd, rope_style, seq.q_stats + sz(l, nh) * half * 3);
      for (int h = 0; h < nh; ++h) apply_rope(&q[sz(t, q_dim) + sz(h, hd)], hd, rope_style, cs, sn);
      if (spec.attention.temperature_scale != 0.0f) {
        // The floor in float, the logarithm in double, as llama.cpp's llm_graph_input_attn_temp.
        const float periods = std::floor(static_cast<float>(slot.pos) / static_cast<float>(spec.attention.temperature_length));
        const float temp = static_cast<float>(std::log(periods + 1.0) * spec.attention.temperature_scale + 1.0);
        for (int i = 0; i < q_dim; ++i) q[sz(t, q_dim) + static_cast<std::size_t>(i)] *= temp;
      }
      for (int h = 0; h < nkv; ++h) apply_rope(&k[sz(t, kv_dim) + sz(h, hd)], hd, rope_style, cs, sn);
      const std::int32_t block = seq.block_table[slot.slot / kv.block_size];
      for (int h = 0; h < nkv; ++h) {
        kernels::f32_to_f16_row(&k[sz(t, kv_dim) + sz(h, hd)], kv.k_at(block, l, slot.slot % kv.block_size, h), hd);
        kernels::f32_to_f16_row(&v[sz(t, kv_dim) + sz(h, hd)], kv.v_at(block, l, slot.slot % kv.block_size, h), hd);
      }
    }
    clock.end(Phase::kRopeKv);
    attention::attend({slots, batch, kv, l, q.data(), att.data(), nh, nkv, hd, scale, window,
                       L.sinks.empty() ? nullptr : L.sinks.data()},
                      attention_plan, pool);
    clock.end(Phase::kAttention);
    kernels::matmul(L.wo, att.data(), T, xn.data(), pool);
    add_bias(xn.data(), T, L.bo);
    clock.end(Phase::kAttnOutput, {&L.wo});
    if (spec.post_attention_norm) {
      for (int t = 0; t < T; ++t) kernels::rms_norm(&xn[sz(t, d)], L.post_attn_norm.data(), d, c.rms_eps, &xn[sz(t, d)]);
      clock.end(Phase::kNorms);
    }
    kernels::add_inplace(x.data(), xn.data(), T * d);
    clock.end(Phase::kResidual);
    for (int t = 0; t < T; ++t) kernels::rms_norm(&x[sz(t, d)], L.ffn_norm.data(), d, c.rms_eps, &xn[sz(t, d)]);
    clock.end(Phase::kNorms);
    if (spec.ffn.kind == FfnKind::kMoe) {
      const std::int64_t bytes = moe_feed_forward(spec.ffn.moe, L.experts, xn.data(), T, d, moe_out.data(), pool);
      clock.end(Phase::kExperts, {}, bytes);
      kernels::add_inplace(x.data(), moe_out.data(), T * d);
      clock.end(Phase::kResidual);
      continue;
    }
    const int layer_ff = spec.ffn.n_ff;
    const kernels::WeightView gate_up_w[] = {L.w_gate, L.w_up};
    float* const gate_up_y[] = {gate.data(), up.data()};
    kernels::matmul_many(gate_up_w, xn.data(), T, gate_up_y, pool);
    clock.end(Phase::kGateUp, {&L.w_gate, &L.w_up});
    if (spec.ffn.kind == FfnKind::kGeluGated) {
      kernels::gelu_mul(gate.data(), up.data(), std::int64_t{T} * layer_ff, gate.data());
    } else {
      kernels::silu_mul(gate.data(), up.data(), T * layer_ff, gate.data());
    }
    clock.end(Phase::kSiluMul);
    kernels::matmul(L.w_down, gate.data(), T, xn.data(), pool);
    clock.end(Phase::kDown, {&L.w_down});
    if (spec.post_ffn_norm) {
      for (int t = 0; t < T; ++t) kernels::rms_norm(&xn[sz(t, d)], L.post_ffn_norm.data(), d, c.rms_eps, &xn[sz(t, d)]);
      clock.end(Phase::kNorms);
    }
    kernels::add_inplace(x.data(), xn.data(), T * d);
    clock.end(Phase::kResidual);
  }

  if (batch.final_hidden) {
    for (int t = 0; t < T; ++t) {
      kernels::rms_norm(&x[sz(t, d)], output_norm_.data(), d, c.rms_eps, batch.final_hidden + sz(t, d));
    }
  }
  // Final norm for the rows that need logits, then the output projection.
  int rows = 0, t0 = 0;
  for (const BatchSequence& seq : batch.sequences) {
    const int first = !seq.want_logits ? seq.n_new : seq.all_logits ? 0 : seq.n_new - 1;
    for (int i = first; i < seq.n_new; ++i, ++rows) {
      kernels::rms_norm(&x[sz(t0 + i, d)], output_norm_.data(), d, c.rms_eps, &xn[sz(rows, d)]);
    }
    t0 += seq.n_new;
  }
  clock.end(Phase::kNorms);
  if (rows > 0) {
    kernels::matmul(output_, xn.data(), rows, logits, pool);
    if (c.logit_softcap > 0) {
      const float cap = c.logit_softcap;
      for (std::size_t i = 0; i < sz(rows, c.n_vocab); ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    }
    clock.end(Phase::kOutput, {&output_});
  }
  return Status::ok();
}

}  // namespace kvstash
