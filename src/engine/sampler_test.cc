// The sampler against a brute-force reference: greedy is the argmax, top-k and top-p draw only
// from the set a full sort of the vocabulary defines (also where the nucleus is wider than the
// first partial sort), draws follow the distribution, and a seed replays exactly.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace kvstash {
namespace {

SamplingParams params(float temperature, int top_k, float top_p, std::uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

std::vector<float> logits_of(int n, std::uint32_t seed, float spread) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::uint32_t x = seed * 2654435761u + 1;
  for (float& v : out) {
    x = x * 1664525u + 1013904223u;
    v = spread * (static_cast<float>(x >> 8) / static_cast<float>(1u << 24) - 0.5f);
  }
  return out;
}

// The tokens top-k / top-p may pick, from a full sort (the definition).
std::set<TokenId> allowed(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<std::pair<float, TokenId>> c;
  for (std::size_t i = 0; i < logits.size(); ++i) c.emplace_back(logits[i] / p.temperature, static_cast<TokenId>(i));
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::size_t n = c.size();
  if (p.top_k > 0) n = std::min<std::size_t>(n, static_cast<std::size_t>(p.top_k));
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += std::exp(static_cast<double>(c[i].first - c[0].first));
  std::set<TokenId> out;
  double mass = 0;
  for (std::size_t i = 0; i < n; ++i) {
    out.insert(c[i].second);
    mass += std::exp(static_cast<double>(c[i].first - c[0].first)) / total;
    if (p.top_p < 1.0f && mass >= p.top_p) break;
  }
  return out;
}

std::vector<TokenId> draws(const std::vector<float>& logits, const SamplingParams& p, int n) {
  Sampler s(p);
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits.data(), static_cast<int>(logits.size()), 0).token);
  return out;
}

TEST(Sampler, GreedyIsTheArgmaxWithTiesToTheLowestId) {
  std::vector<float> logits = logits_of(1000, 1, 8.0f);
  logits[700] = 50.0f;
  logits[300] = 50.0f;
  SamplingParams p;
  EXPECT_EQ(draws(logits, p, 3), (std::vector<TokenId>{300, 300, 300}));
}

TEST(Sampler, TopKAndTopPDrawOnlyFromTheSetAFullSortDefines) {
  // A 150k vocabulary like qwen2.5's: a peaked one (the nucleus is a few tokens), a flat one (it
  // is tens of thousands: wider than the first partial sort of 256), and top-k with top-p.
  for (float spread : {40.0f, 2.0f}) {
    const std::vector<float> logits = logits_of(151936, 7, spread);
    for (const SamplingParams& p : {params(1.0f, 0, 0.9f, 11), params(0.7f, 0, 0.5f, 12),
                             params(1.0f, 40, 0.95f, 13), params(1.3f, 5, 1.0f, 14)}) {
      const std::set<TokenId> ok = allowed(logits, p);
      for (TokenId t : draws(logits, p, 25)) {
        ASSERT_TRUE(ok.count(t)) << "spread " << spread << " T " << p.temperature << " top_k " << p.top_k << " top_p "
                                 << p.top_p << ": token " << t << " is outside the " << ok.size() << " allowed";
      }
      if (spread == 2.0f && p.top_k == 0) {
        EXPECT_GT(ok.size(), 256u) << "the flat case must exceed the first partial sort";
      }
    }
  }
}

TEST(Sampler, DrawsFollowTheDistribution) {
  // Four tokens with probabilities 0.5, 0.25, 0.125, 0.125 (the rest negligible), no top-p: the
  // unsorted path. 4,000 draws with a fixed seed; each share within 0.03 of its probability.
  std::vector<float> logits(5000, -100.0f);
  logits[10] = std::log(4.0f);
  logits[4000] = std::log(2.0f);
  logits[20] = 0.0f;
  logits[30] = 0.0f;
  SamplingParams p = params(1.0f, 0, 1.0f, 99);
  std::map<TokenId, int> count;
  for (TokenId t : draws(logits, p, 4000)) ++count[t];
  EXPECT_NEAR(count[10] / 4000.0, 0.5, 0.03);
  EXPECT_NEAR(count[4000] / 4000.0, 0.25, 0.03);
  EXPECT_NEAR(count[20] / 4000.0, 0.125, 0.03);
  EXPECT_NEAR(count[30] / 4000.0, 0.125, 0.03);
  // With top_p 0.6 the nucleus is {10, 4000}, renormalised to 2/3 and 1/3.
  p.top_p = 0.6f;
  count.clear();
  for (TokenId t : draws(logits, p, 4000)) ++count[t];
  EXPECT_EQ(count[10] + count[4000], 4000);
  EXPECT_NEAR(count[10] / 4000.0, 2.0 / 3.0, 0.03);
}

TEST(Sampler, TheSameSeedReplaysAndAnotherSeedDiffers) {
  const std::vector<float> logits = logits_of(151936, 3, 4.0f);
  for (float top_p : {1.0f, 0.9f}) {
    const SamplingParams a = params(1.0f, 0, top_p, 5), b = params(1.0f, 0, top_p, 6);
    EXPECT_EQ(draws(logits, a, 20), draws(logits, a, 20));
    EXPECT_NE(draws(logits, a, 20), draws(logits, b, 20));
  }
}

}  // namespace
}  // namespace kvstash

namespace kvstash {
namespace {

// The top probability of the distribution the last draw came from (speculative decoding reads it).
TEST(Sampler, ReportsTheTopProbabilityOfTheDistributionItDrewFrom) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p);
  s.sample(logits.data(), 3, 0);
  EXPECT_NEAR(s.last_top_probability(), 0.5, 1e-6);
  p.top_k = 2;  // renormalised over the two kept: 0.5 / 0.8
  Sampler k(p);
  k.sample(logits.data(), 3, 0);
  EXPECT_NEAR(k.last_top_probability(), 0.625, 1e-6);
  p.top_k = 0;
  p.temperature = 1000.0f;  // nearly flat over three
  Sampler hot(p);
  hot.sample(logits.data(), 3, 0);
  EXPECT_NEAR(hot.last_top_probability(), 1.0 / 3, 1e-3);
  Sampler greedy(SamplingParams{});
  greedy.sample(logits.data(), 3, 0);
  EXPECT_EQ(greedy.last_top_probability(), 1.0);
}

}  // namespace
}  // namespace kvstash
