#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvstash {
namespace {

// llama.cpp clamps the sum of the kept weights at 6.103515625e-5 (2^-14) before dividing.
constexpr float kMinWeightSum = 6.103515625e-5f;

std::int64_t bytes_of(const kernels::WeightView& w) { return w.rows * static_cast<std::int64_t>(w.row_bytes); }

// gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai with its alpha and limit).
constexpr float kOaiAlpha = 1.702f;
constexpr float kOaiLimit = 7.0f;

// gate[i] = act(gate[i], up[i]) for n values.
void activate(ExpertActivation act, float* gate, const float* up, int n) {
  if (act == ExpertActivation::kSwiGlu) return kernels::silu_mul(gate, up, n, gate);
  for (int i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kOaiLimit);
    const float u = std::clamp(up[i], -kOaiLimit, kOaiLimit);
    gate[i] = g / (1.0f + std::exp(-kOaiAlpha * g)) * (u + 1.0f);
  }
}

// Adds expert e's slice of a per-expert bias (width n) to `rows` rows of n; no-op without biases.
void add_expert_bias(const std::vector<float>& bias, int e, int n, float* rows, int n_rows) {
  if (bias.empty()) return;
  const float* b = bias.data() + static_cast<std::size_t>(e) * n;
  for (int r = 0; r < n_rows; ++r) kernels::add_inplace(rows + static_cast<std::size_t>(r) * n, b, n);
}

}  // namespace

void route_tokens(const MoeSpec& spec, const float* router_logits, int n_tokens, int* experts, float* weights) {
  const int n_experts = spec.n_experts, k = spec.n_used;
  std::vector<float> probs(static_cast<std::size_t>(n_experts));
  std::vector<int> order(static_cast<std::size_t>(n_experts));
  for (int t = 0; t < n_tokens; ++t) {
    const float* logits = router_logits + static_cast<std::size_t>(t) * n_experts;
    if (spec.gating == ExpertGating::kTopKSoftmax) {
      std::copy_n(logits, n_experts, probs.begin());  // ranked by logit; the softmax comes after
    } else {
      const float max_logit = *std::max_element(logits, logits + n_experts);
      float sum = 0.0f;
      for (int e = 0; e < n_experts; ++e) sum += probs[static_cast<std::size_t>(e)] = std::exp(logits[e] - max_logit);
      for (float& p : probs) p /= sum;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      const float pa = probs[static_cast<std::size_t>(a)], pb = probs[static_cast<std::size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    int* chosen = experts + static_cast<std::size_t>(t) * k;
    float* w = weights + static_cast<std::size_t>(t) * k;
    float kept = 0.0f;
    for (int j = 0; j < k; ++j) {
      chosen[j] = order[static_cast<std::size_t>(j)];
      kept += w[j] = probs[static_cast<std::size_t>(chosen[j])];
    }
    if (spec.gating == ExpertGating::kTopKSoftmax) {
      const float m = w[0];  // the best logit
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += w[j] = std::exp(w[j] - m);
      for (int j = 0; j < k; ++j) w[j] /= sum;
    } else if (spec.renormalize) {
      const float divisor = std::max(kept, kMinWeightSum);
      for (int j = 0; j < k; ++j) w[j] /= divisor;
    }
  }
}

std::int64_t moe_feed_forward(const MoeSpec& spec, const ExpertWeights& w, const float* x, int n_tokens, int n_embd,
                              float* out, ThreadPool& pool) {
  const int T = n_tokens, d = n_embd, k = spec.n_used, ff = spec.n_ff_expert;
  const auto sz = [](long a, long b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
  std::vector<float> logits(sz(T, spec.n_experts));
  kernels::matmul(w.router, x, T, logits.data(), pool);
  if (!w.router_bias.empty()) {
    for (int t = 0; t < T; ++t) kernels::add_inplace(&logits[sz(t, spec.n_experts)], w.router_bias.data(), spec.n_experts);
  }
  std::vector<int> chosen(sz(T, k));
  std::vector<float> weights(sz(T, k));
  route_tokens(spec, logits.data(), T, chosen.data(), weights.data());
  std::int64_t bytes_read = bytes_of(w.router);

  // expert_out[(t * k + j) * d ...]: token t's j-th expert's output, before its weight.
  std::vector<float> expert_out(sz(T, k) * static_cast<std::size_t>(d));
  if (T == 1) {
    // One input for all k experts: their gate and up rows in one pool run.
    std::vector<kernels::WeightView> gate_up;
    std::vector<float> hidden(sz(2 * k, ff));
    std::vector<float*> gate_up_out;
    for (int j = 0; j < k; ++j) {
      const auto e = static_cast<std::size_t>(chosen[static_cast<std::size_t>(j)]);
      gate_up.push_back(w.gate[e]);
      gate_up.push_back(w.up[e]);
      gate_up_out.push_back(&hidden[sz(2 * j, ff)]);
      gate_up_out.push_back(&hidden[sz(2 * j + 1, ff)]);
      bytes_read += bytes_of(w.gate[e]) + bytes_of(w.up[e]) + bytes_of(w.down[e]);
    }
    kernels::matmul_many(gate_up, x, 1, gate_up_out, pool);
    for (int j = 0; j < k; ++j) {
      const int e = chosen[static_cast<std::size_t>(j)];
      float* g = &hidden[sz(2 * j, ff)];
      add_expert_bias(w.gate_bias, e, ff, g, 1);
      add_expert_bias(w.up_bias, e, ff, g + ff, 1);
      activate(spec.activation, g, g + ff, ff);
      kernels::matmul(w.down[static_cast<std::size_t>(e)], g, 1, &expert_out[sz(j, d)], pool);
      add_expert_bias(w.down_bias, e, d, &expert_out[sz(j, d)], 1);
    }
  } else {
    // Group the (token, slot) pairs by expert; each expert then runs once over all of its tokens.
    std::vector<std::vector<int>> by_expert(static_cast<std::size_t>(spec.n_experts));
    for (int i = 0; i < T * k; ++i) by_expert[static_cast<std::size_t>(chosen[static_cast<std::size_t>(i)])].push_back(i);
    std::vector<float> xe, gate, up, ye;
    for (int e = 0; e < spec.n_experts; ++e) {
      const std::vector<int>& pairs = by_expert[static_cast<std::size_t>(e)];
      if (pairs.empty()) continue;
      const int n = static_cast<int>(pairs.size());
      xe.resize(sz(n, d));
      gate.resize(sz(n, ff));
      up.resize(sz(n, ff));
      ye.resize(sz(n, d));
      for (int r = 0; r < n; ++r) std::copy_n(x + sz(pairs[static_cast<std::size_t>(r)] / k, d), d, &xe[sz(r, d)]);
      const kernels::WeightView gate_up[] = {w.gate[static_cast<std::size_t>(e)], w.up[static_cast<std::size_t>(e)]};
      float* const gate_up_out[] = {gate.data(), up.data()};
      kernels::matmul_many(gate_up, xe.data(), n, gate_up_out, pool);
      add_expert_bias(w.gate_bias, e, ff, gate.data(), n);
      add_expert_bias(w.up_bias, e, ff, up.data(), n);
      activate(spec.activation, gate.data(), up.data(), n * ff);
      kernels::matmul(w.down[static_cast<std::size_t>(e)], gate.data(), n, ye.data(), pool);
      add_expert_bias(w.down_bias, e, d, ye.data(), n);
      for (int r = 0; r < n; ++r) std::copy_n(&ye[sz(r, d)], d, &expert_out[sz(pairs[static_cast<std::size_t>(r)], d)]);
      bytes_read += bytes_of(gate_up[0]) + bytes_of(gate_up[1]) + bytes_of(w.down[static_cast<std::size_t>(e)]);
    }
  }
  // Weighted sum in each token's top-k order.
  for (int t = 0; t < T; ++t) {
    float* o = out + sz(t, d);
    for (int j = 0; j < k; ++j) {
      const float wt = weights[sz(t, k) + static_cast<std::size_t>(j)];
      const float* y = &expert_out[(sz(t, k) + static_cast<std::size_t>(j)) * static_cast<std::size_t>(d)];
      if (j == 0) {
        for (int i = 0; i < d; ++i) o[i] = wt * y[i];
      } else {
        for (int i = 0; i < d; ++i) o[i] += wt * y[i];
      }
    }
  }
  return bytes_read;
}

}  // namespace kvstash
