// The sampling knobs against reference computations written from their definitions: logit_bias
// (OpenAI: added, -100 bans), presence/frequency penalties (OpenAI, over generated tokens),
// repetition_penalty (llama.cpp's repeat_penalty over a window of the whole sequence), min_p and
// typical_p (the sets a full sort of the distribution defines).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "engine/sampler.h"

namespace kvstash {
namespace {

std::vector<float> logits_of(int n, std::uint32_t seed, float spread) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::uint32_t x = seed * 2654435761u + 7;
  for (float& v : out) {
    x = x * 1664525u + 1013904223u;
    v = spread * (static_cast<float>(x >> 8) / static_cast<float>(1u << 24) - 0.5f);
  }
  return out;
}

std::vector<TokenId> draws(const std::vector<float>& logits, const SamplingParams& p, int n,
                           std::span<const TokenId> context = {}, int n_prompt = 0) {
  Sampler s(p);
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    SampleResult r = s.sample(logits.data(), static_cast<int>(logits.size()), 0, context, n_prompt);
    EXPECT_TRUE(r.error.empty()) << r.error;
    out.push_back(r.token);
  }
  return out;
}

TEST(SamplerKnobs, PenaltiesAndBiasMatchTheirDefinitions) {
  std::vector<float> logits = logits_of(500, 3, 10.0f);
  // Prompt: 7 7 9 11; generated: 7 13 13 13 400 9. Window of 5: 13 13 13 400 9 ... plus the last.
  const std::vector<TokenId> context{7, 7, 9, 11, 7, 13, 13, 13, 400, 9};
  const int n_prompt = 4;
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.repetition_penalty = 1.3f;
  p.repeat_last_n = 5;
  p.logit_bias = {{2, 3.0f}, {9, -1.5f}, {499, -100.0f}};
  std::vector<float> got = logits;
  apply_penalties_and_bias(p, context, n_prompt, got);
  // The reference, token by token.
  for (TokenId t = 0; t < 500; ++t) {
    float want = logits[static_cast<std::size_t>(t)];
    for (const auto& [id, bias] : p.logit_bias) {
      if (id == t) want = bias == -100.0f ? -INFINITY : want + bias;
    }
    const bool in_window = std::find(context.end() - 5, context.end(), t) != context.end();
    if (in_window) want = want > 0 ? want / 1.3f : want * 1.3f;
    const long count = std::count(context.begin() + n_prompt, context.end(), t);
    want -= static_cast<float>(count) * 0.25f + (count > 0 ? 0.5f : 0.0f);
    if (std::isinf(want)) {
      EXPECT_TRUE(std::isinf(got[static_cast<std::size_t>(t)]) && got[static_cast<std::size_t>(t)] < 0) << t;
    } else {
      EXPECT_NEAR(got[static_cast<std::size_t>(t)], want, 1e-5f) << "token " << t;
    }
  }
  // Token 11 was only in the prompt, outside the window: untouched.
  EXPECT_EQ(got[11], logits[11]);
  // repeat_last_n -1 covers the whole sequence (11 included); 0 turns the penalty off.
  p.logit_bias.clear();
  p.presence_penalty = p.frequency_penalty = 0.0f;
  p.repeat_last_n = -1;
  got = logits;
  apply_penalties_and_bias(p, context, n_prompt, got);
  EXPECT_FLOAT_EQ(got[11], logits[11] > 0 ? logits[11] / 1.3f : logits[11] * 1.3f);
  p.repeat_last_n = 0;
  got = logits;
  apply_penalties_and_bias(p, context, n_prompt, got);
  EXPECT_EQ(got, logits);
}

TEST(SamplerKnobs, LogitBiasBansAndForces) {
  std::vector<float> logits = logits_of(2000, 5, 6.0f);
  logits[42] = 20.0f;  // the clear favourite
  SamplingParams greedy;
  greedy.logit_bias = {{42, -100.0f}};
  for (TokenId t : draws(logits, greedy, 3)) EXPECT_NE(t, 42);
  SamplingParams sampled = greedy;
  sampled.temperature = 1.0f;
  sampled.seed = 1;
  for (TokenId t : draws(logits, sampled, 300)) EXPECT_NE(t, 42);
  // +100 makes a token the only likely one, even when sampling.
  sampled.logit_bias = {{1234, 100.0f}};
  for (TokenId t : draws(logits, sampled, 50)) EXPECT_EQ(t, 1234);
  // Everything banned: an error, no token.
  std::vector<float> small(3, 0.0f);
  SamplingParams all;
  all.logit_bias = {{0, -100.0f}, {1, -100.0f}, {2, -100.0f}};
  Sampler s(all);
  SampleResult r = s.sample(small.data(), 3, 0);
  EXPECT_EQ(r.token, -1);
  EXPECT_NE(r.error.find("banned"), std::string::npos);
}

TEST(SamplerKnobs, PenaltiesChangeGreedyOutputAsDefined) {
  // Token 5 leads token 6 by 0.4. Generated once: a presence penalty of 0.5 puts 6 ahead; one of
  // 0.3 does not. In the prompt only: OpenAI's penalties do not apply, a repeat penalty does.
  std::vector<float> logits(10, 0.0f);
  logits[5] = 2.0f;
  logits[6] = 1.6f;
  const std::vector<TokenId> generated_once{1, 2, 5};  // prompt {1, 2}, generated {5}
  SamplingParams p;
  p.presence_penalty = 0.5f;
  EXPECT_EQ(draws(logits, p, 1, generated_once, 2)[0], 6);
  p.presence_penalty = 0.3f;
  EXPECT_EQ(draws(logits, p, 1, generated_once, 2)[0], 5);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.15f;  // three times: 0.45 > 0.4
  const std::vector<TokenId> thrice{1, 5, 5, 5};
  EXPECT_EQ(draws(logits, p, 1, thrice, 1)[0], 6);
  EXPECT_EQ(draws(logits, p, 1, thrice, 2)[0], 5) << "twice generated: 0.3 < 0.4";
  p.frequency_penalty = 0.0f;
  const std::vector<TokenId> in_prompt{5, 1};
  p.presence_penalty = 1.0f;
  EXPECT_EQ(draws(logits, p, 1, in_prompt, 2)[0], 5) << "presence counts only generated tokens";
  p.presence_penalty = 0.0f;
  p.repetition_penalty = 1.3f;  // 2.0 / 1.3 = 1.54 < 1.6
  EXPECT_EQ(draws(logits, p, 1, in_prompt, 2)[0], 6);
  p.repeat_last_n = 1;  // the window holds only token 1
  EXPECT_EQ(draws(logits, p, 1, in_prompt, 2)[0], 5);
}

// softmax(logits / T) and the sets min_p / typical_p keep, from a full sort.
std::vector<double> softmax(const std::vector<float>& logits, float t) {
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double z = 0;
  for (std::size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(static_cast<double>(logits[i] - m) / t);
  for (double& x : p) x /= z;
  return p;
}

TEST(SamplerKnobs, MinPDrawsOnlyTokensAboveTheFloor) {
  const std::vector<float> logits = logits_of(151936, 9, 14.0f);
  for (float min_p : {0.05f, 0.3f}) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.min_p = min_p;
    p.seed = 4;
    const std::vector<double> probs = softmax(logits, p.temperature);
    const double p_max = *std::max_element(probs.begin(), probs.end());
    std::set<TokenId> ok;
    for (std::size_t i = 0; i < probs.size(); ++i) {
      if (probs[i] >= min_p * p_max * (1 - 1e-5)) ok.insert(static_cast<TokenId>(i));
    }
    ASSERT_GT(ok.size(), 1u);
    std::set<TokenId> seen;
    for (TokenId t : draws(logits, p, 200)) {
      EXPECT_TRUE(ok.count(t)) << "min_p " << min_p << " drew " << t;
      seen.insert(t);
    }
    EXPECT_GT(seen.size(), 1u) << "min_p must not collapse to greedy";
  }
}

TEST(SamplerKnobs, TypicalPDrawsFromTheTypicalSet) {
  std::vector<float> logits = logits_of(3000, 11, 8.0f);
  logits[17] = 9.0f;  // a token far more likely than the rest: less typical than its mass suggests
  SamplingParams p;
  p.temperature = 1.0f;
  p.typical_p = 0.5f;
  p.seed = 8;
  const std::vector<double> probs = softmax(logits, 1.0f);
  double entropy = 0;
  for (double q : probs) entropy -= q > 0 ? q * std::log(q) : 0;
  std::vector<std::pair<double, TokenId>> order;
  for (std::size_t i = 0; i < probs.size(); ++i) order.emplace_back(std::abs(-std::log(probs[i]) - entropy), static_cast<TokenId>(i));
  std::sort(order.begin(), order.end());
  std::set<TokenId> ok;
  double mass = 0;
  for (const auto& [score, t] : order) {
    ok.insert(t);
    mass += probs[static_cast<std::size_t>(t)];
    if (mass >= 0.5) break;
  }
  for (TokenId t : draws(logits, p, 200)) EXPECT_TRUE(ok.count(t)) << t;
  // With min_p on top, the floor is relative to the most likely token typical_p kept.
  p.min_p = 0.5f;
  double kept_max = 0;
  for (TokenId t : ok) kept_max = std::max(kept_max, probs[static_cast<std::size_t>(t)]);
  for (TokenId t : draws(logits, p, 100)) {
    EXPECT_TRUE(ok.count(t));
    EXPECT_GE(probs[static_cast<std::size_t>(t)], 0.5 * kept_max * (1 - 1e-5));
  }
}

TEST(SamplerKnobs, TopNSigmaKeepsLogitsNearTheMaximum) {
  const std::vector<float> logits = logits_of(20000, 13, 12.0f);
  for (float n : {0.5f, 1.0f}) {
    for (float temperature : {0.7f, 1.5f}) {
      SamplingParams p;
      p.temperature = temperature;
      p.top_n_sigma = n;
      p.seed = 3;
      // The reference on the raw logits: the threshold scales with them, so T does not matter.
      double mean = 0, sq = 0;
      for (float l : logits) mean += l;
      mean /= static_cast<double>(logits.size());
      for (float l : logits) sq += (l - mean) * (l - mean);
      const double sigma = std::sqrt(sq / static_cast<double>(logits.size()));
      const float max = *std::max_element(logits.begin(), logits.end());
      std::set<TokenId> seen;
      for (TokenId t : draws(logits, p, 200)) {
        EXPECT_GE(logits[static_cast<std::size_t>(t)], max - n * sigma - 1e-3) << "n " << n << " T " << temperature;
        seen.insert(t);
      }
      EXPECT_GT(seen.size(), 1u);
    }
  }
}

}  // namespace
}  // namespace kvstash
