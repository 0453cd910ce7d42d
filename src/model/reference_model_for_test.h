// A plain reference implementation of the Llama-family forward pass, written from the model's
// definition for tests only: scalar, double precision, no SIMD, no paging, no batching. Its own
// dequantization of f32/f16/bf16/q8_0 (nothing shared with src/kernels), so that a bug in the
// optimized path cannot hide in code both use. The other quantized types go through
// kernels/reference_dequant.h, the block-by-block double-precision decoder that shares no code
// with the kernels' own unpacking either.
//
// qwen3 adds an RMSNorm of every Q and K head before RoPE (attn_q_norm / attn_k_norm, head_dim
// wide) and a head_dim of its own (attention.key_length); qwen3moe replaces the feed-forward with
// routed experts: softmax over the router's logits, the top expert_used_count, renormalised, each a
// SwiGLU on its slice of the 3-D ffn_{gate,up,down}_exps tensors.
//
// gemma3 (llama.cpp's src/models/gemma3.cpp): embeddings × sqrt(n_embd); QK-norm; Q·K scaled by
// 1/sqrt(head_dim); layer il local iff il % 6 < 5 (key j visible to query i iff i - j < window),
// local layers rotating with rope.freq_base_swa; post-attention and post-feed-forward RMSNorms
// before each residual add; feed-forward gelu_tanh(gate) · up (the exact GELU here: the engine's
// f16 table, as llama.cpp's CPU backend has it, differs from it by f16 rounding).
//
// phi3 (llama.cpp's src/models/phi3.cpp): attn_qkv's rows are Q's, K's then V's; ffn_up's rows
// the gate's then the up projection's; RoPE in halves with LongRoPE: pair i's frequency divided by
// rope_factors_long[i] when context_length exceeds rope.scaling.original_context_length (else the
// short ones), cos and sin multiplied by rope.scaling.attn_factor.
//
// gpt-oss (llama.cpp's src/models/openai-moe.cpp): Q/K/V and output biases; even layers attend a
// window of attention.sliding_window, odd ones everything, both with the same RoPE; one sink logit
// per head joins each softmax's denominator; the pre-feed-forward norm is post_attention_norm; the
// router adds its bias, keeps the k largest logits and weights them by their softmax; each expert
// adds its biases to gate, up and down, and computes min(g, 7) σ(1.702 min(g, 7)) (clamp(u, ±7) + 1).
// YaRN (rope.scaling.type yarn): pair i's frequency f_i becomes f_i (s (1 - r_i) + r_i), s = 1 /
// factor, r_i = 1 - clamp((i - low) / (high - low), 0, 1) with low/high where the pair turns
// beta_fast (32) / beta_slow (1) times over original_context_length; cos and sin × (1 + 0.1 ln factor).
//
// llama files with attention.sliding_window (Mistral 7B v0.1): every layer windowed.
//
// mistral3 (llama.cpp's src/models/mistral3.cpp): llama's layout and rotation; YaRN whose cos and
// sin are × (1 + 0.1 ln factor) / (1 + 0.1 L ln factor) with L = rope.scaling.yarn_log_multiplier
// (when not 0); after RoPE, Q of position p × 1 + attention.temperature_scale · ln(1 + floor(p /
// original_context_length)).
//
// RoPE conventions, from the GGUF converter (llama.cpp convert_hf_to_gguf.py) and llama.cpp's
// rope types: for architecture `llama` the converter permutes the rows of attn_q/attn_k from the
// Hugging Face "rotate half" order into interleaved pairs, and llama.cpp applies RoPE in its
// NORM mode to adjacent pairs (x[2i], x[2i+1]); for `qwen2` weights are stored as in the
// checkpoint and RoPE is NEOX mode on (x[i], x[i + d/2]). `hf_order` lets a test undo the
// converter's permutation and run the checkpoint's own convention instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "gguf/gguf.h"
#include "kernels/reference_dequant.h"

namespace kvstash::testing {

class ReferenceModel {
 public:
  enum class Rope { kInterleaved, kHalves };

  // Loads every tensor as double. With undo_llama_permutation, attn_q/attn_k rows are put back
  // into Hugging Face order and RoPE is applied in halves — which must give the same logits as
  // the GGUF convention if the convention is understood right.
  explicit ReferenceModel(const gguf::File& f, bool undo_llama_permutation = false) : f_(f) {
    arch_ = *f.get_string("general.architecture");
    auto u = [&](const char* k) { return static_cast<int>(*f.get_uint(arch_ + "." + k)); };
    n_layers_ = u("block_count");
    d_ = u("embedding_length");
    nh_ = u("attention.head_count");
    nkv_ = u("attention.head_count_kv");
    hd_ = f.find(arch_ + ".attention.key_length") ? u("attention.key_length") : d_ / nh_;
    if (arch_ == "qwen3moe" || arch_ == "gpt-oss") {
      n_experts_ = u("expert_count");
      n_used_ = u("expert_used_count");
      ff_ = u("expert_feed_forward_length");
    } else {
      ff_ = u("feed_forward_length");
    }
    eps_ = *f.get_float(arch_ + ".attention.layer_norm_rms_epsilon");
    base_ = *f.get_float(arch_ + ".rope.freq_base");
    if (arch_ == "gemma3") {
      gemma_ = true;
      if (f.find(arch_ + ".attention.sliding_window")) window_ = u("attention.sliding_window");
      if (auto b = f.get_float(arch_ + ".rope.freq_base_swa")) base_swa_ = *b;
    }
    if (arch_ == "llama" && f.find(arch_ + ".attention.sliding_window")) {
      window_ = u("attention.sliding_window");  // Mistral's: every layer windowed
      all_local_ = true;
    }
    if (arch_ == "gpt-oss") {
      oai_ = true;
      window_ = u("attention.sliding_window");
      base_swa_ = f.get_float(arch_ + ".rope.freq_base_swa") ? *f.get_float(arch_ + ".rope.freq_base_swa") : base_;
    }
    if (auto type = f.get_string(arch_ + ".rope.scaling.type"); type && *type == "yarn") {
      yarn_factor_ = *f.get_float(arch_ + ".rope.scaling.factor");
      yarn_original_ = u("rope.scaling.original_context_length");
      rope_magnitude_ *= 1.0 + 0.1 * std::log(yarn_factor_);
      if (auto mul = f.get_float(arch_ + ".rope.scaling.yarn_log_multiplier"); mul && *mul != 0.0) {
        rope_magnitude_ /= 1.0 + 0.1 * *mul * std::log(yarn_factor_);
      }
    }
    if (auto s = f.get_float(arch_ + ".attention.temperature_scale"); s && arch_ == "mistral3") {
      temperature_scale_ = *s;
      temperature_length_ = f.find(arch_ + ".rope.scaling.original_context_length") ? u("rope.scaling.original_context_length")
                                                                                       : u("context_length");
    }
    rope_ = arch_ == "llama" || arch_ == "mistral3" ? Rope::kInterleaved : Rope::kHalves;
    embd_ = load("token_embd.weight");
    n_vocab_ = static_cast<int>(embd_.size() / static_cast<std::size_t>(d_));
    out_ = f.find_tensor("output.weight") ? load("output.weight") : embd_;
    out_norm_ = load("output_norm.weight");
    if (f.find_tensor("rope_freqs.weight")) rope_factors_ = load("rope_freqs.weight");
    if (f.find_tensor("rope_factors_long.weight")) {
      const int ctx = u("context_length");
      const int original = f.find(arch_ + ".rope.scaling.original_context_length") ? u("rope.scaling.original_context_length") : ctx;
      rope_factors_ = load(ctx > original ? "rope_factors_long.weight" : "rope_factors_short.weight");
    }
    if (auto a = f.get_float(arch_ + ".rope.scaling.attn_factor")) rope_magnitude_ *= *a;
    for (int l = 0; l < n_layers_; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      Layer L;
      L.attn_norm = load(p + "attn_norm.weight");
      if (f.find_tensor(p + "attn_qkv.weight")) {
        const std::vector<double> qkv = load(p + "attn_qkv.weight");
        const auto q_end = qkv.begin() + static_cast<std::ptrdiff_t>(nh_) * hd_ * d_;
        const auto k_end = q_end + static_cast<std::ptrdiff_t>(nkv_) * hd_ * d_;
        L.wq.assign(qkv.begin(), q_end);
        L.wk.assign(q_end, k_end);
        L.wv.assign(k_end, qkv.end());
      } else {
        L.wq = load(p + "attn_q.weight");
        L.wk = load(p + "attn_k.weight");
        L.wv = load(p + "attn_v.weight");
      }
      L.wo = load(p + "attn_output.weight");
      if (f.find_tensor(p + "attn_q.bias")) {
        L.bq = load(p + "attn_q.bias");
        L.bk = load(p + "attn_k.bias");
        L.bv = load(p + "attn_v.bias");
      }
      if (f.find_tensor(p + "attn_q_norm.weight")) {
        L.q_norm = load(p + "attn_q_norm.weight");
        L.k_norm = load(p + "attn_k_norm.weight");
      }
      if (!oai_ && f.find_tensor(p + "post_attention_norm.weight")) {
        L.post_attn_norm = load(p + "post_attention_norm.weight");
        L.post_ffn_norm = load(p + "post_ffw_norm.weight");
      }
      if (oai_) {
        L.bo = load(p + "attn_output.bias");
        L.sinks = load(p + "attn_sinks.weight");
        L.ffn_norm = load(p + "post_attention_norm.weight");
        L.router_b = load(p + "ffn_gate_inp.bias");
        L.bg = load(p + "ffn_gate_exps.bias");
        L.bu = load(p + "ffn_up_exps.bias");
        L.bd = load(p + "ffn_down_exps.bias");
      } else {
        L.ffn_norm = load(p + "ffn_norm.weight");
      }
      if (n_experts_ > 0) {
        L.router = load(p + "ffn_gate_inp.weight");
        L.wg = load(p + "ffn_gate_exps.weight");
        L.wu = load(p + "ffn_up_exps.weight");
        L.wd = load(p + "ffn_down_exps.weight");
      } else if (!f.find_tensor(p + "ffn_gate.weight")) {
        const std::vector<double> gate_up = load(p + "ffn_up.weight");
        const auto half = gate_up.begin() + static_cast<std::ptrdiff_t>(ff_) * d_;
        L.wg.assign(gate_up.begin(), half);
        L.wu.assign(half, gate_up.end());
        L.wd = load(p + "ffn_down.weight");
      } else {
        L.wg = load(p + "ffn_gate.weight");
        L.wu = load(p + "ffn_up.weight");
        L.wd = load(p + "ffn_down.weight");
      }
      if (undo_llama_permutation) {
        L.wq = hf_order(L.wq, nh_);
        L.wk = hf_order(L.wk, nkv_);
      }
      layers_.push_back(std::move(L));
    }
    if (undo_llama_permutation) rope_ = Rope::kHalves;
  }

  int n_vocab() const { return n_vocab_; }

  // Rounds every K (after RoPE) and V to f16 before attention reads it, as the engine's KV pool
  // stores them: the rest stays double. To tell the engine's KV rounding from a difference in
  // what is computed.
  void set_kv_f16(bool on) { kv_f16_ = on; }

  // MoE models, after forward() or final_hidden(): per position, the smallest gap over the layers
  // between the router logits of the last expert kept and the first dropped. Where it is below the
  // rounding of an f16 KV cache, an exact engine may route that token differently, and its logits
  // then differ by far more than rounding; 1e300 for dense models.
  const std::vector<double>& routing_margin() const { return routing_margin_; }

  // Logits for every position of `tokens` (a fresh sequence from position 0).
  std::vector<std::vector<double>> forward(const std::vector<int>& tokens) const {
    std::vector<std::vector<double>> hidden = final_hidden(tokens);
    std::vector<std::vector<double>> logits(hidden.size());
    for (std::size_t t = 0; t < hidden.size(); ++t) logits[t] = matvec(out_, hidden[t], n_vocab_, {});
    return logits;
  }

  // The final hidden state of every position after the final norm (the output projection's input).
  std::vector<std::vector<double>> final_hidden(const std::vector<int>& tokens) const {
    const int T = static_cast<int>(tokens.size());
    routing_margin_.assign(static_cast<std::size_t>(T), 1e300);
    std::vector<std::vector<double>> x(T, std::vector<double>(d_));
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < d_; ++i) {
        x[t][i] = embd_[static_cast<std::size_t>(tokens[t]) * d_ + i] * (gemma_ ? std::sqrt(static_cast<double>(d_)) : 1.0);
      }
    // Full (non-paged) KV per layer: kcache[t][kv_dim]
    for (std::size_t il = 0; il < layers_.size(); ++il) {
      const Layer& L = layers_[il];
      const bool local = (gemma_ && window_ > 0 && il % 6 < 5) || (oai_ && il % 2 == 0) || all_local_;
      const double base = local && !all_local_ ? base_swa_ : base_;
      std::vector<std::vector<double>> k(T), v(T), att(T, std::vector<double>(nh_ * hd_, 0.0));
      std::vector<std::vector<double>> q(T);
      for (int t = 0; t < T; ++t) {
        auto xn = rms_norm(x[t], L.attn_norm);
        q[t] = matvec(L.wq, xn, nh_ * hd_, L.bq);
        k[t] = matvec(L.wk, xn, nkv_ * hd_, L.bk);
        v[t] = matvec(L.wv, xn, nkv_ * hd_, L.bv);
        if (!L.q_norm.empty()) {
          for (int h = 0; h < nh_; ++h) norm_head(&q[t][h * hd_], L.q_norm);
          for (int h = 0; h < nkv_; ++h) norm_head(&k[t][h * hd_], L.k_norm);
        }
        for (int h = 0; h < nh_; ++h) rope(&q[t][h * hd_], t, base);
        if (temperature_scale_ != 0) {
          const double temp = 1.0 + temperature_scale_ * std::log(1.0 + std::floor(static_cast<double>(t) / temperature_length_));
          for (double& value : q[t]) value *= temp;
        }
        for (int h = 0; h < nkv_; ++h) rope(&k[t][h * hd_], t, base);
        if (kv_f16_) {
          for (auto* row : {&k[t], &v[t]}) {
            for (double& value : *row) value = f16_to_f32(f32_to_f16(static_cast<float>(value)));
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < nh_; ++h) {
          const int kvh = h / (nh_ / nkv_);
          std::vector<double> s(t + 1);
          double mx = -1e300;
          const int j0 = local ? std::max(0, t - window_ + 1) : 0;
          for (int j = j0; j <= t; ++j) {
            double dot = 0;
            for (int i = 0; i < hd_; ++i) dot += q[t][h * hd_ + i] * k[j][kvh * hd_ + i];
            s[j] = dot / std::sqrt(static_cast<double>(hd_));
            mx = std::max(mx, s[j]);
          }
          if (!L.sinks.empty()) mx = std::max(mx, L.sinks[h]);
          double z = L.sinks.empty() ? 0.0 : std::exp(L.sinks[h] - mx);
          for (int j = j0; j <= t; ++j) z += s[j] = std::exp(s[j] - mx);
          for (int j = j0; j <= t; ++j)
            for (int i = 0; i < hd_; ++i) att[t][h * hd_ + i] += s[j] / z * v[j][kvh * hd_ + i];
        }
      }
      for (int t = 0; t < T; ++t) {
        auto o = matvec(L.wo, att[t], d_, L.bo);
        if (gemma_) o = rms_norm(o, L.post_attn_norm);
        for (int i = 0; i < d_; ++i) x[t][i] += o[i];
        auto xn = rms_norm(x[t], L.ffn_norm);
        if (n_experts_ == 0) {
          auto dn = swiglu(L.wg.data(), L.wu.data(), L.wd.data(), xn);
          if (gemma_) dn = rms_norm(dn, L.post_ffn_norm);
          for (int i = 0; i < d_; ++i) x[t][i] += dn[i];
          continue;
        }
        if (oai_) {
          // Router (+ bias): the n_used largest logits, weighted by their softmax.
          auto logits = matvec(L.router, xn, n_experts_, L.router_b);
          std::vector<int> order(n_experts_);
          for (int e = 0; e < n_experts_; ++e) order[e] = e;
          std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
          if (n_used_ < n_experts_) {
            routing_margin_[t] = std::min(routing_margin_[t], logits[order[n_used_ - 1]] - logits[order[n_used_]]);
          }
          double z = 0;
          for (int j = 0; j < n_used_; ++j) z += std::exp(logits[order[j]] - logits[order[0]]);
          for (int j = 0; j < n_used_; ++j) {
            const auto dn = expert_oai(L, order[j], xn);
            const double w = std::exp(logits[order[j]] - logits[order[0]]) / z;
            for (int i = 0; i < d_; ++i) x[t][i] += w * dn[i];
          }
          continue;
        }
        // Router: softmax over all experts, the n_used most probable, weights renormalised.
        auto logits = matvec(L.router, xn, n_experts_, {});
        const double mx = *std::max_element(logits.begin(), logits.end());
        double z = 0;
        for (double& l : logits) z += l = std::exp(l - mx);
        std::vector<int> order(n_experts_);
        for (int e = 0; e < n_experts_; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
        // How near this token's routing is to choosing differently (logit gap of the last kept
        // expert over the first dropped one): the smallest over the layers.
        if (n_used_ < n_experts_) {
          const double gap = std::log(logits[order[n_used_ - 1]]) - std::log(logits[order[n_used_]]);
          routing_margin_[t] = std::min(routing_margin_[t], gap);
        }
        double kept = 0;
        for (int j = 0; j < n_used_; ++j) kept += logits[order[j]] / z;
        const std::size_t up_size = static_cast<std::size_t>(ff_) * d_;
        for (int j = 0; j < n_used_; ++j) {
          const std::size_t e = static_cast<std::size_t>(order[j]);
          auto dn = swiglu(&L.wg[e * up_size], &L.wu[e * up_size], &L.wd[e * up_size], xn);
          const double w = logits[order[j]] / z / kept;
          for (int i = 0; i < d_; ++i) x[t][i] += w * dn[i];
        }
      }
    }
    for (int t = 0; t < T; ++t) x[t] = rms_norm(x[t], out_norm_);
    return x;
  }

 private:
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, wg, wu, wd;
    std::vector<double> router;  // qwen3moe; wg/wu/wd then hold every expert, one after another
    std::vector<double> post_attn_norm, post_ffn_norm;  // gemma3
    std::vector<double> bo, sinks, router_b, bg, bu, bd;  // gpt-oss; bg/bu/bd every expert's, one after another
  };

  // gpt-oss's expert e: down(act(gate x + bg, up x + bu)) + bd with the clamped SwiGLU.
  std::vector<double> expert_oai(const Layer& L, int e, const std::vector<double>& x) const {
    const std::size_t up_size = static_cast<std::size_t>(ff_) * d_;
    const double* wg = &L.wg[e * up_size];
    const double* wu = &L.wu[e * up_size];
    const double* wd = &L.wd[e * up_size];
    std::vector<double> h(ff_), out(d_);
    for (int r = 0; r < ff_; ++r) {
      double g = L.bg[static_cast<std::size_t>(e) * ff_ + r], u = L.bu[static_cast<std::size_t>(e) * ff_ + r];
      for (int c = 0; c < d_; ++c) {
        g += wg[static_cast<std::size_t>(r) * d_ + c] * x[c];
        u += wu[static_cast<std::size_t>(r) * d_ + c] * x[c];
      }
      g = std::min(g, 7.0);
      u = std::clamp(u, -7.0, 7.0);
      h[r] = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
    }
    for (int r = 0; r < d_; ++r) {
      out[r] = L.bd[static_cast<std::size_t>(e) * d_ + r];
      for (int c = 0; c < ff_; ++c) out[r] += wd[static_cast<std::size_t>(r) * ff_ + c] * h[c];
    }
    return out;
  }

  // down(silu(gate x) * up x) with gate/up [ff][d] and down [d][ff] row-major.
  std::vector<double> swiglu(const double* wg, const double* wu, const double* wd, const std::vector<double>& x) const {
    std::vector<double> h(ff_), out(d_, 0.0);
    for (int r = 0; r < ff_; ++r) {
      double g = 0, u = 0;
      for (int c = 0; c < d_; ++c) {
        g += wg[static_cast<std::size_t>(r) * d_ + c] * x[c];
        u += wu[static_cast<std::size_t>(r) * d_ + c] * x[c];
      }
      h[r] = gemma_ ? 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * g * (1.0 + 0.044715 * g * g))) * u
                    : g / (1.0 + std::exp(-g)) * u;
    }
    for (int r = 0; r < d_; ++r)
      for (int c = 0; c < ff_; ++c) out[r] += wd[static_cast<std::size_t>(r) * ff_ + c] * h[c];
    return out;
  }

  void norm_head(double* head, const std::vector<double>& w) const {
    double ss = 0;
    for (int i = 0; i < hd_; ++i) ss += head[i] * head[i];
    const double r = 1.0 / std::sqrt(ss / hd_ + eps_);
    for (int i = 0; i < hd_; ++i) head[i] = head[i] * r * w[i];
  }

  std::vector<double> load(const std::string& name) const {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    std::vector<double> out(t->n_elements);
    const std::uint8_t* p = t->data;
    for (kernels::WeightType w : kernels::kAllWeightTypes) {
      if (kernels::is_quantized(w) && w != kernels::WeightType::kQ8_0 &&
          gguf::tensor_type_name(t->type) == kernels::weight_type_name(w)) {
        kernels::reference_dequantize_row(w, p, static_cast<std::int64_t>(t->n_elements), out.data());
        return out;
      }
    }
    for (std::uint64_t i = 0; i < t->n_elements; ++i) {
      std::uint16_t h;
      switch (t->type) {
        case gguf::TensorType::kF32: {
          float v;
          std::memcpy(&v, p + 4 * i, 4);
          out[i] = v;
          break;
        }
        case gguf::TensorType::kF16:
          std::memcpy(&h, p + 2 * i, 2);
          out[i] = f16_to_f32(h);
          break;
        case gguf::TensorType::kBF16:
          std::memcpy(&h, p + 2 * i, 2);
          out[i] = bf16_to_f32(h);
          break;
        case gguf::TensorType::kQ8_0: {
          const std::uint8_t* blk = p + (i / 32) * 34;
          std::memcpy(&h, blk, 2);
          out[i] = f16_to_f32(h) * static_cast<std::int8_t>(blk[2 + i % 32]);
          break;
        }
        default:
          out[i] = std::nan("");
      }
    }
    return out;
  }

  // Inverse of the converter's permute(): GGUF row (head, 2i + j) came from HF row (head, j*half + i).
  std::vector<double> hf_order(const std::vector<double>& w, int n_heads) const {
    std::vector<double> out(w.size());
    const int half = hd_ / 2;
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < half; ++i)
        for (int j = 0; j < 2; ++j) {
          const std::size_t gguf_row = static_cast<std::size_t>(h) * hd_ + 2 * i + j;
          const std::size_t hf_row = static_cast<std::size_t>(h) * hd_ + j * half + i;
          std::memcpy(&out[hf_row * d_], &w[gguf_row * d_], sizeof(double) * d_);
        }
    return out;
  }

  std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps_);
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * r * w[i];
    return out;
  }

  // W is [rows][cols] row-major (GGUF dims[0] = cols).
  static std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, int rows,
                                    const std::vector<double>& bias) {
    const std::size_t cols = x.size();
    std::vector<double> y(rows);
    for (int r = 0; r < rows; ++r) {
      double acc = bias.empty() ? 0.0 : bias[r];
      for (std::size_t c = 0; c < cols; ++c) acc += w[r * cols + c] * x[c];
      y[r] = acc;
    }
    return y;
  }

  void rope(double* head, int pos, double base) const {
    const int half = hd_ / 2;
    for (int i = 0; i < half; ++i) {
      double freq = std::pow(base, -2.0 * i / hd_);
      if (!rope_factors_.empty()) freq /= rope_factors_[i];
      if (yarn_factor_ > 0) {
        const auto dim = [&](double beta) { return hd_ * std::log(yarn_original_ / (beta * 2 * M_PI)) / (2 * std::log(base)); };
        const double low = std::max(0.0, std::floor(dim(32.0))), high = std::min(hd_ - 1.0, std::ceil(dim(1.0)));
        const double ramp = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
        freq *= (1.0 - ramp) / yarn_factor_ + ramp;
      }
      const double a = pos * freq, c = std::cos(a) * rope_magnitude_, s = std::sin(a) * rope_magnitude_;
      const int i0 = rope_ == Rope::kInterleaved ? 2 * i : i;
      const int i1 = rope_ == Rope::kInterleaved ? 2 * i + 1 : i + half;
      const double x0 = head[i0], x1 = head[i1];
      head[i0] = x0 * c - x1 * s;
      head[i1] = x0 * s + x1 * c;
    }
  }

  const gguf::File& f_;
  std::string arch_;
  int n_layers_, d_, nh_, nkv_, ff_, hd_, n_vocab_;
  int n_experts_ = 0, n_used_ = 0;
  double eps_, base_;
  bool gemma_ = false;
  int window_ = 0;
  double base_swa_ = 10000.0;
  double rope_magnitude_ = 1.0;
  bool oai_ = false;
  bool all_local_ = false;
  double yarn_factor_ = 0.0;
  double temperature_scale_ = 0.0;  // mistral3's query temperature
  int temperature_length_ = 1;
  int yarn_original_ = 0;
  Rope rope_;
  std::vector<double> embd_, out_, out_norm_, rope_factors_;
  mutable std::vector<double> routing_margin_;
  bool kv_f16_ = false;
  std::vector<Layer> layers_;
};

}  // namespace kvstash::testing
