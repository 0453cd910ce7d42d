#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvstash {
namespace {

// llama.cpp clamps the sum of the kept weights at 6.103515625e-5 (2^-14) before dividing.
constexpr float kMinWeightSum = 6.103515625e-5f;

std::int64_t bytes_of(const kernels::WeightView& w) { return w.rows * static_cast<std::int64_t>(w.row_bytes); }

}  // namespace

void route_tokens(const MoeSpec& spec, const float* router_logits, int n_tokens, int* experts, float* weights) {
  const int n_experts = spec.n_experts, k = spec.n_used;
  std::vector<float> probs(static_cast<std::size_t>(n_experts));
  std::vector<int> order(static_cast<std::size_t>(n_experts));
  for (int t = 0; t < n_tokens; ++t) {
    const float* logits = router_logits + static_cast<std::size_t>(t) * n_experts;
    const float max_logit = *std::max_element(logits, logits + n_experts);
    float sum = 0.0f;
    for (int e = 0; e < n_experts; ++e) sum += probs[static_cast<std::size_t>(e)] = std::exp(logits[e] - max_logit);
    for (float& p : probs) p /= sum;
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
    if (spec.renormalize) {
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
      float* g = &hidden[sz(2 * j, ff)];
      kernels::silu_mul(g, g + ff, ff, g);
      kernels::matmul(w.down[static_cast<std::size_t>(chosen[static_cast<std::size_t>(j)])], g, 1, &expert_out[sz(j, d)],
                      pool);
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
      kernels::silu_mul(gate.data(), up.data(), n * ff, gate.data());
      kernels::matmul(w.down[static_cast<std::size_t>(e)], gate.data(), n, ye.data(), pool);
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
