// Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16 and MXFP4 interleaved by 16 rows (interleaved16.h): what
// repack_for_decode makes, on which path and shapes, and that every path reads it exactly:
// dequantize gives the values of the original on the AVX-512 path bit for bit, and matmul gives the
// scalar statement's results bit for bit at every token count (so a token's result never depends
// on its batch), close to the GGUF-layout kernel's (the K types, whose activations are quantized
// per 256: within that quantization's bound of the exact product; F16: the same products in
// another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "kernels/kernels.h"
#include "kernels/simd_dispatch.h"
#include "kernels/test_weights.h"

namespace kvstash::kernels {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(rng);
  return v;
}

// A repacked copy on a cache line, as a loaded model's.
struct Repacked {
  std::vector<std::uint8_t> storage;
  WeightView view;
};

Repacked repack(const WeightView& w) {
  Repacked r;
  r.storage.resize(repack_bytes(w) + 64);
  auto* at = r.storage.data() + (64 - reinterpret_cast<std::uintptr_t>(r.storage.data()) % 64) % 64;
  r.view = repack_for_decode(w, at);
  return r;
}

class Interleaved16 : public ::testing::TestWithParam<WeightType> {
 protected:
  void SetUp() override {
    // The layout is made only on the AVX-512 path: the suite is instantiated only on a CPU that has it.
    ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kAvx512));
  }
  void TearDown() override { reset_simd_path_for_testing(); }

  std::vector<float> run(const WeightView& w, const std::vector<float>& x, int n_tokens, ThreadPool& pool) {
    std::vector<float> y(static_cast<std::size_t>(n_tokens * w.rows), std::nanf(""));
    matmul(w, x.data(), n_tokens, y.data(), pool);
    return y;
  }
};

void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
  }
}

bool k_type(WeightType type) {
  return type == WeightType::kQ2_K || type == WeightType::kQ3_K || type == WeightType::kQ4_K || type == WeightType::kQ5_K ||
         type == WeightType::kQ6_K;
}
bool f16(WeightType type) { return type == WeightType::kF16; }
bool mxfp4(WeightType type) { return type == WeightType::kMxfp4; }

TEST_P(Interleaved16, MadeOnlyFromItsTypeOfWholeGroupsOnTheSimdPathsThatReadIt) {
  const WeightType type = GetParam();
  const std::int64_t cols = k_type(type) ? 512 : 128;
  const TestWeights w = make_test_weights(type, 32, cols, 1);
  const std::size_t want_bytes = type == WeightType::kQ4_K   ? w.bytes.size() / 144 * 148
                                 : type == WeightType::kQ5_K ? w.bytes.size() / 176 * 180
                                 : type == WeightType::kQ3_K ? w.bytes.size() / 110 * 116
                                 : type == WeightType::kQ6_K ? w.bytes.size() / 210 * 212
                                                             : w.bytes.size();
  EXPECT_EQ(repack_bytes(w.view), want_bytes);
  const WeightType made = type == WeightType::kQ4_K   ? WeightType::kQ4_Kx16
                          : type == WeightType::kQ5_K ? WeightType::kQ5_Kx16
                          : type == WeightType::kQ3_K ? WeightType::kQ3_Kx16
                          : type == WeightType::kQ2_K ? WeightType::kQ2_Kx16
                          : type == WeightType::kQ6_K ? WeightType::kQ6_Kx16
                          : type == WeightType::kQ4_0 ? WeightType::kQ4_0x16
                          : type == WeightType::kQ5_0 ? WeightType::kQ5_0x16
                          : type == WeightType::kQ4_1 ? WeightType::kQ4_1x16
                          : type == WeightType::kQ5_1 ? WeightType::kQ5_1x16
                          : type == WeightType::kF16  ? WeightType::kF16x16
                          : mxfp4(type)               ? WeightType::kMxfp4x16
                                                      : WeightType::kQ8_0x16;
  EXPECT_EQ(repack(w.view).view.type, made);
  EXPECT_EQ(interleaved_source(made), type);
  EXPECT_EQ(interleaved_source(type), type);
  EXPECT_EQ(repack(w.view).view.row_bytes, w.view.row_bytes);
  EXPECT_EQ(repack_bytes(make_test_weights(type, 24, cols, 2).view), 0u) << "rows not a multiple of 16";
  if (f16(type)) {
    EXPECT_EQ(repack_bytes(make_test_weights(type, 32, 37, 3).view), w.bytes.size() / 128 * 37) << "any cols";
  } else if (mxfp4(type)) {
    // Any whole blocks: 3 blocks are one partial unit of 64 bytes of scales and 3 x 256 of codes per group.
    EXPECT_EQ(repack_bytes(make_test_weights(type, 32, 96, 3).view), 2u * (64 + 3 * 256)) << "an odd number of blocks";
  } else if (!k_type(type)) {
    EXPECT_EQ(repack_bytes(make_test_weights(type, 32, 96, 3).view), 0u) << "an odd number of blocks";
  }
  EXPECT_EQ(repack_bytes(make_test_weights(WeightType::kBF16, 32, 512, 4).view), 0u);
  EXPECT_EQ(repack_bytes(make_test_weights(WeightType::kF32, 32, 512, 4).view), 0u);
  // The AVX2 kernels multiply the 4- and 5-bit layouts without VNNI (interleaved_avx2.cc); the
  // others keep their GGUF layout there.
  ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kAvx2));
  const bool avx2_reads = type == WeightType::kQ8_0 || type == WeightType::kQ4_0 || type == WeightType::kQ5_0 || type == WeightType::kQ4_1 ||
                          type == WeightType::kQ5_1 || type == WeightType::kQ4_K;
  EXPECT_EQ(repack_bytes(w.view), avx2_reads ? want_bytes : 0u);
  if (avx2_reads) {
    EXPECT_EQ(repack(w.view).view.type, made);
  }
  ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kScalar));
  EXPECT_EQ(repack_bytes(w.view), 0u) << "the scalar path reads the GGUF layouts";
}

// The extremes of each layout's stored bytes, in the first block of the first row: Q8_0's -128
// (a byte the quantizer never writes, but a file may hold) and 127; Q4_K's scale and min 63, codes
// 0 and 15; Q5_K's the same with codes 31 and 0 beside them; Q3_K's scales -32 and 31, codes 7 and 0;
// Q2_K's scale and min 15 and 0, codes 3 and 0; Q6_K's scales -128 and 127, codes 0 and 63; F16's largest finite value, a subnormal
// and -0; MXFP4's two denormal half scales and a large one, codes of 6, -6, 0 and -0.
void put_extremes(TestWeights& w) {
  if (w.view.type == WeightType::kF16) {
    for (auto [at, bits] : {std::pair<int, std::uint16_t>{0, 0x7bff}, {1, 0x0001}, {2, 0x8000}, {3, 0xfbff}}) {
      std::memcpy(w.bytes.data() + 2 * at, &bits, 2);
    }
  } else if (w.view.type == WeightType::kQ8_0) {
    w.bytes[2] = 0x80;
    w.bytes[3] = 0x7f;
  } else if (w.view.type == WeightType::kMxfp4) {
    w.bytes[0] = 1;     // block 0: scale 2^-127 (a denormal half scale) ...
    w.bytes[1] = 0xf7;  // ... weight 0: code 7 (6, doubled 12); weight 16: code 15 (-6)
    w.bytes[17] = 0;    // block 1: 2^-128
    w.bytes[34] = 140;  // block 2 (row 1's block 0 at 64 columns): 2^12
    w.bytes[35] = 0x80; // weight 0: code 0; weight 16: code 8 (-0)
  } else if (w.view.type == WeightType::kQ4_0) {
    w.bytes[2] = 0xf0;  // weight 0: code 0; weight 16: code 15
  } else if (w.view.type == WeightType::kQ4_1) {
    w.bytes[4] = 0xf0;  // weight 0: code 0; weight 16: code 15
  } else if (w.view.type == WeightType::kQ5_1) {
    w.bytes[4] = 0x01;  // qh: weight 0 has its fifth bit, weight 31 has not
    w.bytes[7] = 0x00;
    w.bytes[8] = 0x0f;  // weight 0: code 15 | 16 = 31; weight 16: code 0
  } else if (w.view.type == WeightType::kQ5_0) {
    w.bytes[2] = 0x01;  // qh: weight 0 has its fifth bit, weight 31 (bit 31) has not
    w.bytes[5] = 0x00;
    w.bytes[6] = 0x0f;  // weight 0: code 15 | 16 = 31; weight 16: code 0
  } else if (w.view.type == WeightType::kQ2_K) {
    w.bytes[0] = 0xff;   // group 0: scale 15, min 15
    w.bytes[1] = 0x00;   // group 1: scale 0, min 0
    w.bytes[16] = 0xff;  // qs byte 0: weight 0 of slices 0-3: code 3
    w.bytes[17] = 0x00;  // weight 1: code 0
  } else if (w.view.type == WeightType::kQ3_K) {
    w.bytes[96] = 0x00;   // scale of group 0: low bits 0 ...
    w.bytes[104] = 0x00;  // ... top bits 0 (bits 0-1 of byte 8): stored 0, signed -32
    w.bytes[97] = 0x0f;   // group 1: low bits 15 ...
    w.bytes[105] = 0x03;  // ... top bits 3 (bits 0-1 of byte 9): stored 63, signed 31
    w.bytes[0] = 0xff;    // hmask byte 0: weight 0 of every slice has its high bit ...
    w.bytes[32] = 0xff;   // ... over low bits 3: codes 7 in slices 0-3
    w.bytes[1] = 0x00;    // weight 1: no high bit ...
    w.bytes[33] = 0x00;   // ... low bits 0: codes 0 in slices 0-3
  } else if (w.view.type == WeightType::kQ6_K) {
    w.bytes[192] = 0x80;  // group 0's scale -128
    w.bytes[193] = 0x7f;  // group 1's 127
    w.bytes[0] = 0x00;    // ql byte 0: slices 0 and 2, weight 0: low bits 0
    w.bytes[128] = 0x0c;  // qh byte 0: slice 0's top bits 0, slice 1's 3
    w.bytes[32] = 0xff;   // ql byte 32: slice 1 (and 3), weight 0: 15 | 3 << 4 = 63
  } else {
    w.bytes[4] = 0xff;  // sub-block 0: scale 63 and the top bits of sub-block 4's scale
    w.bytes[8] = 0xff;  // sub-block 0: min 63 ...
    if (w.view.type == WeightType::kQ5_K) {
      w.bytes[16] = 0x03;  // qh byte 0: weight 0 of sub-blocks 0 and 1 has its fifth bit ...
      w.bytes[48] = 0xff;  // ... over codes 15 and 15: 31 and 31
      w.bytes[17] = 0x00;  // weight 1 of both: no fifth bit ...
      w.bytes[49] = 0x00;  // ... over codes 0: 0
      w.bytes[47] = 0x80;  // qh byte 31: weight 31 of sub-block 7 only
    } else {
      w.bytes[16] = 0xf0;  // codes 0 (sub-block 0) and 15 (sub-block 1)
    }
  }
  refresh_dequantized(w);
}

TEST_P(Interleaved16, DequantizeGivesTheOriginalValuesBitForBitOnEveryPath) {
  const std::int64_t cols = k_type(GetParam()) ? 512 : 192;
  TestWeights w = make_test_weights(GetParam(), 48, cols, 11);
  put_extremes(w);
  const Repacked r = repack(w.view);
  for (auto [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, 48}, {5, 37}, {47, 48}}) {
    ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kAvx512));
    std::vector<float> want(static_cast<std::size_t>((end - begin) * cols));
    dequantize_rows(w.view, begin, end, want.data());
    for (SimdPath path : {SimdPath::kAvx512, SimdPath::kAvx2, SimdPath::kScalar}) {
      if (!set_simd_path_for_testing(path)) continue;
      SCOPED_TRACE(simd_path_name(path));
      std::vector<float> got(want.size());
      dequantize_rows(r.view, begin, end, got.data());
      expect_bits_equal(got, want, "dequantized value");
    }
  }
  // And the values are the exact ones.
  std::vector<float> first(static_cast<std::size_t>(cols));
  dequantize_rows(r.view, 0, 1, first.data());
  for (std::int64_t c = 0; c < cols; ++c) EXPECT_NEAR(first[c], w.dequantized[c], 1e-6 * (1 + std::fabs(w.dequantized[c])));
}

TEST_P(Interleaved16, MatmulIsTheScalarStatementBitForBitAtEveryTokenCount) {
  ThreadPool pool(2);
  const bool k = k_type(GetParam());
  // F16 rows of any length: 37 and 90 columns end part-way through the kernel's four chains. K
  // types: 4096 columns make a group longer than L1, where the Q4_K kernel prefetches activations.
  const std::int64_t odd_cols = f16(GetParam()) ? 37 : 256, other_odd = f16(GetParam()) ? 90 : k ? 4096 : 256;
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{16, k ? 256 : 64}, {48, k ? 2048 : 896}, {160, 256},
                            {32, odd_cols}, {16, other_odd}}) {
    TestWeights q8 = make_test_weights(GetParam(), rows, cols, static_cast<std::uint32_t>(rows + cols));
    put_extremes(q8);
    const Repacked r = repack(q8.view);
    for (int n_tokens : {1, 2, 3, 7, 8, 9, 12, 17, 18, 19, 20}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " tokens " << n_tokens);
      std::vector<float> x = random_floats(static_cast<std::size_t>(n_tokens * cols), 100 + n_tokens);
      x[0] = 40.0f;  // one large activation: its block quantizes to +-127 around it
      if (f16(GetParam())) x[0] = 1e-3f;  // times 65504 stays well inside f32's range either way
      ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kAvx512));
      const std::vector<float> got = run(r.view, x, n_tokens, pool);
      const std::vector<float> gguf_layout = run(q8.view, x, n_tokens, pool);
      ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kScalar));
      expect_bits_equal(got, run(r.view, x, n_tokens, pool), "avx512 vs scalar");
      if (set_simd_path_for_testing(SimdPath::kAvx2)) expect_bits_equal(got, run(r.view, x, n_tokens, pool), "avx512 vs avx2");
      ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kAvx512));
      // Each token alone gives its own result in the batch, bit for bit.
      for (int t : {0, n_tokens - 1}) {
        const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        const std::vector<float> alone = run(r.view, xt, 1, pool);
        const std::vector<float> in_batch(got.begin() + t * rows, got.begin() + (t + 1) * rows);
        expect_bits_equal(in_batch, alone, "token in a batch vs alone");
      }
      // The K types' activations are quantized per 256: each off by at most half its block's step.
      std::vector<double> half_step(k ? x.size() / 256 : 0, 0.0);
      for (std::size_t c = 0; c < half_step.size() * 256; ++c) {
        half_step[c / 256] = std::max(half_step[c / 256], 0.5 * std::fabs(x[c]) / 127.0);
      }
      for (std::size_t i = 0; i < got.size(); ++i) {
        const std::int64_t t = static_cast<std::int64_t>(i) / rows, row = static_cast<std::int64_t>(i) % rows;
        double magnitude = 0.0, exact = 0.0, quantization = 0.0;
        for (std::int64_t c = 0; c < cols; ++c) {
          const double w = q8.dequantized[row * cols + c];
          magnitude += std::fabs(w * x[t * cols + c]);
          exact += w * x[t * cols + c];
          if (k) quantization += std::fabs(w) * half_step[static_cast<std::size_t>((t * cols + c) / 256)];
        }
        if (k) {
          // Within the per-256 quantization's bound of the exact product (the GGUF-layout kernels
          // quantize per 32, so their result is another one within its own bound).
          ASSERT_NEAR(got[i], exact, quantization * (1 + 1e-5) + 1e-5 * magnitude + 1e-6) << "output " << i;
        } else {
          // The same products as the GGUF-layout kernel, summed in another order.
          ASSERT_NEAR(got[i], gguf_layout[i], 1e-5 * magnitude + 1e-6) << "output " << i;
        }
      }
    }
  }
}

// The opt-in sgemm path (--sgemm-prefill-min-tokens) is not taken for interleaved weights: the
// result stays the integer kernels', bit for bit.
TEST_P(Interleaved16, NeverTakesTheSgemmPath) {
  ThreadPool pool(2);
  const std::int64_t cols = 512;
  const TestWeights w = make_test_weights(GetParam(), 32, cols, 31);
  const Repacked r = repack(w.view);
  const std::vector<float> x = random_floats(static_cast<std::size_t>(20 * cols), 32);
  const std::vector<float> integer = run(r.view, x, 20, pool);
  set_prefill_min_tokens_for_testing(1);
  const std::vector<float> with_threshold = run(r.view, x, 20, pool);
  set_prefill_min_tokens_for_testing(0);
  expect_bits_equal(with_threshold, integer, "with the sgemm threshold at 1 token");
}

TEST_P(Interleaved16, SharesASplitWithOtherTypes) {
  ThreadPool pool(2);
  const std::int64_t cols = 1024;
  const TestWeights q8 = make_test_weights(GetParam(), 4096, cols, 21);
  const TestWeights f16 = make_test_weights(WeightType::kF16, 1000, cols, 22);
  const Repacked r = repack(q8.view);
  const std::vector<float> x = random_floats(static_cast<std::size_t>(3 * cols), 23);
  std::vector<float> y_q(3 * 4096, std::nanf("")), y_f(3 * 1000, std::nanf(""));
  const WeightView ws[] = {f16.view, r.view};
  float* ys[] = {y_f.data(), y_q.data()};
  matmul_many(ws, x.data(), 3, ys, pool);
  expect_bits_equal(y_q, run(r.view, x, 3, pool), "matmul_many vs matmul");
  ASSERT_TRUE(set_simd_path_for_testing(SimdPath::kScalar));
  expect_bits_equal(y_q, run(r.view, x, 3, pool), "avx512 in matmul_many vs scalar");
}

// Every type with an interleaved layout; none on a CPU without the AVX-512 path (nothing here can run there).
std::vector<WeightType> interleaved_types_this_cpu_runs() {
  if (!cpu_supports(SimdPath::kAvx512)) return {};
  return {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ5_0, WeightType::kQ4_1, WeightType::kQ5_1, WeightType::kQ2_K,
          WeightType::kQ3_K, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kF16, WeightType::kMxfp4};
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Interleaved16);
INSTANTIATE_TEST_SUITE_P(Types, Interleaved16, ::testing::ValuesIn(interleaved_types_this_cpu_runs()),
                         [](const ::testing::TestParamInfo<WeightType>& info) { return std::string(weight_type_name(info.param)); });

}  // namespace
}  // namespace kvstash::kernels
