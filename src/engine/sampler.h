// Picks the next token from a row of logits, from a per-request seeded generator, so the same seed
// and prompt give the same output. Also reports the chosen token's log-probability and the most
// likely alternatives under the unmodified distribution (what the OpenAI API's logprobs report).
//
// The knobs apply in this order (SamplingParams in engine/engine.h):
//   1. logit_bias: added to the logit; -100 bans the token (OpenAI).
//   2. repetition_penalty over the last repeat_last_n tokens of the sequence, prompt included,
//      each distinct token once: logit > 0 ? logit / penalty : logit * penalty (llama.cpp's
//      repeat_penalty).
//   3. frequency_penalty and presence_penalty over the generated tokens (OpenAI's definition):
//      logit -= count * frequency_penalty + (count > 0) * presence_penalty.
//   4. The grammar's mask (constrained decoding): tokens that would leave the grammar are removed,
//      end-of-generation tokens are allowed only where the grammar accepts. Every selection
//      below sees only what is left, greedy included.
//   5. Greedy (temperature 0): the most likely token left, ties to the lowest id. Otherwise the
//      logits are divided by the temperature; top_n_sigma keeps those within top_n_sigma standard
//      deviations (of the logits left) of the largest (scale-free, so the temperature does not
//      change what it keeps); then the filters in llama.cpp's order: top_k, typical_p, top_p,
//      min_p; the draw is from what is left, renormalised. (min_p is applied first when
//      typical_p is off: it keeps p >= min_p * p_max, and top_k and top_p never drop the most
//      likely token, so the result is the same and the sorts after it are smaller.)
//
// Thread safety: Sampler is a plain value owned by one sequence (its grammar is shared, and safe
// from any thread).
#pragma once

#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "grammar/token_matcher.h"

namespace kvstash {

struct SampleResult {
  TokenId token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top_logprobs;  // most likely first
  // Set when no token could be picked (every token banned or masked, or the grammar's state
  // table is full); `token` is then -1 and the request must end with this error.
  std::string error;
};

// Steps 1–3 above on `logits` in place. `context` is the sequence so far (prompt, then the tokens
// generated), `n_prompt` how many of its leading tokens are the prompt. Exposed for tests.
void apply_penalties_and_bias(const SamplingParams& params, std::span<const TokenId> context, int n_prompt,
                              std::span<float> logits);

class Sampler {
 public:
  // `end_tokens`: the tokens that end this request (end of generation, stop tokens); with a
  // grammar they are allowed only where the grammar accepts, and they end its matching.
  explicit Sampler(const SamplingParams& params, std::vector<TokenId> end_tokens = {});
  // Picks the token after `context` (prompt + generated so far; n_prompt of it is the prompt)
  // and, with a grammar, advances the grammar's state over it.
  SampleResult sample(const float* logits, int n_vocab, int n_top_logprobs, std::span<const TokenId> context = {},
                      int n_prompt = 0);
  // The probability of the likeliest token in the distribution the last sample() drew from (after
  // temperature and the truncations); 1 for a greedy pick. A draft of one token is accepted with
  // at most this probability (speculative.h SpecState::observe).
  double last_top_probability() const { return last_top_probability_; }

 private:
  bool modifies_logits() const;
  bool apply_grammar(std::span<float> logits, std::string& error);
  TokenId pick(const float* logits, int n_vocab);
  SamplingParams params_;
  std::vector<TokenId> end_tokens_;
  std::mt19937_64 rng_;
  grammar::MatcherState grammar_state_;
  std::vector<float> work_;                            // the processed logits, reused between calls
  std::vector<std::uint64_t> mask_;                    // the grammar's allowed tokens, reused
  std::vector<std::pair<float, TokenId>> candidates_;  // reused between calls
  std::vector<double> probs_;                          // reused between calls
  double last_top_probability_ = 1.0;                  // of the last pick()
};

}  // namespace kvstash
