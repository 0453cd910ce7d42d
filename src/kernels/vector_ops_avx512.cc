// The small transformer-layer operations with AVX-512 (F, BW, VL, DQ): 16 floats per step, tails
// through masked loads and stores so no element is touched twice and nothing is read past n.
// GCC 12's own AVX-512 headers trip its uninitialized-value warnings (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <type_traits>

#include "kernels/simd_impl.h"

namespace kvstash::kernels::avx512 {
namespace {

__mmask16 tail_mask(int remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << remaining) - 1);
}

// e^x to about 2 ulp for x in [-87, 88] (Cephes' expf: x = n ln2 + r, degree-6 polynomial in r).
__m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)), _mm512_set1_ps(-88.3762626647949f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

}  // namespace

void rms_norm(const float* x, const float* weight, int n, float eps, float* out) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float sum_sq = _mm512_reduce_add_ps(acc);
  const __m512 scale = _mm512_set1_ps(1.0f / __builtin_sqrtf(sum_sq / static_cast<float>(n) + eps));
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i)));
  }
}

void softmax_inplace(float* x, int n) {
  if (n <= 0) return;
  __m512 max_v = _mm512_set1_ps(x[0]);
  for (int i = 0; i < n; i += 16) {
    max_v = _mm512_max_ps(max_v, _mm512_mask_loadu_ps(max_v, tail_mask(n - i), x + i));
  }
  const __m512 max_b = _mm512_set1_ps(_mm512_reduce_max_ps(max_v));
  __m512 sum = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max_b));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

void silu_mul(const float* gate, const float* up, int n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void add_inplace(float* y, const float* x, int n) {
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}

float dot_f32(const float* a, const float* b, int n) {
  // Two accumulators hide the FMA latency on long vectors.
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float dot_f32_f16(const float* a, const std::uint16_t* b, int n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 b0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    const __m512 b1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i + 16)));
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), b0, acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), b1, acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 bv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i));
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), bv, acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void axpy_f16(float alpha, const std::uint16_t* x, float* y, int n) {
  const __m512 a = _mm512_set1_ps(alpha);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(a, xv, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

namespace {

// The lanes of four rows' partial sums added up: lane i of the result is the sum of the 16 lanes
// of v[i]. Each row's sum is taken in the same order whatever the other three hold.
__m128 sum4(const __m512 v[4]) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
  // Each 128-bit lane: [a, b, c, d] summed over that lane's four elements.
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xee));
  const __m256 halves = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
  return _mm_add_ps(_mm256_castps256_ps128(halves), _mm256_extractf128_ps(halves, 1));
}

// kHeads query heads of kVecs * 16 elements against n_rows f16 rows, four rows at a time: each row
// is converted once for all the heads (GQA: the heads of a group read the same K rows).
template <int kVecs, int kHeads>
void dot_rows_heads(const float* q, const std::uint16_t* rows, std::size_t row_stride, int n_rows, float scale,
                    float* out, std::size_t out_stride) {
  constexpr int n = kVecs * 16;
  const __m128 s = _mm_set1_ps(scale);
  for (int j = 0; j < n_rows; j += 4) {
    __m512 acc[kHeads][4];
    for (int r = 0; r < 4; ++r) {
      if (j + r >= n_rows) {
        for (int h = 0; h < kHeads; ++h) acc[h][r] = _mm512_setzero_ps();
        continue;
      }
      const auto* v = reinterpret_cast<const __m256i*>(rows + (j + r) * row_stride);
      __m512 k[kVecs];
      for (int i = 0; i < kVecs; ++i) k[i] = _mm512_cvtph_ps(_mm256_loadu_si256(v + i));
      for (int h = 0; h < kHeads; ++h) {
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q + h * n), k[0]);
        for (int i = 1; i < kVecs; ++i) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * n + 16 * i), k[i], a);
        acc[h][r] = a;
      }
    }
    const __mmask8 m = static_cast<__mmask8>(n_rows - j >= 4 ? 0xf : (1u << (n_rows - j)) - 1);
    for (int h = 0; h < kHeads; ++h) _mm_mask_storeu_ps(out + h * out_stride + j, m, _mm_mul_ps(sum4(acc[h]), s));
  }
}

// y[h] += sum_j alpha[h][j] * row_j for kHeads heads, all of y in registers: each row is converted
// once for all the heads. Per head and column the sum runs over j in order.
template <int kVecs, int kHeads>
void axpy_rows_heads(const float* alpha, std::size_t alpha_stride, const std::uint16_t* rows, std::size_t row_stride,
                     int n_rows, float* y) {
  constexpr int n = kVecs * 16;
  __m512 acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kVecs; ++i) acc[h][i] = _mm512_loadu_ps(y + h * n + 16 * i);
  }
  for (int j = 0; j < n_rows; ++j) {
    const auto* v = reinterpret_cast<const __m256i*>(rows + j * row_stride);
    __m512 x[kVecs];
    for (int i = 0; i < kVecs; ++i) x[i] = _mm512_cvtph_ps(_mm256_loadu_si256(v + i));
    for (int h = 0; h < kHeads; ++h) {
      const __m512 a = _mm512_set1_ps(alpha[h * alpha_stride + j]);
      for (int i = 0; i < kVecs; ++i) acc[h][i] = _mm512_fmadd_ps(a, x[i], acc[h][i]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kVecs; ++i) _mm512_storeu_ps(y + h * n + 16 * i, acc[h][i]);
  }
}

// Heads taken kMax at a time (the registers: kMax * kVecs accumulators for the axpy), then the rest.
template <int kMax, typename Call>
void by_head_groups(int n_heads, Call&& call) {
  int h = 0;
  for (; h + kMax <= n_heads; h += kMax) call(h, std::integral_constant<int, kMax>{});
  const int rest = n_heads - h;
  if constexpr (kMax > 3) { if (rest == 3) return call(h, std::integral_constant<int, 3>{}); }
  if constexpr (kMax > 2) { if (rest == 2) return call(h, std::integral_constant<int, 2>{}); }
  if (rest == 1) call(h, std::integral_constant<int, 1>{});
}

// Single-head fallbacks for head sizes other than 64 and 128.
void dot_rows_any(const float* a, const std::uint16_t* rows, std::size_t row_stride, int n_rows, int n, float scale,
                  float* out) {
  for (int j = 0; j < n_rows; ++j) out[j] = dot_f32_f16(a, rows + j * row_stride, n) * scale;
}

void axpy_rows_any(const float* alpha, const std::uint16_t* rows, std::size_t row_stride, int n_rows, int n, float* y) {
  // y in registers, 64 columns at a time, across all rows: one load and store of y per call.
  for (int c = 0; c < n; c += 64) {
    __mmask16 m[4];
    __m512 acc[4];
    for (int k = 0; k < 4; ++k) {
      m[k] = c + 16 * k < n ? tail_mask(n - c - 16 * k) : static_cast<__mmask16>(0);
      acc[k] = _mm512_maskz_loadu_ps(m[k], y + c + 16 * k);
    }
    for (int j = 0; j < n_rows; ++j) {
      const __m512 s = _mm512_set1_ps(alpha[j]);
      const std::uint16_t* r = rows + j * row_stride + c;
      for (int k = 0; k < 4; ++k) {
        acc[k] = _mm512_fmadd_ps(s, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[k], r + 16 * k)), acc[k]);
      }
    }
    for (int k = 0; k < 4; ++k) _mm512_mask_storeu_ps(y + c + 16 * k, m[k], acc[k]);
  }
}

}  // namespace

void dot_f32_f16_rows(const float* q, int n_heads, const std::uint16_t* rows, std::size_t row_stride, int n_rows,
                      int n, float scale, float* out, std::size_t out_stride) {
  if (n == 64 || n == 128) {
    auto run = [&]<int kVecs>(std::integral_constant<int, kVecs>) {
      by_head_groups<4>(n_heads, [&]<int kHeads>(int h, std::integral_constant<int, kHeads>) {
        dot_rows_heads<kVecs, kHeads>(q + h * n, rows, row_stride, n_rows, scale, out + h * out_stride, out_stride);
      });
    };
    return n == 64 ? run(std::integral_constant<int, 4>{}) : run(std::integral_constant<int, 8>{});
  }
  for (int h = 0; h < n_heads; ++h) dot_rows_any(q + h * n, rows, row_stride, n_rows, n, scale, out + h * out_stride);
}

void axpy_f16_rows(const float* alpha, std::size_t alpha_stride, int n_heads, const std::uint16_t* rows,
                   std::size_t row_stride, int n_rows, int n, float* y) {
  if (n == 64) {
    return by_head_groups<4>(n_heads, [&]<int kHeads>(int h, std::integral_constant<int, kHeads>) {
      axpy_rows_heads<4, kHeads>(alpha + h * alpha_stride, alpha_stride, rows, row_stride, n_rows, y + h * n);
    });
  }
  if (n == 128) {
    return by_head_groups<2>(n_heads, [&]<int kHeads>(int h, std::integral_constant<int, kHeads>) {
      axpy_rows_heads<8, kHeads>(alpha + h * alpha_stride, alpha_stride, rows, row_stride, n_rows, y + h * n);
    });
  }
  for (int h = 0; h < n_heads; ++h) axpy_rows_any(alpha + h * alpha_stride, rows, row_stride, n_rows, n, y + h * n);
}

void f32_to_f16_row(const float* x, std::uint16_t* out, int n) {
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(out + i, m, h);
  }
}

void f16_to_f32_row(const std::uint16_t* x, float* out, int n) {
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}

std::uint64_t read_sum(const void* data, std::size_t bytes) {
  // Four independent adds per 256 bytes so the loop is limited by loads, not by add latency.
  const auto* p = static_cast<const __m512i*>(data);
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  std::size_t n = bytes / 64;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 1));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + i + 2));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + i + 3));
  }
  for (; i < n; ++i) s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
  // Lanes summed as unsigned (wrapping): _mm512_reduce_add_epi64 adds them as signed 64-bit
  // integers, which overflows (undefined behaviour, UBSan) on data such as weights or byte ramps.
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  std::uint64_t sum = 0;
  for (std::uint64_t lane : lanes) sum += lane;
  return sum;
}

}  // namespace kvstash::kernels::avx512
