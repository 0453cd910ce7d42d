#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace kvstash {
namespace {

constexpr float kBanBias = -100.0f;  // OpenAI: "-100 should result in a ban"
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// A strict total order (ties by id), so every partial sort yields the same prefix.
bool by_logit(const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

void apply_penalties_and_bias(const SamplingParams& p, std::span<const TokenId> context, int n_prompt,
                              std::span<float> logits) {
  const auto n_vocab = static_cast<TokenId>(logits.size());
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || token >= n_vocab) continue;  // the request builder range-checks them
    logits[static_cast<std::size_t>(token)] = bias <= kBanBias ? kMinusInf : logits[static_cast<std::size_t>(token)] + bias;
  }
  if (p.repetition_penalty != 1.0f && p.repeat_last_n != 0) {
    const std::size_t window = p.repeat_last_n < 0 ? context.size() : std::min(context.size(), static_cast<std::size_t>(p.repeat_last_n));
    std::vector<TokenId> seen(context.end() - static_cast<long>(window), context.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (TokenId t : seen) {
      if (t < 0 || t >= n_vocab) continue;
      float& l = logits[static_cast<std::size_t>(t)];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<TokenId, int> count;
    for (std::size_t i = static_cast<std::size_t>(std::max(0, n_prompt)); i < context.size(); ++i) ++count[context[i]];
    for (const auto& [t, c] : count) {
      if (t < 0 || t >= n_vocab) continue;
      logits[static_cast<std::size_t>(t)] -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
    }
  }
}

Sampler::Sampler(const SamplingParams& params, std::vector<TokenId> end_tokens)
    : params_(params), end_tokens_(std::move(end_tokens)), rng_(params.seed) {
  if (params_.grammar) grammar_state_ = params_.grammar->initial_state();
}

bool Sampler::modifies_logits() const {
  return !params_.logit_bias.empty() || params_.grammar || params_.frequency_penalty != 0.0f ||
         params_.presence_penalty != 0.0f || (params_.repetition_penalty != 1.0f && params_.repeat_last_n != 0);
}

// Step 4: -inf for every token the grammar does not allow here (end tokens included: they have
// no bytes; sample() restores them where the grammar accepts).
bool Sampler::apply_grammar(std::span<float> logits, std::string& error) {
  const grammar::CompiledGrammar& g = *params_.grammar;
  if (Status st = g.allowed_tokens(grammar_state_, mask_); !st) {
    error = "constrained decoding: " + st.message();
    return false;
  }
  const std::size_t n = logits.size();
  const std::size_t n_mask = std::min(n, mask_.size() * 64);
  for (std::size_t w = 0; w * 64 < n_mask; ++w) {
    const std::uint64_t bits = mask_[w];
    if (bits == ~std::uint64_t{0}) continue;
    const std::size_t end = std::min(n_mask, w * 64 + 64);
    for (std::size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i - w * 64)) & 1u)) logits[i] = kMinusInf;
    }
  }
  for (std::size_t i = n_mask; i < n; ++i) logits[i] = kMinusInf;  // ids past the tokenizer's
  return true;
}

SampleResult Sampler::sample(const float* logits, int n_vocab, int n_top_logprobs, std::span<const TokenId> context,
                             int n_prompt) {
  SampleResult r;
  const float* chosen_from = logits;
  if (modifies_logits()) {
    work_.assign(logits, logits + n_vocab);
    apply_penalties_and_bias(params_, context, n_prompt, work_);
    if (params_.grammar) {
      // The grammar's mask never holds end tokens: they end the output, which is right only where
      // the grammar accepts. They keep their processed logit there.
      std::vector<float> ends;
      for (TokenId t : end_tokens_) ends.push_back(t >= 0 && t < n_vocab ? work_[static_cast<std::size_t>(t)] : kMinusInf);
      if (!apply_grammar(work_, r.error)) return r;
      const bool accepts = params_.grammar->accepts(grammar_state_);
      for (std::size_t i = 0; i < end_tokens_.size(); ++i) {
        const TokenId t = end_tokens_[i];
        if (t >= 0 && t < n_vocab) work_[static_cast<std::size_t>(t)] = accepts ? ends[i] : kMinusInf;
      }
    }
    chosen_from = work_.data();
  }
  r.token = pick(chosen_from, n_vocab);
  if (r.token < 0) {
    r.error = params_.grammar ? "constrained decoding: no token can continue the output (the grammar allows none, or "
                                "all it allows are banned by logit_bias)"
                              : "every token is banned by logit_bias";
    return r;
  }
  if (params_.grammar && std::find(end_tokens_.begin(), end_tokens_.end(), r.token) == end_tokens_.end()) {
    Expected<grammar::MatcherState> next = params_.grammar->advance(grammar_state_, r.token);
    if (!next) {
      r.error = "constrained decoding: " + next.status().message();
      r.token = -1;
      return r;
    }
    grammar_state_ = *next;
  }
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
    std::partial_sort(top.begin(), top.begin() + k, top.end(), by_logit);
    for (int i = 0; i < k; ++i) r.top_logprobs.emplace_back(top[static_cast<std::size_t>(i)].second, top[static_cast<std::size_t>(i)].first - log_z);
  }
  return r;
}

// Step 5: -1 when every logit is -inf (nothing may be picked).
TokenId Sampler::pick(const float* logits, int n_vocab) {
  last_top_probability_ = 1.0;
  if (params_.temperature <= 0.0f) {
    // Greedy; ties go to the lowest id so the choice never depends on the scan order.
    const auto best = static_cast<TokenId>(std::max_element(logits, logits + n_vocab) - logits);
    return logits[best] == kMinusInf ? -1 : best;
  }
  candidates_.clear();
  for (int i = 0; i < n_vocab; ++i) {
    if (logits[i] != kMinusInf) candidates_.emplace_back(logits[i] / params_.temperature, i);
  }
  if (candidates_.empty()) return -1;
  float max_logit = candidates_[0].first;
  for (const auto& c : candidates_) max_logit = std::max(max_logit, c.first);
  if (params_.top_n_sigma >= 0.0f) {
    double mean = 0.0, sq = 0.0;
    for (const auto& c : candidates_) mean += c.first;
    mean /= static_cast<double>(candidates_.size());
    for (const auto& c : candidates_) sq += (c.first - mean) * (c.first - mean);
    const double sigma = std::sqrt(sq / static_cast<double>(candidates_.size()));
    const auto floor = static_cast<float>(max_logit - params_.top_n_sigma * sigma);
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(), [floor](const auto& c) { return c.first < floor; }),
                      candidates_.end());
  }
  // min_p keeps p >= min_p * p_max, i.e. logit/T >= max + log(min_p).
  const float min_p_floor = params_.min_p > 0.0f ? max_logit + std::log(params_.min_p) : kMinusInf;
  auto below_min_p = [min_p_floor](const std::pair<float, TokenId>& c) { return c.first < min_p_floor; };
  const bool typical = params_.typical_p < 1.0f;
  if (params_.min_p > 0.0f && !typical) {
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(), below_min_p), candidates_.end());
  }
  std::size_t n = candidates_.size();
  bool sorted = false;  // candidates_[0, n) sorted by logit
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n) {
    n = static_cast<std::size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<long>(n), candidates_.end(), by_logit);
    sorted = true;
  }
  candidates_.resize(n);
  if (typical) {
    // Locally typical sampling: keep the tokens whose surprisal is closest to the entropy, the
    // fewest whose mass reaches typical_p (llama.cpp's llama_sampler_typical).
    probs_.resize(n);
    double z = 0.0;
    for (std::size_t i = 0; i < n; ++i) z += probs_[i] = std::exp(static_cast<double>(candidates_[i].first - max_logit));
    double entropy = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double q = probs_[i] / z;
      if (q > 0) entropy -= q * std::log(q);
    }
    std::vector<std::pair<double, std::size_t>> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = {std::abs(-std::log(probs_[i] / z) - entropy), i};
    std::sort(order.begin(), order.end());
    std::vector<std::pair<float, TokenId>> kept;
    double mass = 0.0;
    for (const auto& [score, i] : order) {
      kept.push_back(candidates_[i]);
      mass += probs_[i] / z;
      if (mass >= params_.typical_p) break;
    }
    candidates_ = std::move(kept);
    n = candidates_.size();
    sorted = false;
    if (params_.min_p > 0.0f) {
      // Relative to the most likely token typical_p kept (it may have dropped the overall one).
      float kept_max = kMinusInf;
      for (const auto& c : candidates_) kept_max = std::max(kept_max, c.first);
      const float floor = kept_max + std::log(params_.min_p);
      candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(), [floor](const auto& c) { return c.first < floor; }),
                        candidates_.end());
      n = candidates_.size();
    }
  }
  probs_.resize(n);
  double sum = 0.0, top = 0.0;  // top: the largest of probs_, for last_top_probability_
  for (std::size_t i = 0; i < n; ++i) {
    sum += probs_[i] = std::exp(static_cast<double>(candidates_[i].first - max_logit));
    top = std::max(top, probs_[i]);
  }
  if (params_.top_p < 1.0f) {
    // The smallest prefix of the candidates sorted by logit whose mass reaches top_p. Without a
    // top_k they are not sorted yet: sorting all of a 150k vocabulary took ~10 ms per token
    // (more than the decode step of a 0.5B model), so only the most likely `m` are brought to
    // the front and sorted, m growing until their mass reaches top_p.
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
    top = probs_[0];  // the kept prefix is sorted by logit
  }
  last_top_probability_ = sum > 0.0 ? top / sum : 1.0;
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
