// MXFP4 against values worked out by hand from the OCP Microscaling spec (E8M0 scale, E2M1 codes).
#include "kernels/mxfp4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/reference_dequant.h"
#include "kernels/simd_dispatch.h"
#include "kernels/test_weights.h"

namespace kvstash::kernels {
namespace {

TEST(Mxfp4, HalfScaleIsTwoToTheEMinus128IncludingDenormals) {
  EXPECT_EQ(mxfp4_half_scale(128), 1.0f);
  EXPECT_EQ(mxfp4_half_scale(127), 0.5f);
  EXPECT_EQ(mxfp4_half_scale(130), 4.0f);
  EXPECT_EQ(mxfp4_half_scale(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(mxfp4_half_scale(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(mxfp4_half_scale(254), std::ldexp(1.0f, 126));
}

TEST(Mxfp4, DecodesLowNibblesFirstThenHighNibbles) {
  // Scale 2^(127 - 127) = 1; byte j holds value j (low) and value j + 16 (high).
  std::uint8_t block[kMxfp4BlockBytes] = {127};
  for (int j = 0; j < 16; ++j) block[1 + j] = static_cast<std::uint8_t>(j | (15 - j) << 4);
  const WeightView w{WeightType::kMxfp4, block, 1, 32, kMxfp4BlockBytes};
  std::vector<float> out(32);
  mxfp4_dequantize_rows(w, 0, 1, out.data());
  // E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negated (code 8 is -0).
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<double> ref(32);
  reference_dequantize_row(WeightType::kMxfp4, block, 32, ref.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[static_cast<std::size_t>(j)], e2m1[j]) << j;
    EXPECT_EQ(out[static_cast<std::size_t>(j + 16)], e2m1[15 - j]) << j;
    EXPECT_EQ(ref[static_cast<std::size_t>(j)], e2m1[j]) << j;
    EXPECT_EQ(ref[static_cast<std::size_t>(j + 16)], e2m1[15 - j]) << j;
  }
}

TEST(Mxfp4, QuantizerPicksTheExponentOfTheLargestAndTheNearestCodes) {
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;    // amax 6: e = floor(log2 6) - 2 + 127 = 127, scale 1: exactly code 7
  x[1] = -1.4f;   // nearest -1.5
  x[17] = 2.4f;   // nearest 2 (3 is farther)
  x[20] = 0.2f;   // nearest 0
  std::uint8_t block[kMxfp4BlockBytes];
  quantize_mxfp4(x.data(), 32, block);
  EXPECT_EQ(block[0], 127);
  std::vector<float> back(32);
  mxfp4_dequantize_rows({WeightType::kMxfp4, block, 1, 32, kMxfp4BlockBytes}, 0, 1, back.data());
  EXPECT_EQ(back[0], 6.0f);
  EXPECT_EQ(back[1], -1.5f);
  EXPECT_EQ(back[17], 2.0f);
  EXPECT_EQ(back[20], 0.0f);
  std::vector<float> zeros(32, 0.0f);
  quantize_mxfp4(zeros.data(), 32, block);
  EXPECT_EQ(block[0], 0);
}

// Every SIMD path this CPU has gives the scalar kernel's bits for an MXFP4 decode (the AVX2 kernel
// from the AVX2 path up), for token counts across its 8-token tiles, and the scalar kernel is the
// exact integer block sum times the two scales.
TEST(Mxfp4, DecodeMatmulHasTheScalarBitsOnEveryPath) {
  ThreadPool pool(2);
  const std::int64_t rows = 37, cols = 2880;  // gpt-oss-20b's rows: 90 blocks
  const TestWeights tw = make_test_weights(WeightType::kMxfp4, rows, cols, 91);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int n_tokens : {1, 3, 8, 9, 17}) {
    std::vector<float> x(static_cast<std::size_t>(n_tokens * cols));
    for (float& v : x) v = dist(rng);
    ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kScalar));
    std::vector<float> scalar(static_cast<std::size_t>(n_tokens * rows));
    matmul(tw.view, x.data(), n_tokens, scalar.data(), pool);
    // The scalar result against the block sums worked out here from the activations' quantization.
    std::vector<float> xs(static_cast<std::size_t>(n_tokens * cols / 32));
    std::vector<std::int8_t> xv(x.size());
    scalar_kernel_table().quantize_activations(x.data(), static_cast<std::int64_t>(x.size()), 32, xs.data(), xv.data());
    for (int t = 0; t < n_tokens; ++t) {
      for (std::int64_t r = 0; r < rows; ++r) {
        double want = 0;
        for (std::int64_t b = 0; b < cols / 32; ++b) {
          const std::uint8_t* block = tw.bytes.data() + r * tw.view.row_bytes + b * kMxfp4BlockBytes;
          std::int64_t isum = 0;
          for (int j = 0; j < 32; ++j) {
            const int code = j < 16 ? block[1 + j] & 15 : block[1 + j - 16] >> 4;
            isum += kMxfp4Values[code] * xv[static_cast<std::size_t>(t * cols + b * 32 + j)];
          }
          want += static_cast<double>(xs[static_cast<std::size_t>(t * cols / 32 + b)]) * mxfp4_half_scale(block[0]) *
                  static_cast<double>(isum);
        }
        ASSERT_NEAR(scalar[static_cast<std::size_t>(t * rows + r)], want, 1e-5 * (std::fabs(want) + 1)) << r << " " << t;
      }
    }
    for (SimdPath path : supported_simd_paths()) {
      ASSERT_TRUE(set_simd_path_for_testing(path));
      std::vector<float> got(scalar.size(), std::nanf(""));
      matmul(tw.view, x.data(), n_tokens, got.data(), pool);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(scalar[i]))
            << simd_path_name(path) << " tokens " << n_tokens << " at " << i;
      }
    }
  }
  reset_simd_path_for_testing();
}

TEST(Mxfp4, Is17BytesPer32Values) {
  EXPECT_STREQ(weight_type_name(WeightType::kMxfp4), "mxfp4");
  EXPECT_EQ(weight_block_elems(WeightType::kMxfp4), 32);
  EXPECT_EQ(row_bytes_for(WeightType::kMxfp4, 2880), 90u * 17u);
}

}  // namespace
}  // namespace kvstash::kernels
