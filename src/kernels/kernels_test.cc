// Every kernel on every SIMD path this CPU can run, against plain double-precision references.
#include "kernels/kernels.h"
#include "kernels/matmul_jobs.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "kernels/quantize.h"
#include "kernels/reference_dequant.h"
#include "kernels/simd_dispatch.h"
#include "kernels/test_weights.h"

namespace kvstash::kernels {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(rng);
  return v;
}

// The engine never takes the sgemm path by default (matmul.cc says why); these tests put it at 48
// tokens so that every matmul shape below also runs through sgemm at and above that count.
constexpr int kTestSgemmThreshold = 48;

class KernelsOnPath : public ::testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(set_simd_path_for_testing(GetParam())) << simd_path_name(GetParam());
    ASSERT_STREQ(simd_path(), simd_path_name(GetParam()));
    set_prefill_min_tokens_for_testing(kTestSgemmThreshold);
  }
  void TearDown() override {
    reset_simd_path_for_testing();
    set_prefill_min_tokens_for_testing(0);
  }
};

// Error bound for one output of a q8_0 decode: the activation quantization moves each x by at most
// half its block's step (d / 2), plus float rounding.
double q8_decode_tolerance(const TestWeights& tw, std::int64_t r, const float* x) {
  double bound = 0.0;
  for (std::int64_t b = 0; b < tw.view.cols / 32; ++b) {
    double amax = 0.0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[b * 32 + i])));
    double w_abs = 0.0;
    for (int i = 0; i < 32; ++i) w_abs += std::fabs(tw.dequantized[r * tw.view.cols + b * 32 + i]);
    bound += w_abs * amax / 127.0 * 0.5 * 1.001;
  }
  return bound;
}

// matmul() against the double-precision product with the reference-decoded weights.
void check_matmul_weights(const TestWeights& tw, int n_tokens, ThreadPool& pool) {
  const WeightType type = tw.view.type;
  const std::int64_t rows = tw.view.rows, cols = tw.view.cols;
  SCOPED_TRACE(::testing::Message() << weight_type_name(type) << " " << rows << "x" << cols << " tokens "
                                    << n_tokens << " path " << simd_path());
  const std::vector<float> x = random_floats(static_cast<std::size_t>(n_tokens * cols), 7 + n_tokens);
  std::vector<float> y(static_cast<std::size_t>(n_tokens * rows), -12345.0f);
  matmul(tw.view, x.data(), n_tokens, y.data(), pool);
  // Decode quantizes the activations to 8 bits per 32 (simd_dispatch.h); prefill runs in f32.
  const bool quantized_decode = is_quantized(type) && n_tokens < prefill_min_tokens();
  for (int t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * cols;
    for (std::int64_t r = 0; r < rows; ++r) {
      double exact = 0.0, magnitude = 0.0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(tw.dequantized[r * cols + c]) * xt[c];
        exact += p;
        magnitude += std::fabs(p);
      }
      // f32 accumulation over cols terms: relative 2e-5 of sum |w x| covers cols up to a few
      // thousand with any summation order.
      double tol = 2e-5 * magnitude + 1e-6;
      if (quantized_decode) tol += q8_decode_tolerance(tw, r, xt);
      ASSERT_NEAR(y[t * rows + r], exact, tol) << "row " << r << " token " << t;
    }
  }
}

void check_matmul(WeightType type, std::int64_t rows, std::int64_t cols, int n_tokens, ThreadPool& pool) {
  check_matmul_weights(make_test_weights(type, rows, cols, static_cast<std::uint32_t>(rows * 31 + cols + n_tokens)),
                       n_tokens, pool);
}

// Columns for a test of `type`: `odd` for float types, else that many blocks' worth.
std::int64_t cols_for(WeightType type, std::int64_t float_cols, std::int64_t blocks) {
  return is_quantized(type) ? blocks * weight_block_elems(type) : float_cols;
}

TEST_P(KernelsOnPath, MatmulAllTypesOddShapes) {
  ThreadPool pool(3);
  for (WeightType type : kAllWeightTypes) {
    // 37 rows: not a multiple of the row tiles (8, 4, 2) nor of the 3 threads; 83 columns leave a tail
    // after every vector width (quantized types need whole blocks: 3 blocks, an odd count, so the
    // AVX-512 kernels that take two 32-blocks per register end on a lone one).
    const std::int64_t cols = cols_for(type, 83, 3);
    const int threshold = prefill_min_tokens();
    for (int n_tokens : {1, 2, 3, 5, 8, 17, threshold - 1, threshold, 64}) check_matmul(type, 37, cols, n_tokens, pool);
  }
}

// The AVX-512 q8_0 kernel takes blocks in pairs: a lone block (32 columns), pairs only (64, 128),
// and pairs plus a lone last block (160), at token counts that hit each register tile.
TEST_P(KernelsOnPath, MatmulQ8_0BlockPairsAndLoneBlocks) {
  ThreadPool pool(2);
  for (std::int64_t cols : {32, 64, 128, 160}) {
    for (int n_tokens : {1, 4, 7, 8, 9}) check_matmul(WeightType::kQ8_0, 13, cols, n_tokens, pool);
  }
}

TEST_P(KernelsOnPath, MatmulManyTasksAndPanels) {
  ThreadPool pool(3);
  for (WeightType type : {WeightType::kF16, WeightType::kQ8_0, WeightType::kQ4_K, WeightType::kQ5_0}) {
    check_matmul(type, 1001, 256, 1, pool);  // many decode tasks, a ragged last one
    check_matmul(type, 1001, 256, 6, pool);
  }
  // 300 rows of 4096: the prefill converts more than one panel (256 rows of 16 KiB).
  check_matmul(WeightType::kBF16, 300, 4096, prefill_min_tokens(), pool);
  check_matmul(WeightType::kQ8_0, 300, 4096, prefill_min_tokens(), pool);
  check_matmul(WeightType::kQ6_K, 300, 4096, prefill_min_tokens(), pool);
}

TEST_P(KernelsOnPath, MatmulSingleThreadPool) {
  ThreadPool pool(1);
  check_matmul(WeightType::kQ8_0, 9, 64, 4, pool);
  check_matmul(WeightType::kF32, 9, 20, prefill_min_tokens() + 3, pool);
}

// matmul_many against one matmul() per weight: matrices of ragged sizes (one smaller than a
// task, one of many tasks) and mixed types, on the decode path and (at the threshold) the prefill
// loop. The row kernels compute each row the same way wherever its task starts, so the two agree
// up to the row tile's summation order.
TEST_P(KernelsOnPath, MatmulManyMatchesOneMatmulPerWeight) {
  ThreadPool pool(3);
  const std::int64_t cols = 96;
  const TestWeights a = make_test_weights(WeightType::kQ8_0, 37, cols, 1);
  const TestWeights b = make_test_weights(WeightType::kF16, 5, cols, 2);
  const TestWeights c = make_test_weights(WeightType::kQ8_0, 1001, cols, 3);
  const WeightView ws[] = {a.view, b.view, c.view};
  for (int n_tokens : {1, 3, 8, prefill_min_tokens()}) {
    SCOPED_TRACE(::testing::Message() << "tokens " << n_tokens);
    const std::vector<float> x = random_floats(static_cast<std::size_t>(n_tokens * cols), 40 + n_tokens);
    std::vector<std::vector<float>> many(3), single(3);
    float* ys[3];
    for (int i = 0; i < 3; ++i) {
      many[i].assign(static_cast<std::size_t>(n_tokens * ws[i].rows), -777.0f);
      single[i].assign(many[i].size(), 555.0f);
      ys[i] = many[i].data();
      matmul(ws[i], x.data(), n_tokens, single[i].data(), pool);
    }
    matmul_many(ws, x.data(), n_tokens, ys, pool);
    for (int i = 0; i < 3; ++i) {
      for (std::size_t j = 0; j < many[i].size(); ++j) {
        ASSERT_NEAR(many[i][j], single[i][j], 1e-5 * (std::fabs(single[i][j]) + 1.0)) << "matrix " << i << " at " << j;
      }
    }
  }
  // No weights, or no tokens: nothing to do, nothing written.
  matmul_many({}, nullptr, 1, {}, pool);
  std::vector<float> untouched(37, 3.0f);
  float* y0 = untouched.data();
  matmul_many(std::span<const WeightView>(ws, 1), nullptr, 0, std::span<float* const>(&y0, 1), pool);
  EXPECT_EQ(untouched[0], 3.0f);
}

// matmul_jobs gives every job what matmul() alone gives it, bit for bit: 40 jobs (more than one
// pool run takes) of mixed types and widths, some sharing an input (quantized once for them), some
// with an input of their own, token counts from 1 to past the sgemm threshold (those run alone on
// the sgemm path), and a job with no tokens, which writes nothing.
TEST_P(KernelsOnPath, MatmulJobsGiveEachJobWhatMatmulGivesIt) {
  ThreadPool pool(3);
  const WeightType types[] = {WeightType::kQ4_K, WeightType::kQ8_0, WeightType::kF16, WeightType::kQ6_K, WeightType::kQ5_0};
  std::vector<TestWeights> weights;
  for (int i = 0; i < 5; ++i) {
    const std::int64_t cols = i % 2 == 0 ? 256 : 512;
    weights.push_back(make_test_weights(types[i], 37 + 40 * i, cols, 90 + i));
  }
  const int token_counts[] = {1, 3, 1, 8, prefill_min_tokens(), 2};
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i < 6; ++i) {
    inputs.push_back(random_floats(static_cast<std::size_t>(token_counts[i] * 512), 100 + i));
  }
  std::vector<MatmulJob> jobs;
  std::vector<std::vector<float>> got, expected;
  for (int i = 0; i < 40; ++i) {
    const TestWeights& w = weights[static_cast<std::size_t>(i % 5)];
    const int input = (i * 7) % 6;  // several jobs per input
    const int n_tokens = i == 39 ? 0 : token_counts[input];
    got.emplace_back(static_cast<std::size_t>(std::max(1, n_tokens) * w.view.rows), std::nanf(""));
    expected.emplace_back(got.back().size(), std::nanf(""));
    jobs.push_back({w.view, inputs[static_cast<std::size_t>(input)].data(), n_tokens, got.back().data()});
    if (n_tokens > 0) matmul(w.view, inputs[static_cast<std::size_t>(input)].data(), n_tokens, expected.back().data(), pool);
  }
  matmul_jobs(jobs, pool);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    for (std::size_t j = 0; j < got[i].size(); ++j) {
      if (jobs[i].n_tokens == 0) {
        ASSERT_TRUE(std::isnan(got[i][j])) << "job " << i << " has no tokens but wrote " << j;
        continue;
      }
      ASSERT_FALSE(std::isnan(got[i][j])) << "job " << i << " at " << j << " never computed";
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i][j]), std::bit_cast<std::uint32_t>(expected[i][j]))
          << "job " << i << " (" << weight_type_name(jobs[i].w.type) << ", " << jobs[i].n_tokens << " tokens) at " << j;
    }
  }
  matmul_jobs({}, pool);  // nothing to do
}

// The decode split (per-thread ranges of small chunks, idle threads stealing half of the fullest
// range) computes every row exactly once, and a row's result does not depend on which thread took
// it: 6 matrices (more than one pool run takes) of mixed types and hundreds of chunks each, on a
// pool of 4 threads (more than this machine's cores, so threads get descheduled mid-call and the
// others steal), repeated, equal bit for bit to a one-thread pool. Outputs start as NaN, so a row
// never computed fails too.
TEST_P(KernelsOnPath, DecodeSplitIsExactWhateverThreadTakesARow) {
  ThreadPool one(1), four(4);
  const std::int64_t cols = 1024;  // 2 KiB f16 rows: 16 rows per 32 KiB chunk
  const std::vector<TestWeights> weights = [&] {
    std::vector<TestWeights> v;
    const WeightType types[] = {WeightType::kF16, WeightType::kQ8_0, WeightType::kQ4_K,
                                WeightType::kF16, WeightType::kQ6_K, WeightType::kQ5_0};
    const std::int64_t rows[] = {1001, 37, 2050, 5, 3000, 999};
    for (int i = 0; i < 6; ++i) v.push_back(make_test_weights(types[i], rows[i], cols, 60 + i));
    return v;
  }();
  std::vector<WeightView> ws;
  for (const TestWeights& w : weights) ws.push_back(w.view);
  for (int n_tokens : {1, 3}) {
    const std::vector<float> x = random_floats(static_cast<std::size_t>(n_tokens * cols), 70 + n_tokens);
    auto run = [&](ThreadPool& pool) {
      std::vector<std::vector<float>> out(ws.size());
      std::vector<float*> ys;
      for (std::size_t i = 0; i < ws.size(); ++i) {
        out[i].assign(static_cast<std::size_t>(n_tokens * ws[i].rows), std::nanf(""));
        ys.push_back(out[i].data());
      }
      matmul_many(ws, x.data(), n_tokens, ys, pool);
      return out;
    };
    const auto expected = run(one);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      for (float v : expected[i]) ASSERT_FALSE(std::isnan(v)) << "matrix " << i << " has a row never computed";
    }
    for (int rep = 0; rep < 20; ++rep) {
      const auto got = run(four);
      for (std::size_t i = 0; i < got.size(); ++i) {
        for (std::size_t j = 0; j < got[i].size(); ++j) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i][j]), std::bit_cast<std::uint32_t>(expected[i][j]))
              << "tokens " << n_tokens << " rep " << rep << " matrix " << i << " at " << j;
        }
      }
    }
  }
}

// Batch invariance of the float row kernels: a token's outputs are the same bits whether it is
// multiplied alone (8-row tiles, conversion in registers) or in a batch (3-row x 8-token tiles;
// from 16 tokens on, f16 and bf16 rows converted to f32 once per chunk of rows, and the tokens in
// blocks). 37 rows leave a remainder after the 3-row tiles, 83 columns a tail after each vector
// width; 4096 columns make the token blocks shorter than the batch (16 tokens of 16 KiB).
TEST_P(KernelsOnPath, FloatWeightsGiveATokenTheSameBitsAloneAndInAnyBatch) {
  ThreadPool pool(2);
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{37, 83}, {19, 4096}};
  for (const auto& [rows, cols] : shapes) {
    for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16}) {
      const TestWeights tw = make_test_weights(type, rows, cols, 90);
      for (int n_tokens : {5, 8, 15, 16, 21, kTestSgemmThreshold - 1}) {
        SCOPED_TRACE(::testing::Message() << weight_type_name(type) << " " << rows << "x" << cols << " tokens " << n_tokens
                                          << " path " << simd_path());
        const std::vector<float> x = random_floats(static_cast<std::size_t>(n_tokens * cols), 91 + n_tokens);
        std::vector<float> batch(static_cast<std::size_t>(n_tokens * rows), std::nanf(""));
        matmul(tw.view, x.data(), n_tokens, batch.data(), pool);
        for (int t = 0; t < n_tokens; ++t) {
          std::vector<float> alone(static_cast<std::size_t>(rows), std::nanf(""));
          matmul(tw.view, x.data() + t * cols, 1, alone.data(), pool);
          for (std::int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(batch[t * rows + r]), std::bit_cast<std::uint32_t>(alone[r]))
                << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

// Float types and q8_0 decode exactly (one rounding at most, the same everywhere). The slice-form
// types compute scale * u - min in f32: within 2 float roundings of the operands' size
// (|scale u| + |min|) of the double-precision reference.
TEST_P(KernelsOnPath, DequantizeRowsMatchesReference) {
  for (WeightType type : kAllWeightTypes) {
    const std::int64_t cols = cols_for(type, 45, 5);
    const TestWeights tw = make_test_weights(type, 13, cols, 99);
    std::vector<float> out(8 * cols, -1.0f);
    dequantize_rows(tw.view, 3, 11, out.data());
    if (!is_quantized(type) || type == WeightType::kQ8_0) {
      for (std::int64_t i = 0; i < 8 * cols; ++i) {
        ASSERT_EQ(out[i], tw.dequantized[3 * cols + i]) << weight_type_name(type) << " element " << i;
      }
      continue;
    }
    std::vector<double> ref(static_cast<std::size_t>(cols));
    for (std::int64_t r = 3; r < 11; ++r) {
      reference_dequantize_row(type, tw.bytes.data() + r * tw.view.row_bytes, cols, ref.data());
      double row_max = 0.0;
      for (double v : ref) row_max = std::max(row_max, std::fabs(v));
      for (std::int64_t c = 0; c < cols; ++c) {
        // |scale u| and |min| are at most about 2x the row's largest weight for these formats.
        ASSERT_NEAR(out[(r - 3) * cols + c], ref[c], 4 * 6e-8 * (row_max + std::fabs(ref[c])) + 1e-30)
            << weight_type_name(type) << " row " << r << " col " << c;
      }
    }
  }
}

// Blocks at the edges of the formats: all-zero blocks, the largest f16 scales, subnormal scales;
// 4 blocks of rows not a multiple of any row tile, at decode and prefill token counts.
TEST_P(KernelsOnPath, QuantizedEdgeBlocks) {
  ThreadPool pool(2);
  for (WeightType type : kAllWeightTypes) {
    if (!is_quantized(type)) continue;
    TestWeights tw = make_test_weights(type, 7, 4 * weight_block_elems(type), 5);
    const std::size_t block = weight_block_bytes(type);
    const std::size_t blocks = tw.bytes.size() / block;
    for (std::size_t b = 0; b < blocks; ++b) {
      std::uint8_t* p = tw.bytes.data() + b * block;
      switch (b % 4) {
        case 0: std::memset(p, 0, block); break;  // an all-zero block
        case 1:                                   // the largest finite half as every scale
          for (int f : half_fields(type)) { const std::uint16_t h = 0x7bff; std::memcpy(p + f, &h, 2); }
          break;
        case 2:                                   // the smallest subnormal half
          for (int f : half_fields(type)) { const std::uint16_t h = 0x0001; std::memcpy(p + f, &h, 2); }
          break;
        default: break;
      }
    }
    refresh_dequantized(tw);
    for (int n_tokens : {1, 3, 9, prefill_min_tokens()}) check_matmul_weights(tw, n_tokens, pool);
  }
}

// The encoders (quantize.h) round-trip through the reference decoder within half a step of each
// group's scale, and zeros stay zeros.
TEST(Quantize, EncodersRoundTripThroughTheReference) {
  for (WeightType type : kAllWeightTypes) {
    if (!is_quantized(type)) continue;
    const std::int64_t n = 4 * 256;
    std::vector<float> x = random_floats(static_cast<std::size_t>(n), 3, -2.0f, 2.0f);
    for (int i = 256; i < 512; ++i) x[static_cast<std::size_t>(i)] = 0.0f;
    std::vector<std::uint8_t> bytes(row_bytes_for(type, n));
    quantize_row(type, x.data(), n, bytes.data());
    std::vector<double> back(static_cast<std::size_t>(n));
    reference_dequantize_row(type, bytes.data(), n, back.data());
    // Worst step per type over a range of 4: 2-bit codes with 4-bit scales (q2_K) are coarsest.
    double worst = 0.0, sum_sq = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double err = std::fabs(back[i] - x[i]);
      worst = std::max(worst, err);
      sum_sq += err * err;
      if (i >= 256 && i < 512) {
        ASSERT_EQ(back[i], 0.0) << weight_type_name(type) << " at " << i;
      }
    }
    // MXFP4's E2M1 codes: 8 magnitudes, its coarsest gap (between 4 and 6 of 6) like a uniform 3-bit step.
    const int bits = type == WeightType::kQ2_K ? 2 : type == WeightType::kQ3_K || type == WeightType::kMxfp4 ? 3
                   : (type == WeightType::kQ4_0 || type == WeightType::kQ4_1 || type == WeightType::kQ4_K) ? 4
                   : (type == WeightType::kQ8_0) ? 8 : type == WeightType::kQ6_K ? 6 : 5;
    const double step = 4.0 / ((1 << bits) - 1);
    EXPECT_LT(worst, 1.5 * step) << weight_type_name(type);
    EXPECT_LT(std::sqrt(sum_sq / (n - 256)), 0.5 * step) << weight_type_name(type);
  }
}

TEST_P(KernelsOnPath, Q8_0DequantizeAgreesWithQuantizeModule) {
  // Round trip through quantize.h's encoder, decoded by quantize.h and by this path.
  const std::vector<float> x = random_floats(64 * 5, 17, -4.0f, 4.0f);
  std::vector<std::uint8_t> blocks(5 * 2 * kQ8_0BlockBytes);
  quantize_q8_0(x.data(), static_cast<std::int64_t>(x.size()), blocks.data());
  const WeightView w{WeightType::kQ8_0, blocks.data(), 5, 64, row_bytes_for(WeightType::kQ8_0, 64)};
  std::vector<float> ours(x.size()), theirs(x.size());
  dequantize_rows(w, 0, 5, ours.data());
  dequantize_row_q8_0(blocks.data(), static_cast<std::int64_t>(x.size()), theirs.data());
  EXPECT_EQ(ours, theirs);
}

TEST_P(KernelsOnPath, ActivationQuantizerMatchesScalarBitForBit) {
  for (int block : {32, 256}) {  // per Q8_0 block, and per K super-block (the K types' activations)
    SCOPED_TRACE(block);
    const int n_blocks = 9;
    std::vector<float> x = random_floats(static_cast<std::size_t>(block * n_blocks), 5, -3.0f, 3.0f);
    for (int i = 2 * block; i < 3 * block; ++i) x[static_cast<std::size_t>(i)] = 0.0f;  // an all-zero block: scale 0, values 0
    x[static_cast<std::size_t>(3 * block + 4)] = 1e-30f;
    x[static_cast<std::size_t>(4 * block + 7)] = 40.0f;  // one large value: its block's others round coarsely
    std::vector<float> s_ref(n_blocks), s(n_blocks);
    std::vector<std::int8_t> q_ref(x.size()), q(x.size());
    scalar_kernel_table().quantize_activations(x.data(), static_cast<std::int64_t>(x.size()), block, s_ref.data(), q_ref.data());
    active_kernels().quantize_activations(x.data(), static_cast<std::int64_t>(x.size()), block, s.data(), q.data());
    EXPECT_EQ(0, std::memcmp(s.data(), s_ref.data(), s.size() * 4));
    EXPECT_EQ(q, q_ref);
    EXPECT_EQ(s[2], 0.0f);
    EXPECT_EQ(q[static_cast<std::size_t>(4 * block + 7)], 127);
    for (int b = 0; b < n_blocks; ++b) {
      for (int i = 0; i < block; ++i) {
        const std::size_t at = static_cast<std::size_t>(b * block + i);
        ASSERT_LE(std::fabs(x[at] - s[b] * q[at]), s[b] * 0.5f * 1.0001f + 1e-30f);
      }
    }
  }
}

TEST_P(KernelsOnPath, BothMatmulPathsAtTheSameTokenCount) {
  // The threshold moved, so every n runs through both the row kernels and sgemm.
  ThreadPool pool(2);
  for (int threshold : {1, 1 << 30}) {
    set_prefill_min_tokens_for_testing(threshold);
    check_matmul(WeightType::kF16, 21, 70, 12, pool);
    check_matmul(WeightType::kQ8_0, 21, 64, 12, pool);
  }
  set_prefill_min_tokens_for_testing(0);
  EXPECT_EQ(prefill_min_tokens(), std::numeric_limits<int>::max());  // the default: never sgemm
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(AllPaths, KernelsOnPath,
                         ::testing::ValuesIn(supported_simd_paths()),
                         [](const auto& info) { return std::string(simd_path_name(info.param)); });

}  // namespace kvstash::kernels
