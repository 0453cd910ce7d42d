// gelu_mul: llama.cpp's CPU GELU (an f16 table, inputs rounded to f16), checked on values worked
// out from the tanh formula.
#include <gtest/gtest.h>

#include <cmath>

#include "common/fp16.h"
#include "kernels/kernels.h"

namespace kvstash::kernels {
namespace {

double gelu_exact(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x))); }

float gelu_of(float x, float up = 1.0f) {
  float out;
  gelu_mul(&x, &up, 1, &out);
  return out;
}

TEST(GeluMul, IsTheTanhGeluRoundedToF16TimesUp) {
  for (float x : {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 1.0f, 2.0f, 7.5f}) {
    // The input and the GELU value are both f16: within half an f16 step of each.
    const double want = gelu_exact(f16_to_f32(f32_to_f16(x)));
    EXPECT_NEAR(gelu_of(x), want, std::abs(want) * 1e-3 + 1e-6) << x;
    EXPECT_EQ(gelu_of(x), f16_to_f32(f32_to_f16(gelu_of(x)))) << "an f16 value: " << x;
    EXPECT_FLOAT_EQ(gelu_of(x, 3.0f), 3.0f * gelu_of(x)) << x;
  }
  EXPECT_EQ(gelu_of(0.0f), 0.0f);
}

TEST(GeluMul, InputsThatRoundToOneF16GiveOneValue) {
  // 1 + 2^-12 is below half an f16 step (2^-10) above 1: it rounds to 1.
  EXPECT_EQ(gelu_of(1.0f + 1.0f / 4096), gelu_of(1.0f));
  EXPECT_NE(gelu_of(1.0f + 1.0f / 512), gelu_of(1.0f));
}

TEST(GeluMul, TailsBypassTheTable) {
  EXPECT_EQ(gelu_of(-10.0f, 5.0f), 0.0f);
  EXPECT_EQ(gelu_of(-50.0f, 5.0f), 0.0f);
  EXPECT_EQ(gelu_of(10.0f, 0.5f), 5.0f);
  EXPECT_EQ(gelu_of(12.345f, 2.0f), 12.345f * 2.0f);  // not rounded to f16
}

TEST(GeluMul, OutputMayAliasTheGate) {
  float gate[3] = {-1.0f, 0.5f, 11.0f};
  const float up[3] = {2.0f, 2.0f, 2.0f};
  const float want[3] = {gelu_of(-1.0f, 2.0f), gelu_of(0.5f, 2.0f), 22.0f};
  gelu_mul(gate, up, 3, gate);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(gate[i], want[i]);
}

}  // namespace
}  // namespace kvstash::kernels
