#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/matmul_jobs.h"

namespace kvstash {
namespace {

// Experts per pair of pool runs: their gate and up matrices fill one run of matmul_jobs.
constexpr std::size_t kExpertsPerRun = kernels::kMatmulJobsPerRun / 2;

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

namespace {

// The (token, slot) pairs of a batch grouped by expert (a counting sort): rows [first[e],
// first[e + 1]) of the expert-ordered buffers are expert e's tokens, in token order; pair
// i = t * k + j (token t's j-th expert) is row row_of[i], and row r holds pair pair_at[r].
struct ExpertRows {
  std::vector<int> first, row_of, pair_at;
  std::vector<int> active;  // the experts some token chose, in index order

  ExpertRows(const std::vector<int>& chosen, int n_experts)
      : first(static_cast<std::size_t>(n_experts) + 1, 0), row_of(chosen.size()), pair_at(chosen.size()) {
    for (int e : chosen) ++first[static_cast<std::size_t>(e) + 1];
    for (int e = 0; e < n_experts; ++e) first[static_cast<std::size_t>(e) + 1] += first[static_cast<std::size_t>(e)];
    std::vector<int> next(first.begin(), first.end() - 1);
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      const int row = next[static_cast<std::size_t>(chosen[i])]++;
      row_of[i] = row;
      pair_at[static_cast<std::size_t>(row)] = static_cast<int>(i);
    }
    for (int e = 0; e < n_experts; ++e) {
      if (tokens(e) > 0) active.push_back(e);
    }
  }
  int row(int e) const { return first[static_cast<std::size_t>(e)]; }
  int tokens(int e) const { return first[static_cast<std::size_t>(e) + 1] - first[static_cast<std::size_t>(e)]; }
};

// Scratch rows of one group of experts, reused from group to group.
struct GroupBuffers {
  std::vector<float> xe, gate, up;
  std::vector<kernels::MatmulJob> jobs;
};

// Experts active[g, g_end) (consecutive, so their tokens are rows [row0, row0 + rows)): gate and
// up over their tokens in one pool run (kernels::matmul_jobs), the activation, then down in
// another, into ye's rows. Returns the bytes of the experts' weights.
std::int64_t run_expert_group(const MoeSpec& spec, const ExpertWeights& w, const float* x, int T, int d,
                              const ExpertRows& er, std::size_t g, std::size_t g_end, GroupBuffers& b, float* ye,
                              ThreadPool& pool) {
  const auto sz = [](long a, long c) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(c); };
  const int k = spec.n_used, ff = spec.n_ff_expert;
  const int row0 = er.row(er.active[g]);
  const int rows = er.row(er.active[g_end - 1]) + er.tokens(er.active[g_end - 1]) - row0;
  b.gate.resize(sz(rows, ff));
  b.up.resize(sz(rows, ff));
  // An expert that every token chose (each of a decode step's k experts) reads x itself, so the
  // jobs that share it quantize it once; the others read their tokens' rows gathered into xe.
  if (std::any_of(er.active.begin() + static_cast<long>(g), er.active.begin() + static_cast<long>(g_end),
                  [&](int e) { return er.tokens(e) != T; })) {
    b.xe.resize(sz(rows, d));
  }
  std::int64_t bytes = 0;
  b.jobs.clear();
  for (std::size_t a = g; a < g_end; ++a) {
    const int e = er.active[a], row = er.row(e), n = er.tokens(e);
    const auto ue = static_cast<std::size_t>(e);
    const float* in = x;
    if (n != T) {
      in = &b.xe[sz(row - row0, d)];
      for (int r = 0; r < n; ++r) {
        std::copy_n(x + sz(er.pair_at[static_cast<std::size_t>(row + r)] / k, d), d, &b.xe[sz(row - row0 + r, d)]);
      }
    }
    b.jobs.push_back({w.gate[ue], in, n, &b.gate[sz(row - row0, ff)]});
    b.jobs.push_back({w.up[ue], in, n, &b.up[sz(row - row0, ff)]});
    bytes += bytes_of(w.gate[ue]) + bytes_of(w.up[ue]) + bytes_of(w.down[ue]);
  }
  kernels::matmul_jobs(b.jobs, pool);
  b.jobs.clear();
  for (std::size_t a = g; a < g_end; ++a) {
    const int e = er.active[a], row = er.row(e), n = er.tokens(e);
    float* gate = &b.gate[sz(row - row0, ff)];
    float* up = &b.up[sz(row - row0, ff)];
    add_expert_bias(w.gate_bias, e, ff, gate, n);
    add_expert_bias(w.up_bias, e, ff, up, n);
    activate(spec.activation, gate, up, n * ff);
    b.jobs.push_back({w.down[static_cast<std::size_t>(e)], gate, n, ye + sz(row, d)});
  }
  kernels::matmul_jobs(b.jobs, pool);
  for (std::size_t a = g; a < g_end; ++a) {
    const int e = er.active[a];
    add_expert_bias(w.down_bias, e, d, ye + sz(er.row(e), d), er.tokens(e));
  }
  return bytes;
}

}  // namespace

std::int64_t moe_feed_forward(const MoeSpec& spec, const ExpertWeights& w, const float* x, int n_tokens, int n_embd,
                              float* out, ThreadPool& pool) {
  const int T = n_tokens, d = n_embd, k = spec.n_used, n_experts = spec.n_experts;
  const auto sz = [](long a, long b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
  std::vector<float> logits(sz(T, n_experts));
  kernels::matmul(w.router, x, T, logits.data(), pool);
  if (!w.router_bias.empty()) {
    for (int t = 0; t < T; ++t) kernels::add_inplace(&logits[sz(t, n_experts)], w.router_bias.data(), n_experts);
  }
  std::vector<int> chosen(sz(T, k));
  std::vector<float> weights(sz(T, k));
  route_tokens(spec, logits.data(), T, chosen.data(), weights.data());
  std::int64_t bytes_read = bytes_of(w.router);

  // The experts in groups of kExpertsPerRun, consecutive in index order: a group's gate and up
  // matrices in one pool run, its down matrices in another, each expert's weights read once for
  // all of its tokens. A decode step's k experts are one group: three pool runs with the router's.
  // The inputs and hidden rows are held for one group at a time (a long prefill's would be T * k
  // rows of each); the outputs, ye, for every pair.
  const ExpertRows er(chosen, n_experts);
  std::vector<float> ye(sz(T, k) * static_cast<std::size_t>(d));
  GroupBuffers buffers;
  for (std::size_t g = 0; g < er.active.size(); g += kExpertsPerRun) {
    const std::size_t g_end = std::min(er.active.size(), g + kExpertsPerRun);
    bytes_read += run_expert_group(spec, w, x, T, d, er, g, g_end, buffers, ye.data(), pool);
  }
  // Weighted sum in each token's top-k order.
  for (int t = 0; t < T; ++t) {
    float* o = out + sz(t, d);
    for (int j = 0; j < k; ++j) {
      const float wt = weights[sz(t, k) + static_cast<std::size_t>(j)];
      const float* y = &ye[sz(er.row_of[sz(t, k) + static_cast<std::size_t>(j)], d)];
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
