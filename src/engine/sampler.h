// Picks the next token from a row of logits: greedy, or temperature with top-k / top-p, from a
// per-request seeded generator, so the same seed and prompt give the same output. Also reports
// the chosen token's log-probability and the most likely alternatives under the unmodified
// distribution (what the OpenAI API's logprobs report).
//
// Thread safety: Sampler is a plain value owned by one sequence.
#pragma once

#include <random>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace kvstash {

struct SampleResult {
  TokenId token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top_logprobs;  // most likely first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  SampleResult sample(const float* logits, int n_vocab, int n_top_logprobs);

 private:
  TokenId pick(const float* logits, int n_vocab);
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, TokenId>> candidates_;  // reused between calls
  std::vector<double> probs_;                          // reused between calls
};

}  // namespace kvstash
