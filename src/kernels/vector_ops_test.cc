// The small vector operations on every SIMD path against double-precision references, on sizes
// that leave tails after every vector width.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "kernels/kernels.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {
namespace {

constexpr int kSizes[] = {1, 7, 8, 15, 16, 17, 33, 100, 1000};

std::vector<float> random_floats(int n, std::uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(rng);
  return v;
}

std::vector<std::uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return h;
}

class VectorOpsOnPath : public ::testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(set_simd_path_for_testing(GetParam())) << simd_path_name(GetParam());
  }
  void TearDown() override { reset_simd_path_for_testing(); }
};

TEST_P(VectorOpsOnPath, RmsNorm) {
  for (int n : kSizes) {
    const auto x = random_floats(n, n), w = random_floats(n, n + 1);
    std::vector<float> out(n);
    rms_norm(x.data(), w.data(), n, 1e-6f, out.data());
    double sum_sq = 0.0;
    for (float v : x) sum_sq += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(sum_sq / n + 1e-6);
    for (int i = 0; i < n; ++i) {
      const double ref = x[i] * scale * w[i];
      ASSERT_NEAR(out[i], ref, 1e-5 * std::fabs(ref) + 1e-7) << "n " << n << " i " << i;
    }
  }
}

TEST_P(VectorOpsOnPath, Softmax) {
  for (int n : kSizes) {
    auto x = random_floats(n, n, -30.0f, 30.0f);
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked position
    const auto orig = x;
    softmax_inplace(x.data(), n);
    double max_v = -INFINITY, sum = 0.0;
    for (float v : orig) max_v = std::max(max_v, static_cast<double>(v));
    for (float v : orig) sum += std::exp(v - max_v);
    double total = 0.0;
    for (int i = 0; i < n; ++i) {
      const double ref = std::exp(orig[i] - max_v) / sum;
      // The vector exp is good to a few ulp, and x - max rounds in f32 (relative error 6e-8 of
      // |x - max| in the exponent); a masked position may come out as ~1e-38, not 0.
      const double rel = std::isinf(orig[i]) ? 0.0 : 2e-6 + 1.2e-7 * std::fabs(orig[i] - max_v);
      ASSERT_NEAR(x[i], ref, rel * ref + 1e-30) << "n " << n << " i " << i;
      total += x[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST_P(VectorOpsOnPath, SiluMul) {
  for (int n : kSizes) {
    auto g = random_floats(n, n, -20.0f, 20.0f), u = random_floats(n, n + 3);
    if (n > 1) g[0] = -100.0f;  // exp(100) overflows in a naive form; silu(-100) ~ 0
    std::vector<float> out(n);
    silu_mul(g.data(), u.data(), n, out.data());
    for (int i = 0; i < n; ++i) {
      const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      ASSERT_NEAR(out[i], ref, 2e-6 * std::fabs(ref) + 1e-7) << "n " << n << " i " << i;
    }
  }
}

TEST_P(VectorOpsOnPath, AddAndDots) {
  for (int n : kSizes) {
    const auto a = random_floats(n, n), b = random_floats(n, n + 5);
    const auto b16 = to_f16(b);
    double dot = 0.0, dot16 = 0.0, magnitude = 0.0;
    for (int i = 0; i < n; ++i) {
      dot += static_cast<double>(a[i]) * b[i];
      dot16 += static_cast<double>(a[i]) * f16_to_f32(b16[i]);
      magnitude += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    EXPECT_NEAR(dot_f32(a.data(), b.data(), n), dot, 1e-6 * magnitude + 1e-7) << n;
    EXPECT_NEAR(dot_f32_f16(a.data(), b16.data(), n), dot16, 1e-6 * magnitude + 1e-7) << n;
    auto y = a;
    add_inplace(y.data(), b.data(), n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], a[i] + b[i]);  // one rounding either way
    y = a;
    axpy_f16(0.75f, b16.data(), y.data(), n);
    for (int i = 0; i < n; ++i) {
      ASSERT_NEAR(y[i], a[i] + 0.75 * f16_to_f32(b16[i]), 4e-7) << "n " << n << " i " << i;
    }
  }
}

// Rows of a KV block for the query heads of a GQA group: a row stride wider than the row (other
// heads' values in between), head sizes that hit the 64- and 128-wide paths and ones that leave
// tails, odd and even row counts, head counts that fill the kernels' groups of heads and ones that
// leave a rest (qwen2.5-0.5b has 7 per group).
TEST_P(VectorOpsOnPath, RowDotsAndAxpysOverStridedRows) {
  for (int n : {64, 17, 100, 128}) {
    for (int n_rows : {1, 2, 5, 16}) {
      for (int n_heads : {1, 2, 3, 4, 5, 7}) {
        const int stride = n * 2 + 3, out_stride = n_rows + 3, alpha_stride = n_rows + 1;
        const auto q = random_floats(n * n_heads, n * 7 + n_rows + n_heads);
        const auto rows16 = to_f16(random_floats(stride * n_rows, n + n_rows));
        const auto alpha = random_floats(alpha_stride * n_heads, n_rows * 3 + 1, -1.0f, 1.0f);
        std::vector<float> out(static_cast<std::size_t>(out_stride * n_heads), -7.0f);  // the gaps must stay
        dot_f32_f16_rows(q.data(), n_heads, rows16.data(), stride, n_rows, n, 0.125f, out.data(), out_stride);
        const auto y0 = random_floats(n * n_heads + 1, 99);
        auto y = y0;
        axpy_f16_rows(alpha.data(), alpha_stride, n_heads, rows16.data(), stride, n_rows, n, y.data());
        for (int h = 0; h < n_heads; ++h) {
          const auto at = [](int i) { return static_cast<std::size_t>(i); };
          std::vector<double> y_ref(y0.begin() + h * n, y0.begin() + (h + 1) * n);
          for (int j = 0; j < n_rows; ++j) {
            double dot = 0.0, magnitude = 0.0;
            for (int i = 0; i < n; ++i) {
              const double r = f16_to_f32(rows16[at(j * stride + i)]);
              dot += q[at(h * n + i)] * r;
              magnitude += std::fabs(q[at(h * n + i)] * r);
              y_ref[at(i)] += alpha[at(h * alpha_stride + j)] * r;
            }
            ASSERT_NEAR(out[at(h * out_stride + j)], dot * 0.125, 1e-6 * magnitude + 1e-7)
                << "n " << n << " rows " << n_rows << " heads " << n_heads << " head " << h << " j " << j;
          }
          for (int j = n_rows; j < out_stride; ++j) ASSERT_EQ(out[at(h * out_stride + j)], -7.0f) << "past row " << j;
          for (int i = 0; i < n; ++i) {
            ASSERT_NEAR(y[at(h * n + i)], y_ref[at(i)], 2e-6 * (n_rows + 2))
                << "n " << n << " rows " << n_rows << " heads " << n_heads << " head " << h << " i " << i;
          }
        }
        EXPECT_EQ(y[y.size() - 1], y0[y0.size() - 1]);  // past the end: untouched
      }
    }
  }
}

// Prefill takes a whole GQA group per call, decode may take a part of one, and a KV block may be
// cut short: a head's scores and output must be the same, bit for bit, however it is grouped and
// whichever rows share its call, or a cached prefix would not decode as the uncached one does.
TEST_P(VectorOpsOnPath, RowDotsAndAxpysDoNotDependOnTheirCompany) {
  constexpr int kHeads = 7, kRows = 13;
  for (int n : {64, 128, 80}) {
    const int stride = n + 5;
    const auto q = random_floats(n * kHeads, 3 * n);
    const auto rows16 = to_f16(random_floats(stride * kRows, n + 11));
    const auto alpha = random_floats(kRows * kHeads, n + 17, -1.0f, 1.0f);
    std::vector<float> all_scores(kRows * kHeads), all_y(static_cast<std::size_t>(n) * kHeads, 0.5f);
    dot_f32_f16_rows(q.data(), kHeads, rows16.data(), stride, kRows, n, 0.125f, all_scores.data(), kRows);
    axpy_f16_rows(alpha.data(), kRows, kHeads, rows16.data(), stride, kRows, n, all_y.data());
    for (int h = 0; h < kHeads; ++h) {
      std::vector<float> scores(kRows), y(static_cast<std::size_t>(n), 0.5f);
      // One head alone, its rows in calls of 1, 2, 3, ... rows.
      for (int j = 0, take = 1; j < kRows; j += take, ++take) {
        const int rows = std::min(take, kRows - j);
        dot_f32_f16_rows(q.data() + h * n, 1, rows16.data() + j * stride, stride, rows, n, 0.125f, scores.data() + j, 0);
        axpy_f16_rows(alpha.data() + h * kRows + j, 0, 1, rows16.data() + j * stride, stride, rows, n, y.data());
      }
      for (int j = 0; j < kRows; ++j) ASSERT_EQ(scores[j], all_scores[h * kRows + j]) << "n " << n << " head " << h << " row " << j;
      for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], all_y[h * n + i]) << "n " << n << " head " << h << " i " << i;
    }
  }
}

TEST_P(VectorOpsOnPath, F16ConversionsMatchScalarReferenceBitForBit) {
  // Every half value converts exactly; NaNs only need to stay NaN.
  std::vector<std::uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> f(65536);
  f16_to_f32_row(all.data(), f.data(), 65535);  // odd length: a tail
  for (int i = 0; i < 65535; ++i) {
    const float ref = f16_to_f32(static_cast<std::uint16_t>(i));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f[i])) << i;
    } else {
      ASSERT_EQ(std::memcmp(&f[i], &ref, 4), 0) << i;
    }
  }
  // f32 -> f16: random values across the whole half range, subnormals, overflow and exact halfway
  // cases (round to nearest even).
  std::vector<float> x = random_floats(4099, 11, -70000.0f, 70000.0f);
  const auto small = random_floats(1000, 12, -1e-4f, 1e-4f);
  x.insert(x.end(), small.begin(), small.end());
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e9f, -1e9f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                  std::numeric_limits<float>::infinity(), 5.96e-8f, 2.98e-8f, 1e-10f}) {
    x.push_back(v);
  }
  std::vector<std::uint16_t> h(x.size());
  f32_to_f16_row(x.data(), h.data(), static_cast<int>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], f32_to_f16(x[i])) << "value " << x[i];
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::uint16_t hn = 0;
  f32_to_f16_row(&nan, &hn, 1);
  EXPECT_TRUE(std::isnan(f16_to_f32(hn)));
}

TEST_P(VectorOpsOnPath, ReadSumAddsEveryWord) {
  alignas(64) std::uint64_t words[8 * 9];
  std::uint64_t expected = 0;
  for (int i = 0; i < 72; ++i) expected += (words[i] = 1000003ull * i + 7);
  EXPECT_EQ(active_kernels().read_sum(words, sizeof(words)), expected);
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(AllPaths, VectorOpsOnPath,
                         ::testing::ValuesIn(supported_simd_paths()),
                         [](const auto& info) { return std::string(simd_path_name(info.param)); });

TEST(Dispatch, PicksTheBestPathTheCpuHas) {
  if (std::getenv("KVSTASH_SIMD") != nullptr) GTEST_SKIP() << "KVSTASH_SIMD is set";
  const char* expected = cpu_supports(SimdPath::kAvx512) ? "avx512" : cpu_supports(SimdPath::kAvx2) ? "avx2" : "scalar";
  EXPECT_STREQ(simd_path(), expected);
}

TEST(Dispatch, WeightTypeFacts) {
  EXPECT_STREQ(weight_type_name(WeightType::kQ8_0), "q8_0");
  EXPECT_EQ(row_bytes_for(WeightType::kF32, 10), 40u);
  EXPECT_EQ(row_bytes_for(WeightType::kBF16, 10), 20u);
  EXPECT_EQ(row_bytes_for(WeightType::kQ8_0, 64), 68u);
}

}  // namespace kvstash::kernels
