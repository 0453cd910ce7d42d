// The router's gating (route_tokens) on hand-computed cases, and moe_feed_forward's grouping of
// tokens by expert against one token and one expert at a time; the experts' sums against the
// double-precision reference are in model_test (ForwardVsReference, qwen3moe-tiny).
#include "model/moe.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "kernels/test_weights.h"

namespace kvstash {
namespace {

MoeSpec spec(int n_experts, int n_used, bool renormalize) {
  MoeSpec s;
  s.n_experts = n_experts;
  s.n_used = n_used;
  s.n_ff_expert = 16;
  s.renormalize = renormalize;
  return s;
}

TEST(RouteTokens, PicksTheLargestProbabilitiesBestFirstAndRenormalises) {
  // Logits ln(1), ln(4), ln(2), ln(3): probabilities 0.1, 0.4, 0.2, 0.3.
  const float logits[] = {0.0f, std::log(4.0f), std::log(2.0f), std::log(3.0f)};
  int experts[2];
  float weights[2];
  route_tokens(spec(4, 2, true), logits, 1, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 3);
  EXPECT_NEAR(weights[0], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(weights[1], 0.3 / 0.7, 1e-6);

  route_tokens(spec(4, 2, false), logits, 1, experts, weights);
  EXPECT_NEAR(weights[0], 0.4, 1e-6);  // the softmax over all four, not over the two kept
  EXPECT_NEAR(weights[1], 0.3, 1e-6);
}

TEST(RouteTokens, EachTokenRoutesOnItsOwnRowAndTiesGoToTheLowerExpert) {
  const float logits[] = {
      1.0f, 1.0f, 0.0f,  // token 0: experts 0 and 1 tie
      0.0f, 2.0f, 5.0f,  // token 1
  };
  int experts[4];
  float weights[4];
  route_tokens(spec(3, 2, true), logits, 2, experts, weights);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 1);
  EXPECT_FLOAT_EQ(weights[0], 0.5f);
  EXPECT_FLOAT_EQ(weights[1], 0.5f);
  EXPECT_EQ(experts[2], 2);
  EXPECT_EQ(experts[3], 1);
  EXPECT_NEAR(weights[2], 1.0 / (1.0 + std::exp(-3.0)), 1e-6);
  EXPECT_NEAR(weights[2] + weights[3], 1.0, 1e-6);
}

TEST(RouteTokens, AllExpertsUsedGivesTheWholeSoftmax) {
  const float logits[] = {3.0f, -1.0f, 0.5f};
  int experts[3];
  float weights[3];
  route_tokens(spec(3, 3, true), logits, 1, experts, weights);
  const double z = std::exp(3.0) + std::exp(-1.0) + std::exp(0.5);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 2);
  EXPECT_EQ(experts[2], 1);
  EXPECT_NEAR(weights[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(weights[2], std::exp(-1.0) / z, 1e-6);
}

// A layer of 16 experts, 4 used, 256 wide, with quantized experts (gate/up Q4_K, down Q8_0) and an
// F32 router, as a Qwen3-MoE file has them.
struct TestExperts {
  static constexpr int kExperts = 16, kUsed = 4, kEmbd = 256, kFf = 64;
  std::vector<kernels::TestWeights> stored;  // router, then gate, up, down per expert
  ExpertWeights w;
  MoeSpec spec;

  TestExperts() {
    stored.push_back(kernels::make_test_weights(kernels::WeightType::kF32, kExperts, kEmbd, 1));
    for (int e = 0; e < kExperts; ++e) {
      stored.push_back(kernels::make_test_weights(kernels::WeightType::kQ4_K, kFf, kEmbd, 10 + 3 * e));
      stored.push_back(kernels::make_test_weights(kernels::WeightType::kQ4_K, kFf, kEmbd, 11 + 3 * e));
      stored.push_back(kernels::make_test_weights(kernels::WeightType::kQ8_0, kEmbd, kFf, 12 + 3 * e));
    }
    w.router = stored[0].view;
    for (int e = 0; e < kExperts; ++e) {
      w.gate.push_back(stored[static_cast<std::size_t>(1 + 3 * e)].view);
      w.up.push_back(stored[static_cast<std::size_t>(2 + 3 * e)].view);
      w.down.push_back(stored[static_cast<std::size_t>(3 + 3 * e)].view);
    }
    spec = MoeSpec{kExperts, kUsed, kFf};
  }
};

std::vector<float> random_rows(int n_rows, int width, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n_rows) * static_cast<std::size_t>(width));
  for (float& f : v) f = dist(rng);
  return v;
}

void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i])) << what << " at " << i;
  }
}

// A token's output is the same bits alone (the decode step: its k experts' matrices in one pool run,
// then their down projections in another) and in a batch of 37 tokens (grouped by expert, many
// experts per run), and both are the sum of its experts computed one expert at a time with plain
// matmuls. A decode step reads the router and its k experts; a batch each expert some token chose,
// once.
TEST(MoeFeedForward, ATokenGetsTheSameBitsAloneInABatchAndExpertByExpert) {
  const TestExperts t;
  const int d = TestExperts::kEmbd, ff = TestExperts::kFf, k = TestExperts::kUsed, n_tokens = 37;
  const std::vector<float> x = random_rows(n_tokens, d, 5);
  ThreadPool pool(3);

  std::vector<float> batched(x.size(), std::nanf(""));
  const std::int64_t batch_bytes = moe_feed_forward(t.spec, t.w, x.data(), n_tokens, d, batched.data(), pool);

  std::vector<float> alone(x.size(), std::nanf("")), by_expert(x.size(), std::nanf(""));
  const auto bytes_of = [](const kernels::WeightView& v) { return v.rows * static_cast<std::int64_t>(v.row_bytes); };
  const std::int64_t expert_bytes = bytes_of(t.w.gate[0]) + bytes_of(t.w.up[0]) + bytes_of(t.w.down[0]);
  std::vector<bool> chosen_by_some(TestExperts::kExperts, false);
  for (int tok = 0; tok < n_tokens; ++tok) {
    const float* xt = &x[static_cast<std::size_t>(tok) * d];
    EXPECT_EQ(moe_feed_forward(t.spec, t.w, xt, 1, d, &alone[static_cast<std::size_t>(tok) * d], pool),
              bytes_of(t.w.router) + k * expert_bytes);
    // Expert by expert, as the engine computed a decode step before the experts shared pool runs.
    std::vector<float> logits(TestExperts::kExperts), weights(k), gate(ff), up(ff), y(d);
    std::vector<int> experts(k);
    kernels::matmul(t.w.router, xt, 1, logits.data(), pool);
    route_tokens(t.spec, logits.data(), 1, experts.data(), weights.data());
    float* o = &by_expert[static_cast<std::size_t>(tok) * d];
    for (int j = 0; j < k; ++j) {
      const auto e = static_cast<std::size_t>(experts[static_cast<std::size_t>(j)]);
      chosen_by_some[e] = true;
      kernels::matmul(t.w.gate[e], xt, 1, gate.data(), pool);
      kernels::matmul(t.w.up[e], xt, 1, up.data(), pool);
      kernels::silu_mul(gate.data(), up.data(), ff, gate.data());
      kernels::matmul(t.w.down[e], gate.data(), 1, y.data(), pool);
      for (int i = 0; i < d; ++i) o[i] = j == 0 ? weights[static_cast<std::size_t>(j)] * y[static_cast<std::size_t>(i)]
                                               : o[i] + weights[static_cast<std::size_t>(j)] * y[static_cast<std::size_t>(i)];
    }
  }
  expect_bits_equal(alone, by_expert, "alone vs expert by expert");
  expect_bits_equal(batched, by_expert, "batched vs expert by expert");
  std::int64_t used = 0;
  for (bool c : chosen_by_some) used += c ? 1 : 0;
  EXPECT_GT(used, k) << "the batch's tokens chose different experts";
  EXPECT_EQ(batch_bytes, bytes_of(t.w.router) + used * expert_bytes);
}

}  // namespace
}  // namespace kvstash
