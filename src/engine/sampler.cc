#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace kvstash {

SampleResult Sampler::sample(const float* logits, int n_vocab, int n_top_logprobs) {
  SampleResult r;
  r.token = pick(logits, n_vocab);
  // log-softmax of the raw logits, in double for the normaliser.
  float max_logit = *std::max_element(logits, logits + n_vocab);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const float log_z = max_logit + static_cast<float>(std::log(sum));
  r.logprob = logits[r.token] - log_z;
  if (n_top_logprobs > 0) {
    std::vector<std::pair<float, TokenId>> top;
    top.reserve(static_cast<std::size_t>(n_vocab));
    for (int i = 0; i < n_vocab; ++i) top.emplace_back(logits[i], i);
    const int k = std::min(n_top_logprobs, n_vocab);
    std::partial_sort(top.begin(), top.begin() + k, top.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    for (int i = 0; i < k; ++i) r.top_logprobs.emplace_back(top[static_cast<std::size_t>(i)].second, top[static_cast<std::size_t>(i)].first - log_z);
  }
  return r;
}

TokenId Sampler::pick(const float* logits, int n_vocab) {
  if (params_.temperature <= 0.0f) {
    // Greedy; ties go to the lowest id so the choice never depends on the scan order.
    return static_cast<TokenId>(std::max_element(logits, logits + n_vocab) - logits);
  }
  candidates_.clear();
  for (int i = 0; i < n_vocab; ++i) candidates_.emplace_back(logits[i] / params_.temperature, i);
  // A strict total order (ties by id), so every partial sort below yields the same prefix.
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  const std::size_t n_all = candidates_.size();
  float max_logit = candidates_[0].first;
  for (const auto& c : candidates_) max_logit = std::max(max_logit, c.first);
  probs_.resize(n_all);
  std::size_t n = n_all;
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n_all) {
    n = static_cast<std::size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<long>(n), candidates_.end(), by_logit);
  }
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += probs_[i] = std::exp(static_cast<double>(candidates_[i].first - max_logit));
  if (params_.top_p < 1.0f) {
    // The smallest prefix of the candidates sorted by logit whose mass reaches top_p. Without a
    // top_k they are not sorted yet: sorting all of a 150k vocabulary took ~10 ms per token
    // (more than the decode step of a 0.5B model), so only the most likely `m` are brought to
    // the front and sorted, m growing until their mass reaches top_p.
    const bool sorted = n < n_all;
    std::size_t m = sorted ? n : std::min<std::size_t>(256, n);
    std::size_t keep = 0;
    for (;;) {
      if (!sorted) {
        if (m < n) std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<long>(m), candidates_.end(), by_logit);
        std::sort(candidates_.begin(), candidates_.begin() + static_cast<long>(m), by_logit);
      }
      double mass = 0.0;
      keep = 0;
      while (keep < m) {
        const double p = std::exp(static_cast<double>(candidates_[keep++].first - max_logit));
        probs_[keep - 1] = p;
        mass += p / sum;
        if (mass >= params_.top_p) break;
      }
      if (mass >= params_.top_p || m == n) break;
      m = std::min(n, m * 4);
    }
    n = keep;
    sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) sum += probs_[i];
  }
  // Inverse-CDF draw with a 53-bit uniform from the seeded generator (same on every platform,
  // unlike std::discrete_distribution, whose algorithm the standard leaves open), over the
  // candidates in their order here: by logit after top-k / top-p, by id otherwise.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double acc = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    acc += probs_[i];
    if (u < acc) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace kvstash
