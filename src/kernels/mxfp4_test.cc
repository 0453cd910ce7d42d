// MXFP4 against values worked out by hand from the OCP Microscaling spec (E8M0 scale, E2M1 codes).
#include "kernels/mxfp4.h"

#include <gtest/gtest.h>

#include <algorithm>
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

std::vector<float> random_activations(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> run_on(SimdPath path, const WeightView& w, const std::vector<float>& x, int n_tokens, ThreadPool& pool) {
  EXPECT_TRUE(set_simd_path_for_testing(path));
  std::vector<float> y(static_cast<std::size_t>(n_tokens * w.rows), std::nanf(""));
  matmul(w, x.data(), n_tokens, y.data(), pool);
  return y;
}

// The scalar kernel is the exact integer block sum times the two scales, and every SIMD path this
// CPU has (the GGUF layout; the AVX-512 path's interleaved copy is interleaved16_test's) gives the
// same products summed in another order: within float reassociation of it (kernels.h). The AVX2
// and AVX-512 kernels sum in the same order with exact integer block sums, so they agree bit for
// bit (mxfp4_tiles.h). Token counts across the 4-token tiles, 37 rows across the 4-, 2- and 1-row tiles.
TEST(Mxfp4, EveryPathIsTheExactBlockSumsUpToReassociation) {
  ThreadPool pool(2);
  const std::int64_t rows = 37, cols = 2880;  // gpt-oss-20b's rows: 90 blocks
  const TestWeights tw = make_test_weights(WeightType::kMxfp4, rows, cols, 91);
  for (int n_tokens : {1, 3, 8, 9, 17}) {
    const std::vector<float> x = random_activations(static_cast<std::size_t>(n_tokens * cols), 5 + n_tokens);
    const std::vector<float> scalar = run_on(SimdPath::kScalar, tw.view, x, n_tokens, pool);
    std::vector<float> xs(static_cast<std::size_t>(n_tokens * cols / 32));
    std::vector<std::int8_t> xv(x.size());
    scalar_kernel_table().quantize_activations(x.data(), static_cast<std::int64_t>(x.size()), 32, xs.data(), xv.data());
    std::vector<double> want(scalar.size()), magnitude(scalar.size());
    for (int t = 0; t < n_tokens; ++t) {
      for (std::int64_t r = 0; r < rows; ++r) {
        double sum = 0, mag = 0;
        for (std::int64_t b = 0; b < cols / 32; ++b) {
          const std::uint8_t* block = tw.bytes.data() + r * tw.view.row_bytes + b * kMxfp4BlockBytes;
          std::int64_t isum = 0;
          for (int j = 0; j < 32; ++j) {
            const int code = j < 16 ? block[1 + j] & 15 : block[1 + j - 16] >> 4;
            isum += kMxfp4Values[code] * xv[static_cast<std::size_t>(t * cols + b * 32 + j)];
          }
          const double term = static_cast<double>(xs[static_cast<std::size_t>(t * cols / 32 + b)]) *
                              mxfp4_half_scale(block[0]) * static_cast<double>(isum);
          sum += term;
          mag += std::fabs(term);
        }
        want[static_cast<std::size_t>(t * rows + r)] = sum;
        magnitude[static_cast<std::size_t>(t * rows + r)] = mag;
      }
    }
    std::vector<float> avx2;
    for (SimdPath path : supported_simd_paths()) {
      const std::vector<float> got = path == SimdPath::kScalar ? scalar : run_on(path, tw.view, x, n_tokens, pool);
      for (std::size_t i = 0; i < got.size(); ++i) {
        // 90 float additions (and the 8 lanes' sum): well within 1e-5 of the terms' magnitude.
        ASSERT_NEAR(got[i], want[i], 1e-5 * magnitude[i] + 1e-30) << simd_path_name(path) << " tokens " << n_tokens << " at " << i;
      }
      if (path == SimdPath::kAvx2) avx2 = got;
      if (path == SimdPath::kAvx512) {
        ASSERT_FALSE(avx2.empty());
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(avx2[i])) << "avx512 vs avx2 at " << i;
        }
      }
    }
  }
  reset_simd_path_for_testing();
}

// Batch invariance (the engine's promise: a prompt prefilled in one step, in chunks, after a cache
// hit or beside other requests gives the same tokens): on every path a token's outputs are the same
// bits whether it is multiplied alone or with others, whichever rows share its tile, and whichever
// thread takes its rows (one thread, or three beside another matrix in one matmul_many split).
TEST(Mxfp4, ATokenGetsTheSameBitsAloneAndInAnyBatchOnEveryPath) {
  ThreadPool one(1), three(3);
  const std::int64_t cols = 2880;
  const TestWeights tw = make_test_weights(WeightType::kMxfp4, 83, cols, 17);  // 83: a 4-row tile remainder of 3
  const TestWeights other = make_test_weights(WeightType::kQ8_0, 40, cols, 18);
  for (SimdPath path : supported_simd_paths()) {
    SCOPED_TRACE(simd_path_name(path));
    for (int n_tokens : {2, 4, 5, 11}) {
      const std::vector<float> x = random_activations(static_cast<std::size_t>(n_tokens * cols), 30 + n_tokens);
      const std::vector<float> batch = run_on(path, tw.view, x, n_tokens, one);
      std::vector<float> split(batch.size(), std::nanf("")), unused(static_cast<std::size_t>(n_tokens * other.view.rows));
      const WeightView ws[] = {other.view, tw.view};
      float* ys[] = {unused.data(), split.data()};
      matmul_many(ws, x.data(), n_tokens, ys, three);
      for (std::size_t i = 0; i < batch.size(); ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(split[i]), std::bit_cast<std::uint32_t>(batch[i])) << "three threads, at " << i;
      }
      for (int t = 0; t < n_tokens; ++t) {
        const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        const std::vector<float> alone = run_on(path, tw.view, xt, 1, three);
        for (std::int64_t r = 0; r < tw.view.rows; ++r) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(batch[static_cast<std::size_t>(t * tw.view.rows + r)]),
                    std::bit_cast<std::uint32_t>(alone[static_cast<std::size_t>(r)]))
              << "tokens " << n_tokens << " token " << t << " row " << r;
        }
      }
    }
  }
  reset_simd_path_for_testing();
}

// The half scales the SIMD kernels take from a table (mxfp4_tiles.h) or compute in vector integer
// code (the interleaved AVX-512 tile) are mxfp4_half_scale's for every E8M0 byte, denormals
// included (255, NaN in the OCP spec, is 2^127 as in llama.cpp). Row e has scale byte e and nonzero
// codes (every value 1, doubled 2) in block e only; block b's activations are all
// 2^(122 - b) (within 2^±100: normal floats, quantized exactly to 127), so every output is a normal
// float within a rounding or two of 64 x 2^(e - 128) x 127 d_x. On every path, and on the AVX-512
// path's interleaved copy too.
TEST(Mxfp4, EveryScaleByteDecodesAsTheHalfScaleOnEveryPath) {
  ThreadPool pool(2);
  const std::int64_t rows = 256, blocks = 256, cols = blocks * 32;
  const std::size_t row_bytes = static_cast<std::size_t>(blocks * kMxfp4BlockBytes);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows) * row_bytes, 0);
  for (std::int64_t e = 0; e < rows; ++e) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::uint8_t* block = bytes.data() + static_cast<std::size_t>(e) * row_bytes + static_cast<std::size_t>(b) * kMxfp4BlockBytes;
      // The other blocks: codes 0 and scale byte 127, so no product overflows (0 x inf would be NaN).
      block[0] = b == e ? static_cast<std::uint8_t>(e) : std::uint8_t{127};
      if (b == e) std::fill(block + 1, block + kMxfp4BlockBytes, std::uint8_t{0x22});
    }
  }
  const WeightView w{WeightType::kMxfp4, bytes.data(), rows, cols, row_bytes};
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (std::int64_t c = 0; c < cols; ++c) x[static_cast<std::size_t>(c)] = std::ldexp(1.0f, std::clamp(122 - static_cast<int>(c / 32), -100, 100));
  auto check = [&](const WeightView& view, const char* what) {
    for (SimdPath path : supported_simd_paths()) {
      const std::vector<float> y = run_on(path, view, x, 1, pool);
      for (std::int64_t e = 0; e < rows; ++e) {
        const double dx = static_cast<double>(x[static_cast<std::size_t>(e * 32)] / 127.0f);
        const double want = 64.0 * 127.0 * dx * mxfp4_half_scale(static_cast<std::uint8_t>(e));
        ASSERT_NEAR(y[static_cast<std::size_t>(e)], want, 1e-6 * want) << what << " " << simd_path_name(path) << " e " << e;
      }
    }
  };
  check(w, "gguf layout");
  if (set_simd_path_for_testing(SimdPath::kAvx512)) {
    std::vector<std::uint8_t> storage(repack_bytes(w) + 64);
    ASSERT_GT(storage.size(), 64u);
    auto* at = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
    const WeightView repacked = repack_for_decode(w, at);
    ASSERT_EQ(repacked.type, WeightType::kMxfp4x16);
    check(repacked, "interleaved");
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
