#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/matmul_jobs.h"

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
  const int T = n_tokens, d = n_embd, k = spec.n_used, ff = spec.n_ff_expert, n_experts = spec.n_experts;
  const auto sz = [](long a, long b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
  std::vector<float> logits(sz(T, n_experts));
  kernels::matmul(w.router, x, T, logits.data(), pool);
  if (!w.router_bias.empty()) {
    for (int t = 0; t < T; ++t) kernels::add_inplace(&logits[sz(t, n_experts)], w.router_bias.data(), n_experts);
  }
  const int n_pairs = T * k;
  std::vector<int> chosen(static_cast<std::size_t>(n_pairs));
  std::vector<float> weights(static_cast<std::size_t>(n_pairs));
  route_tokens(spec, logits.data(), T, chosen.data(), weights.data());
  std::int64_t bytes_read = bytes_of(w.router);

  // The (token, slot) pairs grouped by expert (a counting sort): rows [first[e], first[e + 1]) of
  // the expert-ordered buffers below are expert e's tokens, in token order; pair i = t * k + j
  // (token t's j-th expert) is row row_of[i].
  std::vector<int> first(static_cast<std::size_t>(n_experts) + 1, 0), row_of(static_cast<std::size_t>(n_pairs));
  for (int e : chosen) ++first[static_cast<std::size_t>(e) + 1];
  for (int e = 0; e < n_experts; ++e) first[static_cast<std::size_t>(e) + 1] += first[static_cast<std::size_t>(e)];
  {
    std::vector<int> next(first.begin(), first.end() - 1);
    for (int i = 0; i < n_pairs; ++i) row_of[static_cast<std::size_t>(i)] = next[static_cast<std::size_t>(chosen[static_cast<std::size_t>(i)])]++;
  }
  std::vector<int> active;  // the experts some token chose, in index order
  for (int e = 0; e < n_experts; ++e) {
    if (first[static_cast<std::size_t>(e) + 1] > first[static_cast<std::size_t>(e)]) active.push_back(e);
  }
  // An expert that every token chose (each of a decode step's k experts) reads x itself, so the
  // jobs sharing it quantize it once; the others read their tokens' rows gathered into xe.
  std::vector<float> xe(T > 1 ? sz(n_pairs, d) : 0), gate(sz(n_pairs, ff)), up(sz(n_pairs, ff)), ye(sz(n_pairs, d));
  for (int i = 0; i < n_pairs && T > 1; ++i) {
    std::copy_n(x + sz(i / k, d), d, &xe[sz(row_of[static_cast<std::size_t>(i)], d)]);
  }
  // Each expert's gate and up over its tokens, then its down projection: all experts' matrices in
  // as few pool runs as kernels::matmul_jobs takes (one for a decode step's 2k gate/up matrices, one
  // for its k down ones), each expert's weights read once for all of its tokens.
  std::vector<kernels::MatmulJob> jobs;
  jobs.reserve(2 * active.size());
  for (int e : active) {
    const auto ue = static_cast<std::size_t>(e);
    const int row = first[ue], n = first[ue + 1] - row;
    const float* in = n == T ? x : &xe[sz(row, d)];
    jobs.push_back({w.gate[ue], in, n, &gate[sz(row, ff)]});
    jobs.push_back({w.up[ue], in, n, &up[sz(row, ff)]});
    bytes_read += bytes_of(w.gate[ue]) + bytes_of(w.up[ue]) + bytes_of(w.down[ue]);
  }
  kernels::matmul_jobs(jobs, pool);
  jobs.clear();
  for (int e : active) {
    const auto ue = static_cast<std::size_t>(e);
    const int row = first[ue], n = first[ue + 1] - row;
    add_expert_bias(w.gate_bias, e, ff, &gate[sz(row, ff)], n);
    add_expert_bias(w.up_bias, e, ff, &up[sz(row, ff)], n);
    activate(spec.activation, &gate[sz(row, ff)], &up[sz(row, ff)], n * ff);
    jobs.push_back({w.down[ue], &gate[sz(row, ff)], n, &ye[sz(row, d)]});
  }
  kernels::matmul_jobs(jobs, pool);
  for (int e : active) {
    const int row = first[static_cast<std::size_t>(e)], n = first[static_cast<std::size_t>(e) + 1] - row;
    add_expert_bias(w.down_bias, e, d, &ye[sz(row, d)], n);
  }
  // Weighted sum in each token's top-k order.
  for (int t = 0; t < T; ++t) {
    float* o = out + sz(t, d);
    for (int j = 0; j < k; ++j) {
      const float wt = weights[sz(t, k) + static_cast<std::size_t>(j)];
      const float* y = &ye[sz(row_of[sz(t, k) + static_cast<std::size_t>(j)], d)];
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
