// AVX2 + FMA + F16C weight kernels: this level's primitives for the shared decode glue
// (matmul_tiles.h; tiles of 4 rows x 1 token or 2 rows x up to 4 tokens, sized for 16 ymm
// registers), its float and q8_0 tiles, weight-to-f32 conversion, the activation quantizer, and
// this level's KernelTable.
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul_tiles.h"
#include "kernels/simd_dispatch.h"
#include "kernels/simd_impl.h"

namespace kvstash::kernels::avx2 {
namespace {

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

template <WeightType kType>
__m256 load_weights(const std::uint8_t* row, std::int64_t c) {
  if constexpr (kType == WeightType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (kType == WeightType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 2)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c * 2));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <WeightType kType>
float load_weight(const std::uint8_t* row, std::int64_t c) {
  if constexpr (kType == WeightType::kF32) {
    float f;
    std::memcpy(&f, row + c * 4, 4);
    return f;
  } else {
    std::uint16_t h;
    std::memcpy(&h, row + c * 2, 2);
    if constexpr (kType == WeightType::kF16) return _cvtsh_ss(h);
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

template <WeightType kType, int R, int T>
void float_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x,
                float* y, std::int64_t y_stride, bool prefetch) {
  constexpr std::size_t kElemBytes = kType == WeightType::kF32 ? 4 : 2;
  const std::uint8_t* next_tile = row0 + prefetch_distance(R * row_bytes);
  __m256 acc[R][T];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  std::int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    if (prefetch) prefetch_span(next_tile + c * kElemBytes * R, 8 * kElemBytes * R);
    __m256 wv[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) wv[i] = load_weights<kType>(row0 + i * row_bytes, c);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * cols + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][t] = _mm256_fmadd_ps(wv[i], xv, acc[i][t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < R; ++i) {
      float sum = hsum(acc[i][t]);
      for (std::int64_t k = c; k < cols; ++k) sum += load_weight<kType>(row0 + i * row_bytes, k) * x[t * cols + k];
      y[t * y_stride + i] = sum;
    }
  }
}

// q8_0 rows against q8 activations; maddubs takes |w| unsigned and x with w's sign. Its pairwise
// int16 sums cannot saturate: 2 * 128 * 127 < 32767.
template <int R, int T>
void q8_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x_scales,
             const std::int8_t* x_values, float* y, std::int64_t y_stride, bool prefetch) {
  const std::int64_t blocks = cols / kQ8_0BlockElems;
  const std::uint8_t* next_tile = row0 + prefetch_distance(R * row_bytes);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][T];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (prefetch) prefetch_span(next_tile + b * kQ8_0BlockBytes * R, kQ8_0BlockBytes * R);
    __m256i w[R];
    __m256i abs_w[R];
    float dw[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const std::uint8_t* block = row0 + i * row_bytes + b * kQ8_0BlockBytes;
      std::uint16_t h;
      std::memcpy(&h, block, 2);
      dw[i] = _cvtsh_ss(h);
      w[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
      abs_w[i] = _mm256_abs_epi8(w[i]);
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_values + t * cols + b * 32));
      const float dx = x_scales[t * blocks + b];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const __m256i pairs = _mm256_maddubs_epi16(abs_w[i], _mm256_sign_epi8(xv, w[i]));
        const __m256i prod = _mm256_madd_epi16(pairs, ones);
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(prod), _mm256_set1_ps(dw[i] * dx), acc[i][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) y[t * y_stride + i] = hsum(acc[i][t]);
}

void dequantize_q8_0_row(const std::uint8_t* row, std::int64_t cols, float* out) {
  for (std::int64_t b = 0; b < cols / kQ8_0BlockElems; ++b) {
    const std::uint8_t* block = row + b * kQ8_0BlockBytes;
    std::uint16_t h;
    std::memcpy(&h, block, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + k * 8));
      _mm256_storeu_ps(out + b * 32 + k * 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    }
  }
}

template <WeightType kType>
void dequantize_float_row(const std::uint8_t* row, std::int64_t cols, float* out) {
  std::int64_t c = 0;
  for (; c + 8 <= cols; c += 8) _mm256_storeu_ps(out + c, load_weights<kType>(row, c));
  for (; c < cols; ++c) out[c] = load_weight<kType>(row, c);
}

// This level's primitives for matmul_tiles.h: one 32-weight slice per 256-bit register.
struct Ops {
  using F = __m256;
  using I = __m256i;
  static constexpr int kSlices = 1;
  static constexpr int kSingleTokenRows = 4;  // 4 independent FMA chains keep up with memory
  static constexpr int kBatchRows = 2;
  static constexpr int kWideTokens = 0;
  static constexpr int kWideRows = 1;

  template <WeightType kType, int R, int T>
  static void float_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x, float* y,
                         std::int64_t y_stride, bool prefetch) {
    avx2::float_tile<kType, R, T>(row0, row_bytes, cols, x, y, y_stride, prefetch);
  }
  template <int R, int T>
  static void q8_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x_scales,
                      const std::int8_t* x_values, float* y, std::int64_t y_stride, bool prefetch) {
    avx2::q8_tile<R, T>(row0, row_bytes, cols, x_scales, x_values, y, y_stride, prefetch);
  }
  template <WeightType kType>
  static void dequantize_float_row(const std::uint8_t* row, std::int64_t cols, float* out) {
    avx2::dequantize_float_row<kType>(row, cols, out);
  }
  static void dequantize_q8_0_row(const std::uint8_t* row, std::int64_t cols, float* out) {
    avx2::dequantize_q8_0_row(row, cols, out);
  }

  static F zero() { return _mm256_setzero_ps(); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static float reduce(F v) { return hsum(v); }
  static I join(const __m256i* slices) { return slices[0]; }
  static I join_partial(const __m256i* slices, int) { return slices[0]; }
  static I load_x(const std::int8_t* x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); }
  static I load_x_partial(const std::int8_t* x, int) { return load_x(x); }
  static F load_lanes(const float* p) { return _mm256_loadu_ps(p); }
  static F load_lanes_partial(const float* p, int) { return load_lanes(p); }
  // maddubs takes u unsigned and x signed; its int16 pair sums cannot saturate for u <= 63:
  // 2 * 63 * 128 < 32767.
  static F dot(I u, I x) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
  }
  static F per_slice(const float* v, int) { return _mm256_broadcast_ss(v); }
  struct Groups {
    __m256 lo, hi;
  };
  static Groups load_groups(const float* g) { return {_mm256_loadu_ps(g), _mm256_loadu_ps(g + 8)}; }
  static Groups groups(__m256 lo, __m256 hi) { return {lo, hi}; }
  static F splat(float v) { return _mm256_set1_ps(v); }
  static F fmsub(F a, F b, F c) { return _mm256_fmsub_ps(a, b, c); }
  static F fnmadd_groups(const Groups& a, const Groups& b, F c) {
    return _mm256_fnmadd_ps(a.lo, b.lo, _mm256_fnmadd_ps(a.hi, b.hi, c));
  }
  template <WeightType kType>
  static I unpack_slices(const std::uint8_t* block, int first) { return slice_values_256<kType>(block, first); }
  template <WeightType kType>
  static I unpack_blocks(const std::uint8_t* block) { return slice_values_256<kType>(block, 0); }
  template <WeightType kType>
  static F block_halves(const std::uint8_t* block, int offset) { return _mm256_set1_ps(half_at(block + offset)); }
  static F splat_lone(float v) { return _mm256_set1_ps(v); }
  static Groups mul_groups(const Groups& a, const Groups& b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  template <int kGroupElems>
  static Groups dx_groups(const float* dx8) {
    const __m256 dx = _mm256_loadu_ps(dx8);
    if constexpr (kGroupElems == 32) return {dx, dx};
    return {_mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)),
            _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7))};
  }
  template <int kGroupElems>
  static F expand(const Groups& g, int slice) {
    if constexpr (kGroupElems == 32) {
      return _mm256_permutevar8x32_ps(g.lo, _mm256_set1_epi32(slice));
    } else {
      const int first = 2 * (slice % 4);
      const __m256i idx = _mm256_setr_epi32(first, first, first, first, first + 1, first + 1, first + 1, first + 1);
      return _mm256_permutevar8x32_ps(slice < 4 ? g.lo : g.hi, idx);
    }
  }
};

// The interleaved layouts this level multiplies go to interleaved_avx2.cc; the others (made for the
// AVX-512 kernels) only reach this level when a test lowers the path after the weights were
// repacked: the scalar statement serves them.
void matmul_rows(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                 std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride) {
  if (is_interleaved(w.type)) {
    if (interleaved_rows(w, xq, n_tokens, row_begin, row_end, y, y_stride)) return;
    return scalar_kernel_table().matmul_rows(w, x, xq, n_tokens, row_begin, row_end, y, y_stride);
  }
  tiled_matmul_rows<Ops>(w, x, xq, n_tokens, row_begin, row_end, y, y_stride);
}

void dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) {
  if (is_interleaved(w.type)) return scalar_kernel_table().dequantize_rows(w, row_begin, row_end, out);
  tiled_dequantize_rows<Ops>(w, row_begin, row_end, out);
}

// Same operations in the same order as the scalar quantizer, so the results are bit-identical.
void quantize_activations(const float* x, std::int64_t n, int block, float* scales, std::int8_t* values) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (std::int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < block / 8; ++k) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + k * 8), abs_mask));
    const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    const float d = amax / 127.0f;
    const __m256 inv_d = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    scales[b] = d;
    for (int k0 = 0; k0 < block; k0 += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + k0 + k * 8), inv_d),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_cvtps_epi32(v);
      }
      // Pack 32 int32 to 32 int8 (values are within [-127, 127]); packs interleave 128-bit lanes,
      // which the final permute undoes.
      const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
      const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
      const __m256i bytes = _mm256_packs_epi16(w01, w23);
      const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(values + b * block + k0), ordered);
    }
  }
}

const KernelTable kTable = {
    .path = SimdPath::kAvx2,
    .matmul_rows = matmul_rows,
    .dequantize_rows = dequantize_rows,
    .quantize_activations = quantize_activations,
    .rms_norm = rms_norm,
    .softmax_inplace = softmax_inplace,
    .silu_mul = silu_mul,
    .add_inplace = add_inplace,
    .dot_f32 = dot_f32,
    .dot_f32_f16 = dot_f32_f16,
    .axpy_f16 = axpy_f16,
    .dot_f32_f16_rows = dot_f32_f16_rows,
    .axpy_f16_rows = axpy_f16_rows,
    .f32_to_f16_row = f32_to_f16_row,
    .f16_to_f32_row = f16_to_f32_row,
    .read_sum = read_sum,
};

}  // namespace
}  // namespace kvstash::kernels::avx2

namespace kvstash::kernels {
const KernelTable& avx2_kernel_table() { return avx2::kTable; }
}  // namespace kvstash::kernels
