// The router's gating (route_tokens) on hand-computed cases; the experts' sums against the
// double-precision reference are in model_test (ForwardVsReference, qwen3moe-tiny).
#include "model/moe.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace kvstash
