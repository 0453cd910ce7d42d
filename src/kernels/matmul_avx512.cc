// AVX-512 weight kernels: this level's primitives for the shared decode glue (matmul_tiles.h;
// register tiles of 4 rows x up to 4 tokens, or 2 rows x 8 tokens for float weights in batches, so
// a weight vector loaded once feeds every token; q8_0 and the slice-form types two 32-weight slices
// per register through VNNI), weight-to-f32 conversion for the sgemm path, and the activation
// quantizer. Also assembles this level's KernelTable.
// GCC 12's own AVX-512 headers trip its uninitialized-value warnings (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "kernels/matmul_tiles.h"
#include "kernels/interleaved16.h"
#include "kernels/mxfp4.h"
#include "kernels/simd_dispatch.h"
#include "kernels/simd_impl.h"

namespace kvstash::kernels::avx512 {
namespace {

__mmask16 tail_mask(std::int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << remaining) - 1);
}

// 16 weights from column c of a row, as f32; `m` masks the columns that exist.
template <WeightType kType>
__m512 load_weights(const std::uint8_t* row, std::int64_t c, __mmask16 m) {
  if constexpr (kType == WeightType::kF32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + c);
  } else if constexpr (kType == WeightType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const std::uint16_t*>(row) + c));
  } else {  // bf16 is the top half of an f32
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const std::uint16_t*>(row) + c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <WeightType kType, int R, int T>
void float_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x,
                float* y, std::int64_t y_stride, bool prefetch) {
  constexpr std::size_t kElemBytes = kType == WeightType::kF32 ? 4 : 2;
  const std::uint8_t* next_tile = row0 + prefetch_distance(R * row_bytes);
  __m512 acc[R][T];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < cols; c += 16) {
    if (prefetch) prefetch_span(next_tile + c * kElemBytes * R, 16 * kElemBytes * R);
    const __mmask16 m = tail_mask(cols - c);
    __m512 wv[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) wv[i] = load_weights<kType>(row0 + i * row_bytes, c, m);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * cols + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) y[t * y_stride + i] = _mm512_reduce_add_ps(acc[i][t]);
}

// q8_0 rows against q8 activations, two blocks per 512-bit register (lanes 0-7: block b, 8-15:
// block b + 1). VNNI multiplies unsigned by signed bytes, so the weights are biased to unsigned
// (w ^ 0x80 = w + 128) and the bias's share, 128 * sum(x), is taken off by starting the dot
// product from -128 * sum(x) per lane: computed once per token and block pair, shared by R rows.
// The int32 lane sums are exact; each is scaled by its block's d_w * d_x and accumulated in f32.
// `single` loads only block b (the odd last block): its upper lanes are zero on both sides.
struct Q8Pair {
  __m512i values;  // biased weights, or activation values
  __m512 scales;   // the pair's scale in each 8-lane half
};

inline __m512 pair_scales(__m128 two) {
  const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(two));
}

template <bool kSingle>
Q8Pair load_weight_pair(const std::uint8_t* block) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  std::uint16_t h0, h1 = 0;
  std::memcpy(&h0, block, 2);
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
  __m512i w;
  if constexpr (kSingle) {
    w = _mm512_maskz_mov_epi8(0xffffffffull, _mm512_castsi256_si512(lo));
    w = _mm512_mask_xor_epi32(w, 0x00ff, w, bias);
  } else {
    std::memcpy(&h1, block + kQ8_0BlockBytes, 2);
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kQ8_0BlockBytes + 2));
    w = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), bias);
  }
  const __m128i h = _mm_cvtsi32_si128(static_cast<int>(h0 | static_cast<std::uint32_t>(h1) << 16));
  return {w, pair_scales(_mm_cvtph_ps(h))};
}

template <int R, int T, bool kSingle>
inline void q8_pair_step(const std::uint8_t* const* rows, std::int64_t b, const float* x_scales,
                         const std::int8_t* x_values, std::int64_t cols, std::int64_t blocks, __m512 (&acc)[R][T]) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  Q8Pair w[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) w[i] = load_weight_pair<kSingle>(rows[i] + b * kQ8_0BlockBytes);
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    const std::int8_t* xb = x_values + t * cols + b * kQ8_0BlockElems;
    const float* sb = x_scales + t * blocks + b;
    __m512i xv;
    __m128 dx;
    if constexpr (kSingle) {
      xv = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb)));
      xv = _mm512_maskz_mov_epi32(0x00ff, xv);
      dx = _mm_load_ss(sb);
    } else {
      xv = _mm512_loadu_si512(xb);
      dx = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb)));  // two floats; no alignment needed
    }
    const __m512 dxv = pair_scales(dx);
    const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, xv));
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512i dot = _mm512_dpbusd_epi32(start, w[i].values, xv);
      acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w[i].scales, dxv), acc[i][t]);
    }
  }
}

template <int R, int T>
void q8_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x_scales,
             const std::int8_t* x_values, float* y, std::int64_t y_stride, bool prefetch) {
  const std::int64_t blocks = cols / kQ8_0BlockElems;
  const std::uint8_t* rows[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) rows[i] = row0 + i * row_bytes;
  const std::uint8_t* next_tile = row0 + prefetch_distance(R * row_bytes);
  __m512 acc[R][T];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  std::int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    if (prefetch) prefetch_span(next_tile + b * kQ8_0BlockBytes * R, 2 * kQ8_0BlockBytes * R);
    q8_pair_step<R, T, false>(rows, b, x_scales, x_values, cols, blocks, acc);
  }
  if (b < blocks) q8_pair_step<R, T, true>(rows, b, x_scales, x_values, cols, blocks, acc);
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) y[t * y_stride + i] = _mm512_reduce_add_ps(acc[i][t]);
}

void dequantize_q8_0_row(const std::uint8_t* row, std::int64_t cols, float* out) {
  for (std::int64_t b = 0; b < cols / kQ8_0BlockElems; ++b) {
    const std::uint8_t* block = row + b * kQ8_0BlockBytes;
    std::uint16_t h;
    std::memcpy(&h, block, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18));
    _mm512_storeu_ps(out + b * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
    _mm512_storeu_ps(out + b * 32 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
  }
}

template <WeightType kType>
void dequantize_float_row(const std::uint8_t* row, std::int64_t cols, float* out) {
  for (std::int64_t c = 0; c < cols; c += 16) {
    const __mmask16 m = tail_mask(cols - c);
    _mm512_mask_storeu_ps(out + c, m, load_weights<kType>(row, c, m));
  }
}

// Two slices' codes at once, 512 bits wide: slices `first` and `first` + 1 of a K super-block
// (first even) share their source bytes, shifted differently in the two 256-bit halves; two
// consecutive 32-weight blocks are put side by side. Same codes as quant_unpack_avx2.h's
// slice_values_256, which the tests hold both paths to.
inline __m512i both_halves(const std::uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Shifts the 16-bit words of the lower half right by `lo`, of the upper half by `hi`.
inline __m512i shift_halves(__m512i v, int lo, int hi) {
  const __m512i counts = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(lo)),
                                            _mm256_set1_epi16(static_cast<short>(hi)), 1);
  return _mm512_srlv_epi16(v, counts);
}

// Byte mask: bit `lo` of each lower-half byte, bit `hi` of each upper-half byte.
inline __mmask64 test_bits(__m512i v, int lo, int hi) {
  const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1u << lo)),
                                          _mm256_set1_epi8(static_cast<char>(1u << hi)), 1);
  return _mm512_test_epi8_mask(v, bits);
}

template <WeightType kType>
inline __m512i unpack_k_pair(const std::uint8_t* block, int first) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(3);
  const int h = first / 4, j = first % 4;
  if constexpr (kType == WeightType::kQ2_K) {
    return _mm512_and_si512(shift_halves(both_halves(block + 16 + h * 32), 2 * j, 2 * j + 2), low2);
  } else if constexpr (kType == WeightType::kQ3_K) {
    const __m512i low = _mm512_and_si512(shift_halves(both_halves(block + 32 + h * 32), 2 * j, 2 * j + 2), low2);
    return _mm512_mask_add_epi8(low, test_bits(both_halves(block), first, first + 1), low, _mm512_set1_epi8(4));
  } else if constexpr (kType == WeightType::kQ4_K || kType == WeightType::kQ5_K) {
    const __m512i q = both_halves(block + (kType == WeightType::kQ4_K ? 16 : 48) + (first / 2) * 32);
    __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xffff0000u, q, 4), low4);
    if constexpr (kType == WeightType::kQ5_K) {
      u = _mm512_mask_add_epi8(u, test_bits(both_halves(block + 16), first, first + 1), u, _mm512_set1_epi8(16));
    }
    return u;
  } else {  // kQ6_K: slices j, j + 1 take ql bytes 0-31 and 32-63 of their half, the same nibble
    const __m512i ql = _mm512_loadu_si512(block + h * 64);
    const __m512i nib = _mm512_and_si512(_mm512_srli_epi16(ql, 2 * j), low4);  // j is 0 or 2: nibble 0 or 1
    const __m512i top = _mm512_and_si512(shift_halves(both_halves(block + 128 + h * 32), 2 * j, 2 * j + 2), low2);
    return _mm512_or_si512(nib, _mm512_slli_epi16(top, 4));
  }
}

// Two consecutive 32-weight blocks (Q4_0/Q4_1/Q5_0/Q5_1): nibbles as [lo0 hi0 lo1 hi1] per 128 bits,
// and for Q5 the two 32-bit qh words are exactly the 64-byte mask of the fifth bits.
template <WeightType kType>
inline __m512i unpack_block_pair(const std::uint8_t* block) {
  constexpr std::size_t kBytes = block_bytes<kType>();
  constexpr int kQs = kType == WeightType::kQ4_0 ? 2 : kType == WeightType::kQ4_1 ? 4 : kType == WeightType::kQ5_0 ? 6 : 8;
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kQs));
  const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kBytes + kQs));
  const __m512i pair = _mm512_castsi256_si512(_mm256_set_m128i(q1, q0));
  const __m512i spread = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), pair);
  __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(spread, 0xff00ff00u, spread, 4), _mm512_set1_epi8(0x0f));
  if constexpr (kType == WeightType::kQ5_0 || kType == WeightType::kQ5_1) {
    constexpr int kQh = kQs - 4;
    const std::uint64_t bits = u32_at(block + kQh) | static_cast<std::uint64_t>(u32_at(block + kBytes + kQh)) << 32;
    u = _mm512_mask_add_epi8(u, _cvtu64_mask64(bits), u, _mm512_set1_epi8(16));
  }
  return u;
}

// This level's primitives for matmul_tiles.h: two 32-weight slices per 512-bit register.
struct Ops {
  using F = __m512;
  using I = __m512i;
  static constexpr int kSlices = 2;
  // One token: 8 rows per tile. Against 4, the median decode step of all 8 issue-14 models was 2-10%
  // faster (A/B alternating steps in one process, BENCHMARKS.md); the 896-column rows of qwen2.5
  // gained most.
  static constexpr int kSingleTokenRows = 8;
  static constexpr int kBatchRows = 4;
  static constexpr int kWideTokens = 5;  // from here on float weights: 3 rows x 8 tokens
  // 24 accumulators, 3 weight and 1 activation register: 11 loads per 24 FMAs (2 x 8: 10 per 16).
  // f16 prefill at 512 tokens, 2 threads, Zen 4: 131-145 -> 149-159 GFLOP/s (0.66-0.85 -> 0.73-0.90 of
  // sgemm; `kernels_bench --types f16 --shapes 4864x896,896x4864,2048x2048,8192x2048 --threads 2`).
  static constexpr int kWideRows = 3;

  template <WeightType kType, int R, int T>
  static void float_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x, float* y,
                         std::int64_t y_stride, bool prefetch) {
    avx512::float_tile<kType, R, T>(row0, row_bytes, cols, x, y, y_stride, prefetch);
  }
  template <int R, int T>
  static void q8_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const float* x_scales,
                      const std::int8_t* x_values, float* y, std::int64_t y_stride, bool prefetch) {
    avx512::q8_tile<R, T>(row0, row_bytes, cols, x_scales, x_values, y, y_stride, prefetch);
  }
  template <WeightType kType>
  static void dequantize_float_row(const std::uint8_t* row, std::int64_t cols, float* out) {
    avx512::dequantize_float_row<kType>(row, cols, out);
  }
  static void dequantize_q8_0_row(const std::uint8_t* row, std::int64_t cols, float* out) {
    avx512::dequantize_q8_0_row(row, cols, out);
  }

  static F zero() { return _mm512_setzero_ps(); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static float reduce(F v) { return _mm512_reduce_add_ps(v); }
  static I join(const __m256i* slices) { return _mm512_inserti64x4(_mm512_castsi256_si512(slices[0]), slices[1], 1); }
  static I join_partial(const __m256i* slices, int) { return _mm512_zextsi256_si512(slices[0]); }
  static I load_x(const std::int8_t* x) { return _mm512_loadu_si512(x); }
  static I load_x_partial(const std::int8_t* x, int) {
    return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  }
  static F load_lanes(const float* p) { return _mm512_loadu_ps(p); }
  static F load_lanes_partial(const float* p, int) { return _mm512_maskz_loadu_ps(0x00ff, p); }
  // VNNI: u unsigned times x signed, four bytes per int32 lane, no intermediate saturation.
  static F dot(I u, I x) { return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x)); }
  static F per_slice(const float* v, int n) {
    const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128 two = n == 2 ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v))) : _mm_load_ss(v);
    return _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(two));
  }
  using Groups = __m512;
  static Groups load_groups(const float* g) { return _mm512_loadu_ps(g); }
  static Groups groups(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }
  // Lane l of slices `slice` and `slice` + 1 (4 weights per lane) takes group
  // (slice * 32 + l * 4) / kGroupElems.
  static F splat(float v) { return _mm512_set1_ps(v); }
  static F fmsub(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }
  static F fnmadd_groups(Groups a, Groups b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  template <WeightType kType>
  static I unpack_slices(const std::uint8_t* block, int first) { return unpack_k_pair<kType>(block, first); }
  template <WeightType kType>
  static I unpack_blocks(const std::uint8_t* block) { return unpack_block_pair<kType>(block); }
  template <WeightType kType>
  static F block_halves(const std::uint8_t* block, int offset) {
    std::uint16_t h0, h1;
    std::memcpy(&h0, block + offset, 2);
    std::memcpy(&h1, block + block_bytes<kType>() + offset, 2);
    const __m128 two = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | static_cast<std::uint32_t>(h1) << 16)));
    return pair_scales(two);
  }
  static F splat_lone(float v) { return _mm512_maskz_mov_ps(0x00ff, _mm512_set1_ps(v)); }
  static Groups mul_groups(Groups a, Groups b) { return _mm512_mul_ps(a, b); }
  template <int kGroupElems>
  static Groups dx_groups(const float* dx8) {
    const __m512 dx = _mm512_castps256_ps512(_mm256_loadu_ps(dx8));
    if constexpr (kGroupElems == 32) return dx;
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), dx);
  }
  template <int kGroupElems>
  static F expand(const Groups& g, int slice) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    constexpr int kLanesPerGroup = kGroupElems / 4;
    const __m512i group = _mm512_add_epi32(_mm512_set1_epi32(slice * 8 / kLanesPerGroup),
                                           _mm512_srli_epi32(lane, kLanesPerGroup == 4 ? 2 : 3));
    return _mm512_permutexvar_ps(group, g);
  }
};

// The interleaved kernels' dot product: per 32-bit lane (one row), start plus the sum over the n
// chunks u[k] (4 unsigned codes of the row) times the token's activations 4k..4k+3, broadcast.
// Exact in int32; two chains of n / 2 steps (the order of an integer sum does not matter).
template <int n>
inline __m512i vnni_dot(__m512i start, const __m512i* u, const std::int8_t* x) {
  __m512i even = start, odd = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < n; k += 2) {
    std::int32_t x0, x1;
    std::memcpy(&x0, x + k * 4, 4);
    std::memcpy(&x1, x + k * 4 + 4, 4);
    even = _mm512_dpbusd_epi32(even, u[k], _mm512_set1_epi32(x0));
    odd = _mm512_dpbusd_epi32(odd, u[k + 1], _mm512_set1_epi32(x1));
  }
  return _mm512_add_epi32(even, odd);
}

constexpr std::size_t kL1Bytes = 32 << 10;  // L1 data cache per core (Zen 4; Intel's are 32-48 KiB)

// Bytes [at, at + bytes) of each of T tokens' rows of quantized activations (cols apart), into L1.
template <int T>
inline void prefetch_activations(const std::int8_t* x, std::int64_t cols, std::int64_t at, int bytes) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(x + t * cols + at + off), _MM_HINT_T0);
  }
}

// kQ8_0x16 (interleaved16.h): one group of 16 rows, one row per 32-bit lane, against T tokens. Per block
// and token: two chains of four VNNI steps (4 weights of every row times the token's 4 activations,
// broadcast), the first started at -128 x the block's activation sum (the weights are stored
// + 128); their exact sum converted once and scaled by the 16 rows' d_w (one f16 load) times d_x.
// The T tokens share each block's 8 weight registers; each token's arithmetic is the same whatever
// T is, and the same as the scalar statement's.
template <int T>
void q8x16_tile(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                const std::int32_t* x_sums, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at) {
  const std::int64_t blocks = cols / kQ8_0BlockElems;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t u = 0; u < blocks / 2; ++u) {
    const std::uint8_t* unit = group + u * q8x16::kUnitBytes;
    if (prefetch_at != nullptr) prefetch_span(prefetch_at + u * q8x16::kUnitBytes, q8x16::kUnitBytes);
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      const std::int64_t b = 2 * u + j;
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + j * 32)));
      const std::uint8_t* wb = unit + q8x16::kScalesBytes + j * q8x16::kBlockWeightBytes;
      __m512i w[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(wb + k * 64);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const std::int8_t* xb = x_values + t * cols + b * kQ8_0BlockElems;
        const __m512i dot = vnni_dot<8>(_mm512_set1_epi32(-128 * x_sums[t * blocks + b]), w, xb);
        const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x_scales[t * blocks + b]));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// How much further than its prefetch into L1 a one-token Q4_K tile (where it prefetches into L1)
// also prefetches into L2: 3 KiB (4 KiB ahead of the read). llama-3.2-1b q4_k_m, bench-engine,
// decode over the paired read, means of two rounds of back-to-back pairs without and with it (3
// and 4 pairs): one thread 86.9 -> 88.3 % and 85.8 -> 86.2 %, two threads 86.4 -> 88.0 % and
// 84.5 -> 86.1 %, higher with it in every pair; 2 KiB further read between the two, 4 and 6 KiB
// no better than 3 (BENCHMARKS.md, issue 14). The one-token Q5_K tile was not tried with it.
inline constexpr std::size_t kQ4kTokenFarBytes = 3 << 10;

// kQ4_Kx16 and kQ5_Kx16 (interleaved16.h; kFifth: Q5_K): one group of 16 rows against T tokens'
// activations quantized per 256, a super-block at a time. Each half of a pair of sub-blocks is one
// masking of the pair's 8 chunks of codes. Q4_K: the low nibbles (sub-block 2p) as they are, the
// high ones (2p + 1) in place, so times 16, which the low half's scales (times 16) match. Q5_K: the
// high nibbles shifted down, and 16 ORed into the bytes its fifth-bit masks name (a zero-masked
// move and one ternary-logic step per chunk and half). Per sub-block and token, 8 VNNI steps give
// the exact integer sum, scaled by the rows' 6-bit scales in int32; the mins' share is one 16-bit
// multiply-add per pair (the two mins against the two activation sums). Per super-block and
// token, two conversions and two multiply-adds.
template <bool kFifth, int T>
void q4kx16_tile(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                 const std::int16_t* x_sums32, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at,
                 bool prefetch_x, bool into_l1) {
  namespace q4k = q8x16::q4k;
  constexpr std::size_t kSuperBlockBytes = q4k::super_block_bytes(kFifth);
  const std::int64_t supers = cols / 256;
  // Q4_K's sums are 16 times the statement's (its high nibbles in place): d d_x / 16, exact.
  const __m512 unscale = _mm512_set1_ps(kFifth ? 1.0f : 1.0f / 16.0f);
  const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8(static_cast<char>(0xf0)), sixteen = _mm512_set1_epi8(16);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* sb = group + s * kSuperBlockBytes;
    if (prefetch_x && s + 1 < supers) prefetch_activations<T>(x_values, cols, (s + 1) * 256, 256);
    __m512i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int p = 0; p < 4; ++p) {
      // A quarter of the super-block ahead per pair: a few lines at a time, not a burst. At one
      // token Q5_K (and Q4_K but on AMD) prefetches into L1 instead, spread over the pair's chunks
      // (two lines' worth each; the addresses 45 or 37 bytes apart miss no line); see
      // interleaved_prefetch_ahead. Q4_K then also prefetches the same lines kQ4kTokenFarBytes
      // further on into L2.
      const std::uint8_t* ahead = prefetch_at == nullptr ? nullptr : prefetch_at + s * kSuperBlockBytes + p * (kSuperBlockBytes / 4);
      if (ahead != nullptr && !into_l1) prefetch_span(ahead, kSuperBlockBytes / 4);
      // Each chunk of codes is loaded once for both sub-blocks of the pair.
      __m512i lo[8], hi[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        if (ahead != nullptr && into_l1) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + k * (kSuperBlockBytes / 32)), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(ahead + k * (kSuperBlockBytes / 32) + kSuperBlockBytes / 64), _MM_HINT_T0);
          if constexpr (!kFifth) {
            const std::uint8_t* far = ahead + kQ4kTokenFarBytes + k * (kSuperBlockBytes / 32);
            _mm_prefetch(reinterpret_cast<const char*>(far), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<const char*>(far + kSuperBlockBytes / 64), _MM_HINT_T1);
          }
        }
        const __m512i v = _mm512_loadu_si512(sb + q4k::codes_at(kFifth, p, k));
        if constexpr (kFifth) {
          std::uint64_t bits_lo, bits_hi;
          std::memcpy(&bits_lo, sb + q4k::mask_at(2 * p, k), 8);
          std::memcpy(&bits_hi, sb + q4k::mask_at(2 * p + 1, k), 8);
          // Through a general register: loaded straight into a mask register (kmovq k, m64),
          // the masks of weights not yet in cache cost Zen 4 half its read (one thread,
          // 8192x2048: 14 against 26 GB/s).
          asm("" : "+r"(bits_lo), "+r"(bits_hi));
          // (v & 0x0f) | 16 where the mask says, and the same of v >> 4.
          lo[k] = _mm512_ternarylogic_epi32(v, low4, _mm512_maskz_mov_epi8(_cvtu64_mask64(bits_lo), sixteen), 0xea);
          hi[k] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), low4, _mm512_maskz_mov_epi8(_cvtu64_mask64(bits_hi), sixteen), 0xea);
        } else {
          lo[k] = _mm512_and_si512(v, low4);
          hi[k] = _mm512_and_si512(v, high4);
        }
      }
      const auto scales = [&](int j) {
        return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + q4k::kScales + 16 * j)));
      };
      const __m512i sc_lo = kFifth ? scales(2 * p) : _mm512_slli_epi32(scales(2 * p), 4), sc_hi = scales(2 * p + 1);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const std::int8_t* xb = x_values + t * cols + s * 256 + p * 64;
        const __m512i dot_lo = vnni_dot<8>(_mm512_setzero_si512(), lo, xb);
        const __m512i dot_hi = vnni_dot<8>(_mm512_setzero_si512(), hi, xb + 32);
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(dot_lo, sc_lo), _mm512_mullo_epi32(dot_hi, sc_hi)));
      }
    }
    __m512i mins[4];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + q4k::kMins + 32 * p)));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 32)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const std::int16_t* xs = x_sums32 + t * (cols / 32) + s * 8;
      __m512i imn = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        std::int32_t two;
        std::memcpy(&two, xs + 2 * p, 4);
        imn = _mm512_dpwssd_epi32(imn, mins[p], _mm512_set1_epi32(two));
      }
      const __m512 dx = _mm512_set1_ps(x_scales[t * supers + s]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(_mm512_mul_ps(d, dx), unscale), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imn), _mm512_mul_ps(dmin, dx), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// kQ6_Kx16's 6-bit codes u of slice 4h + j (j = 0..3) for 16 rows x 4 weights: the low nibbles of
// its ql chunk l (j < 2) or the high ones (j >= 2), and bits 2j, 2j+1 of the half's qh chunk q
// moved to bits 4-5.
__attribute__((always_inline)) inline __m512i q6k_codes(__m512i l, __m512i q, int j) {
  const __m512i nib = _mm512_and_si512(j < 2 ? l : _mm512_srli_epi16(l, 4), _mm512_set1_epi8(0x0f));
  const int shift = 2 * j - 4;
  const __m512i top = shift < 0 ? _mm512_slli_epi16(q, static_cast<unsigned>(-shift)) : _mm512_srli_epi16(q, static_cast<unsigned>(shift));
  return _mm512_ternarylogic_epi32(top, _mm512_set1_epi8(0x30), nib, 0xea);  // (top & 0x30) | nib
}

// The int8 scales of 16-weight group q (0-15) of a kQ6_Kx16 super-block's 16 rows, as int32 lanes.
__attribute__((always_inline)) inline __m512i q6k_scales(const std::uint8_t* sb, int q) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + q8x16::q6k::kScales + 16 * q)));
}

// kQ3_Kx16's 3-bit codes u of slice 4h + j (j = 0..3) for 16 rows x 4 weights: bits 2j, 2j+1 of
// its qs chunk l, and 4 where the slice's hmask mask says.
__attribute__((always_inline)) inline __m512i q3k_codes(__m512i l, std::uint64_t hmask, int j) {
  // Through a general register: see q4kx16_tile.
  asm("" : "+r"(hmask));
  const __m512i high = _mm512_maskz_mov_epi8(_cvtu64_mask64(hmask), _mm512_set1_epi8(4));
  return _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, static_cast<unsigned>(2 * j)), _mm512_set1_epi8(3), high, 0xea);
}

// kQ6_Kx16 and kQ3_Kx16 (interleaved16.h; kQ3: Q3_K): one group of 16 rows against T tokens'
// activations quantized per 256, a super-block at a time. Q6_K: per half and pair of slices
// sharing their low bytes, 8 chunks of low nibbles and the half's 8 chunks of top bits give 8
// registers of 6-bit codes per slice. Q3_K: per slice, its two bits of the half's 8 qs chunks and
// its 8 hmask masks give 8 registers of 3-bit codes. Per 16 weights and token, 4 VNNI steps from
// -offset (32, Q3_K 4) x the 16 activations' sum give the exact sum of (u - offset) x, scaled by
// the rows' int8 scales in int32; per super-block and token, one conversion and one multiply-add.
template <bool kQ3, int T>
void q6kx16_tile(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                 const std::int32_t* x_sums16, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at) {
  namespace q6k = q8x16::q6k;
  namespace q3k = q8x16::q3k;
  constexpr std::size_t kSuperBlockBytes = kQ3 ? q3k::kSuperBlockBytes : q6k::kSuperBlockBytes;
  constexpr int kOffset = kQ3 ? 4 : 32;
  static_assert(q3k::kScales == q6k::kScales);
  const std::int64_t supers = cols / 256;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* sb = group + s * kSuperBlockBytes;
    __m512i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int slice = 0; slice < 8; ++slice) {
      const int h = slice / 4, j = slice % 4;
      // The slice's eighth of the super-block ahead, one line per step of k rather than all seven at
      // the slice's start: kernels_bench, one thread, 8192x2048 and 2048x8192, 0.85-0.91 of the
      // copies' read against 0.76-0.87; llama-3.2-1b q6_k decode on one thread 0.83-0.85 of the
      // paired read against 0.82-0.84 (BENCHMARKS.md, issue 14).
      const std::uint8_t* ahead = prefetch_at == nullptr ? nullptr : prefetch_at + s * kSuperBlockBytes + slice * (kSuperBlockBytes / 8);
      __m512i u[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        if (ahead != nullptr && k * 64 < static_cast<int>(kSuperBlockBytes / 8)) prefetch_span(ahead + k * 64, 64);
        if constexpr (kQ3) {
          std::uint64_t hmask;
          std::memcpy(&hmask, sb + q3k::mask_at(slice, k), 8);
          u[k] = q3k_codes(_mm512_loadu_si512(sb + q3k::low_at(h, k)), hmask, j);
        } else {
          u[k] = q6k_codes(_mm512_loadu_si512(sb + q6k::low_at(h, j % 2, k)), _mm512_loadu_si512(sb + q6k::high_at(h, k)), j);
        }
      }
      const __m512i scale_a = q6k_scales(sb, 2 * slice), scale_b = q6k_scales(sb, 2 * slice + 1);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const std::int8_t* xb = x_values + t * cols + s * 256 + slice * 32;
        const std::int32_t* sums = x_sums16 + t * (cols / 16) + s * 16 + 2 * slice;
        const __m512i first = vnni_dot<4>(_mm512_set1_epi32(-kOffset * sums[0]), u, xb);
        const __m512i second = vnni_dot<4>(_mm512_set1_epi32(-kOffset * sums[1]), u + 4, xb + 16);
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(first, scale_a), _mm512_mullo_epi32(second, scale_b)));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, _mm512_set1_ps(x_scales[t * supers + s])), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// kQ6_Kx16 against one token (decode): the same sums as q6kx16_tile<1>, read in the layout's order,
// each 64-byte chunk once. Per half and step k, ql (h, 0, k), ql (h, 1, k) and qh (h, k) give the
// codes of all four slices' weights 4k..4k+3, one VNNI step each into that slice's sum, which
// starts at -32 x its 16 activations' sum; after steps 0-3 and 4-7 (the two 16-weight groups) the
// slices' sums are scaled by their int8 scales. Integer sums are exact, so the result is
// q6kx16_tile's to the bit.
//
// The prefetch is into L1 (T0), a 212-byte step's four lines per step, where every other tile
// prefetches into L2 (T1); its lead depends on the core (interleaved_prefetch_ahead). One thread on
// Zen 4, of a read of the same copies: into L1 4 KiB ahead 0.85-0.97; into L2 16 KiB ahead (the
// slice tile's) 0.56-0.81; none 0.76-0.88. A synthetic stream of this
// density (`kernels_bench --prefetch-sweep`, 46-68 GB/s in L1) reads 0.70-0.84 with a 4-16 KiB lead
// into L2 and 0.97-1.06 with one into L1 (BENCHMARKS.md, issue 14).
void q6kx16_token(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                  const std::int32_t* x_sums16, float* y, const std::uint8_t* prefetch_at) {
  namespace q6k = q8x16::q6k;
  constexpr std::size_t kStepBytes = q6k::kSuperBlockBytes / 16;  // 212: 16 steps a super-block
  const std::int64_t supers = cols / 256;
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* sb = group + s * q6k::kSuperBlockBytes;
    const std::int8_t* xs = x_values + s * 256;
    __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int group16 = 0; group16 < 2; ++group16) {
        __m512i part[4];  // slice 4h + j's weights 16 group16 .. + 15
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) part[j] = _mm512_set1_epi32(-32 * x_sums16[s * 16 + 2 * (4 * h + j) + group16]);
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          const int k = 4 * group16 + kk;
          if (prefetch_at != nullptr) {
            const std::uint8_t* ahead = prefetch_at + s * q6k::kSuperBlockBytes + (8 * h + k) * kStepBytes;
#pragma GCC unroll 4
            for (int line = 0; line < 4; ++line) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), _MM_HINT_T0);
          }
          const __m512i l0 = _mm512_loadu_si512(sb + q6k::low_at(h, 0, k)), l1 = _mm512_loadu_si512(sb + q6k::low_at(h, 1, k));
          const __m512i q = _mm512_loadu_si512(sb + q6k::high_at(h, k));
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) {  // slice 4h + j: ql chunk l0 for j = 0, 2, l1 for j = 1, 3
            std::int32_t x4;
            std::memcpy(&x4, xs + (4 * h + j) * 32 + 4 * k, 4);
            part[j] = _mm512_dpbusd_epi32(part[j], q6k_codes(j % 2 == 0 ? l0 : l1, q, j), _mm512_set1_epi32(x4));
          }
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(part[j], q6k_scales(sb, 2 * (4 * h + j) + group16)));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_set1_ps(x_scales[s])), acc);
  }
  _mm512_storeu_ps(y, acc);
}

// kQ3_Kx16 against one token (decode): the same sums as q6kx16_tile<true, 1>, read in the layout's
// order, each chunk and mask once. Per step k, the two qs chunks and the eight slices' hmask masks
// give the codes of all eight slices' weights 4k..4k+3, one VNNI step each into that slice's sum,
// which starts at -4 x its 16 activations' sum; after steps 0-3 and 4-7 (the two 16-weight groups)
// the slices' sums are scaled by their int8 scales.
void q3kx16_token(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                  const std::int32_t* x_sums16, float* y, const std::uint8_t* prefetch_at) {
  namespace q3k = q8x16::q3k;
  const std::int64_t supers = cols / 256;
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* sb = group + s * q3k::kSuperBlockBytes;
    const std::int8_t* xs = x_values + s * 256;
    __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int group16 = 0; group16 < 2; ++group16) {
      __m512i part[8];  // slice sl's weights 16 group16 .. + 15
#pragma GCC unroll 8
      for (int sl = 0; sl < 8; ++sl) part[sl] = _mm512_set1_epi32(-4 * x_sums16[s * 16 + 2 * sl + group16]);
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        const int k = 4 * group16 + kk;
        if (prefetch_at != nullptr) {
          const std::uint8_t* ahead = prefetch_at + s * q3k::kSuperBlockBytes + k * q3k::kStepBytes;
#pragma GCC unroll 3
          for (int line = 0; line < 3; ++line) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), _MM_HINT_T0);
        }
        const __m512i l0 = _mm512_loadu_si512(sb + q3k::low_at(0, k)), l1 = _mm512_loadu_si512(sb + q3k::low_at(1, k));
#pragma GCC unroll 8
        for (int sl = 0; sl < 8; ++sl) {
          std::uint64_t hmask;
          std::memcpy(&hmask, sb + q3k::mask_at(sl, k), 8);
          std::int32_t x4;
          std::memcpy(&x4, xs + sl * 32 + 4 * k, 4);
          part[sl] = _mm512_dpbusd_epi32(part[sl], q3k_codes(sl < 4 ? l0 : l1, hmask, sl % 4), _mm512_set1_epi32(x4));
        }
      }
#pragma GCC unroll 8
      for (int sl = 0; sl < 8; ++sl) isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(part[sl], q6k_scales(sb, 2 * sl + group16)));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_set1_ps(x_scales[s])), acc);
  }
  _mm512_storeu_ps(y, acc);
}

// kQ2_Kx16's scales and mins of slice j (its two groups of 16 weights) for 16 rows: the scale
// bytes widened to 16 bits, lane l holding (byte of group 2j, byte of group 2j + 1).
struct Q2kSliceScales {
  __m512i first, second;  // int32 lanes: the scales of groups 2j and 2j + 1
  __m512i mins;           // int16 pairs: the two mins
};
__attribute__((always_inline)) inline Q2kSliceScales q2k_slice_scales(const std::uint8_t* sb, int j) {
  const __m512i bytes = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + q8x16::q2k::scale_at(2 * j, 0))));
  const __m512i low4 = _mm512_set1_epi32(15);
  return {_mm512_and_si512(bytes, low4), _mm512_and_si512(_mm512_srli_epi32(bytes, 16), low4), _mm512_srli_epi16(bytes, 4)};
}

// Two groups' activation sums (each of 16 int8, so within int16) as the int16 pair a 16-bit
// multiply-add takes.
inline std::int32_t int16_pair(std::int32_t first, std::int32_t second) {
  return static_cast<std::int32_t>(static_cast<std::uint16_t>(first) | static_cast<std::uint32_t>(static_cast<std::uint16_t>(second)) << 16);
}

// kQ2_Kx16 (interleaved16.h): one group of 16 rows against T tokens' activations quantized per
// 256, a super-block at a time. Per slice, its two bits of the half's 8 qs chunks give 8 registers
// of codes; per 16 weights and token, 4 VNNI steps give the exact sum of u x, scaled by the rows'
// scales in int32; the mins' share is one 16-bit multiply-add per slice (its two mins against its
// two halves' activation sums). Per super-block and token, two conversions and two multiply-adds.
template <int T>
void q2kx16_tile(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                 const std::int32_t* x_sums16, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at) {
  namespace q2k = q8x16::q2k;
  const std::int64_t supers = cols / 256;
  const __m512i low2 = _mm512_set1_epi8(3);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* sb = group + s * q2k::kSuperBlockBytes;
    __m512i isum[T], imn[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = imn[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int slice = 0; slice < 8; ++slice) {
      const int h = slice / 4, j = slice % 4;
      // The slice's eighth of the super-block ahead (168 bytes: three lines).
      if (prefetch_at != nullptr) prefetch_span(prefetch_at + s * q2k::kSuperBlockBytes + slice * (q2k::kSuperBlockBytes / 8), q2k::kSuperBlockBytes / 8);
      __m512i u[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) u[k] = _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(sb + q2k::low_at(h, k)), static_cast<unsigned>(2 * j)), low2);
      const Q2kSliceScales sc = q2k_slice_scales(sb, slice);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const std::int8_t* xb = x_values + t * cols + s * 256 + slice * 32;
        const std::int32_t* sums = x_sums16 + t * (cols / 16) + s * 16 + 2 * slice;
        const __m512i first = vnni_dot<4>(_mm512_setzero_si512(), u, xb);
        const __m512i second = vnni_dot<4>(_mm512_setzero_si512(), u + 4, xb + 16);
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(first, sc.first), _mm512_mullo_epi32(second, sc.second)));
        imn[t] = _mm512_dpwssd_epi32(imn[t], sc.mins, _mm512_set1_epi32(int16_pair(sums[0], sums[1])));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 32)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(x_scales[t * supers + s]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imn[t]), _mm512_mul_ps(dmin, dx), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// kQ2_Kx16 against one token (decode): the same sums as q2kx16_tile<1>, read in the layout's order,
// each chunk once (as q3kx16_token), prefetching into L1.
void q2kx16_token(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                  const std::int32_t* x_sums16, float* y, const std::uint8_t* prefetch_at) {
  namespace q2k = q8x16::q2k;
  const std::int64_t supers = cols / 256;
  const __m512i low2 = _mm512_set1_epi8(3);
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* sb = group + s * q2k::kSuperBlockBytes;
    const std::int8_t* xs = x_values + s * 256;
    const std::int32_t* sums = x_sums16 + s * 16;
    __m512i isum = _mm512_setzero_si512(), imn = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int group16 = 0; group16 < 2; ++group16) {
      __m512i part[8];  // slice sl's weights 16 group16 .. + 15
#pragma GCC unroll 8
      for (int sl = 0; sl < 8; ++sl) part[sl] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        const int k = 4 * group16 + kk;
        if (prefetch_at != nullptr) {
          const std::uint8_t* ahead = prefetch_at + s * q2k::kSuperBlockBytes + k * q2k::kStepBytes;
          _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(ahead + 64), _MM_HINT_T0);
        }
        const __m512i l0 = _mm512_loadu_si512(sb + q2k::low_at(0, k)), l1 = _mm512_loadu_si512(sb + q2k::low_at(1, k));
#pragma GCC unroll 8
        for (int sl = 0; sl < 8; ++sl) {
          std::int32_t x4;
          std::memcpy(&x4, xs + sl * 32 + 4 * k, 4);
          const __m512i u = _mm512_and_si512(_mm512_srli_epi16(sl < 4 ? l0 : l1, static_cast<unsigned>(2 * (sl % 4))), low2);
          part[sl] = _mm512_dpbusd_epi32(part[sl], u, _mm512_set1_epi32(x4));
        }
      }
#pragma GCC unroll 8
      for (int sl = 0; sl < 8; ++sl) {
        const Q2kSliceScales sc = q2k_slice_scales(sb, sl);
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(part[sl], group16 == 0 ? sc.first : sc.second));
        if (group16 == 1) imn = _mm512_dpwssd_epi32(imn, sc.mins, _mm512_set1_epi32(int16_pair(sums[2 * sl], sums[2 * sl + 1])));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 32)));
    const __m512 dx = _mm512_set1_ps(x_scales[s]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), acc);
    acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imn), _mm512_mul_ps(dmin, dx), acc);
  }
  _mm512_storeu_ps(y, acc);
}

// How much further than its prefetch into L1 a one-token Q4_0, Q5_0, Q4_1 or Q5_1 tile (where it
// prefetches into L1: every core but AMD's) also prefetches the same unit into L2: 2 KiB, so 3-3.5
// KiB ahead of the read, as kQ4kTokenFarBytes does for Q4_K. Sapphire Rapids, qwen2.5-0.5b,
// bench-engine --step-profile, back-to-back pairs without and with it, decode over the paired read:
// q4_k_m (Q5_0 projections) two threads 78.7-84.9 -> 83.1-85.7 % (higher in 7 of 8 pairs, mean
// step 17.4-17.8 -> 15.4-16.6 ms), one thread 86.4-87.9 -> 89.3-89.8 % (every pair); q5_k_m (Q5_1)
// 81.0-81.9 -> 84.6-89.0 %; q4_0 76.9-81.8 -> 83.5-85.3 %, mean step 15.2-16.3 -> 14.0-15.5 ms.
// 3 KiB further read between none and 2 KiB (BENCHMARKS.md, issue 14).
inline constexpr std::size_t kBlock32TokenFarBytes = 2 << 10;

// kQ4_0x16, kQ5_0x16, kQ4_1x16, kQ5_1x16 (interleaved16.h): one group of 16 rows against T tokens,
// two blocks per unit. Per block, 4 chunks of codes give 8 registers (low nibbles: weights 0-15,
// high: 16-31); Q5_0 and Q5_1 add 16 where their stored 64-bit masks say. Per token, 8 VNNI steps
// from -offset x the block's activation sum give the exact sum of (u - offset) x (Q4_1 and Q5_1:
// offset 0), scaled by d d_x; Q4_1 and Q5_1 then add m times the block's activation sum.
template <WeightType kType, int T>
void block32x16_tile(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                     const std::int32_t* x_sums, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at,
                     bool into_l1) {
  namespace b32 = q8x16::b32;
  constexpr b32::Form kForm = b32::form_of(kType);
  constexpr std::size_t kUnit = b32::unit_bytes(kForm), kCodes = b32::codes_at(kForm), kMasks = b32::masks_at(kForm);
  constexpr int kOffset = b32::code_offset(kForm);
  const std::int64_t blocks = cols / kQ8_0BlockElems;
  const __m512i low4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t un = 0; un < blocks / 2; ++un) {
    const std::uint8_t* unit = group + un * kUnit;
    if (prefetch_at != nullptr) prefetch_span(prefetch_at + un * kUnit, kUnit, into_l1);
    if (prefetch_at != nullptr && into_l1) prefetch_span(prefetch_at + un * kUnit + kBlock32TokenFarBytes, kUnit);
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      const std::int64_t b = 2 * un + j;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 32 * j)));
      const std::uint8_t* codes = unit + kCodes + 256 * j;
      __m512i u[8];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i c = _mm512_loadu_si512(codes + 64 * k);
        u[k] = _mm512_and_si512(c, low4);
        u[k + 4] = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
      }
      if constexpr (kForm.fifth) {
#pragma GCC unroll 8
        for (int m = 0; m < 8; ++m) {
          std::uint64_t bits;
          std::memcpy(&bits, unit + kMasks + 64 * j + 8 * m, 8);
          u[m] = _mm512_mask_add_epi8(u[m], _cvtu64_mask64(bits), u[m], sixteen);
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const std::int8_t* xb = x_values + t * cols + b * kQ8_0BlockElems;
        const std::int32_t sum = x_sums[t * blocks + b];
        // u[0..3] are weights 0-15 and u[4..7] weights 16-31: chunk k pairs with activations 4k..4k+3.
        const __m512i dot = vnni_dot<8>(_mm512_set1_epi32(-kOffset * sum), u, xb);
        const float dx = x_scales[t * blocks + b];
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[t]);
        if constexpr (kForm.min) {
          const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + b32::kMins + 32 * j)));
          acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(dx * static_cast<float>(sum)), acc[t]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// kMxfp4x16 (interleaved16.h): one group of 16 rows against T tokens, a block at a time. The codes
// are looked up (vpshufb) as v + 12 (0-24, unsigned for VNNI: the doubled E2M1 value plus 12), 4
// chunks giving 8 registers as block32x16_tile's; per token, 8 VNNI steps from -12 x the block's
// activation sum give the exact sum of v x_q, scaled by the 16 rows' half scales (from their E8M0
// bytes in integer arithmetic, exact, denormals included) times d_x.
template <int T>
void mxfp4x16_tile(const std::uint8_t* group, std::int64_t cols, const float* x_scales, const std::int8_t* x_values,
                   const std::int32_t* x_sums, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at) {
  namespace mx = q8x16::mxfp4;
  const std::int64_t blocks = cols / kMxfp4BlockElems;
  alignas(16) std::int8_t shifted[16];
  for (int i = 0; i < 16; ++i) shifted[i] = static_cast<std::int8_t>(kMxfp4Values[i] + 12);
  const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(shifted)));
  const __m512i low4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
  const __m512i denormal_base = _mm512_set1_epi32(0x00200000);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t un = b / mx::kUnitBlocks;
    const std::size_t j = static_cast<std::size_t>(b % mx::kUnitBlocks);
    const std::uint8_t* unit = group + static_cast<std::size_t>(un) * mx::kUnitBytes;
    if (prefetch_at != nullptr && j == 0) prefetch_span(prefetch_at + static_cast<std::size_t>(un) * mx::kUnitBytes, mx::kUnitBytes);
    // 2^(e - 128): the exponent field e - 1 for e >= 2, else the denormal with bit 21 + e (mxfp4_half_scale).
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + 16 * j)));
    const __m512i bits = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(e, two), _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23),
                                                 _mm512_sllv_epi32(denormal_base, e));
    const __m512 sw = _mm512_castsi512_ps(bits);
    const std::uint8_t* codes = unit + mx::kCodes + mx::kBlockCodes * j;
    __m512i u[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i c = _mm512_loadu_si512(codes + 64 * k);
      u[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(c, low4));
      u[k + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(c, 4), low4));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const std::int8_t* xb = x_values + t * cols + b * kMxfp4BlockElems;
      // u[0..3] are weights 0-15 and u[4..7] weights 16-31: chunk k pairs with activations 4k..4k+3.
      const __m512i dot = vnni_dot<8>(_mm512_set1_epi32(-12 * x_sums[t * blocks + b]), u, xb);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sw, _mm512_set1_ps(x_scales[t * blocks + b])), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// How far ahead of the bytes being read the interleaved tiles prefetch (into L2), by type and by
// the tokens of the call. Measured with kernels_bench and a temporary sweep of these leads in one
// process (BENCHMARKS.md, issue 14); ratios are decode's read rate over a read of the same pages:
// - One token, Q8_0, Q4_K, Q4_0, Q5_0 (each 16-row group read front to back, which the hardware
//   prefetcher follows): 1 KiB beats 4 KiB where both cores stream at once (2 threads, 61-75 GB/s
//   from their pages, 8192x2048: Q4_0, Q4_K, Q5_0 0.89-1.03 against 0.62-0.74; Q8_0 0.91-1.16
//   against 0.88-0.96), about equal on one thread or at 33-40 GB/s; 3 and 6 KiB are worse than either.
// - Several tokens (each byte feeds 2-8 times the arithmetic): 1 KiB halves batch 8 (Q8_0 34 ->
//   17 GB/s, Q4_K 24 -> 12), 8-16 KiB is best (Q8_0 at 8 tokens 43 GB/s against 38 at 4 KiB).
// - Q6_K, several tokens (q6kx16_tile reads a slice at a time, ql chunks twice and qh chunks four
//   times, the most arithmetic per byte): 16 KiB; at 4 KiB one thread read 15-17 GB/s where its
//   pages gave 23-36, at 16 KiB 23-31 (1 KiB: 9).
// - Q6_K, one token (q6kx16_token, into L1): by core, the one lead here that two machines disagree
//   on. AMD Zen 4, one thread, of the copies' read: 4 KiB 0.85-0.97, 3 and 6 KiB 0.84-0.94, 1-2 KiB
//   0.82-0.89, 16 KiB 0.79-0.88. Intel Sapphire Rapids (a read of 14 GB/s per core against Zen 4's
//   30): 1.5-2 KiB 0.90-0.97, 1 KiB 0.86-0.93, 4 KiB 0.69-0.85 (128256x2048, 8192x2048, 2048x8192;
//   two threads 2 KiB 0.78-0.99, 4 KiB 0.75-0.91); into L2 (T1) at any lead 0.81-0.87, none
//   0.79-0.85. Likely why: four lines a step at 4 KiB ahead keep ~64 misses in flight, where a
//   Golden Cove L1 has 16 fill buffers, so the demand loads wait behind prefetches. 2 KiB on every
//   core but AMD's.
// - Q3_K, one token (q3kx16_token, into L1, a 192-byte step's three lines per step): 1 KiB, not
//   swept; the kernel computes at 26 GB/s in cache and reads 21-23 from memory on one thread.
// - Q4_K, Q4_0, Q4_1, Q5_0, Q5_1, one token: into L2 at 1 KiB on AMD (above); into L1 elsewhere,
//   Q5_0 and Q5_1 at 1.5 KiB, the others at 1 KiB. Sapphire Rapids, GB/s (one thread; two):
//   Q5_0 at 151936x896 12.0-12.9 -> 13.2-13.9 (26.1-26.8 -> 27.0-28.7), 4864x896 13.6-14.2 ->
//   14.2-15.5; Q5_1 alike; Q4_K at 8192x2048 14.8-15.1 -> 15.4, 128256x2048 13.8-14.3 ->
//   14.7-14.9 (27.3 -> 26.4-28.8); Q4_0 and Q4_1 +0-5 %; Q5_0 at 2 KiB lost at two threads
//   (Q5_1 151936x896: 22.7). Not tried on Zen 4, where into L1 capped a core's read (f16: see
//   matmul_tiles.h), so AMD keeps the measured L2 lead.
// - Q5_K, one token (into L1, spread over each chunk of codes): 1.5 KiB. One thread, 8192x2048,
//   2048x8192, 128256x2048, of the copies' read: 1.5 KiB 0.79-0.91, 1 KiB 0.79-0.86, 2-3 KiB
//   0.61-0.87; into L1 a quarter super-block at once per pair, 3-4 KiB: 0.66-0.80; into L2 as
//   Q4_K, 1-2 KiB: 0.41-0.51.
std::size_t q6k_token_prefetch_ahead() { return amd_core() ? std::size_t{4} << 10 : std::size_t{2} << 10; }

// Whether a one-token Q4_K, Q5_K, Q4_0, Q5_0, Q4_1 or Q5_1 tile prefetches into L1 (the Q6_K, Q3_K
// and Q2_K token kernels always do; Q8_0 into L2 everywhere: into L1 it read the same).
template <WeightType kType>
bool interleaved_token_into_l1() {
  if constexpr (kType == WeightType::kQ5_Kx16) return true;
  if constexpr (kType == WeightType::kQ8_0x16) return false;
  return !amd_core();
}

template <WeightType kType>
std::size_t interleaved_prefetch_ahead(int n_tokens) {
  if (n_tokens > 1) return std::size_t{16} << 10;
  if constexpr (kType == WeightType::kQ6_Kx16) return q6k_token_prefetch_ahead();
  if constexpr (kType == WeightType::kQ5_Kx16) return 1536;
  if constexpr (kType == WeightType::kQ5_0x16 || kType == WeightType::kQ5_1x16) {
    return interleaved_token_into_l1<kType>() ? 1536 : 1024;
  }
  return std::size_t{1} << 10;
}

// Rows [row_begin, row_end) (whole groups) of an interleaved matrix, tokens 8 at a time; the first
// pass over a group prefetches a little ahead (above).
template <WeightType kType>
void interleaved_rows(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                      std::int64_t row_end, float* y, std::int64_t y_stride) {
  assert(row_begin % q8x16::kGroupRows == 0 && row_end % q8x16::kGroupRows == 0);
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  const std::size_t group_bytes = kType == WeightType::kQ4_Kx16   ? q8x16::q4k::group_bytes(false, w.cols)
                                  : kType == WeightType::kQ5_Kx16 ? q8x16::q4k::group_bytes(true, w.cols)
                                  : kType == WeightType::kQ6_Kx16 ? q8x16::q6k::group_bytes(w.cols)
                                  : kType == WeightType::kQ3_Kx16 ? q8x16::q3k::group_bytes(w.cols)
                                  : kType == WeightType::kQ2_Kx16 ? q8x16::q2k::group_bytes(w.cols)
                                  : kType == WeightType::kQ4_0x16 || kType == WeightType::kQ5_0x16 ||
                                          kType == WeightType::kQ4_1x16 || kType == WeightType::kQ5_1x16
                                      ? q8x16::b32::group_bytes(q8x16::b32::form_of(kType), w.cols)
                                  : kType == WeightType::kMxfp4x16 ? q8x16::mxfp4::group_bytes(w.cols)
                                                                  : q8x16::group_bytes(w.cols);
  const std::int64_t blocks = w.cols / kQ8_0BlockElems;
  // A group longer than L1 (32 KiB on Zen 4) evicts the activations between one group and the next,
  // and the Q4_K tile, with little headroom over memory per byte, then waited on L2 for them: at
  // 2048x8192 (ffn_down, 75 KiB groups) it read 26-28 GB/s on one thread against 32-35 at 8192x2048
  // (18.5 KiB groups). Prefetching the next super-block's activations into L1: 28-31 GB/s. Below
  // that length the prefetches only cost (8192x2048 0.96 -> 0.93 of the copies' read), and Q6_K
  // read the same with them or without (kernels_bench --types q4_Kx16,q6_Kx16 --shapes
  // 8192x2048,2048x8192 --threads 1; BENCHMARKS.md, issue 14).
  const bool prefetch_x = group_bytes > kL1Bytes;
  for (std::int64_t g = row_begin / q8x16::kGroupRows; g < row_end / q8x16::kGroupRows; ++g) {
    const std::uint8_t* group = base + static_cast<std::size_t>(g) * group_bytes;
    for (int t0 = 0; t0 < n_tokens; t0 += 8) {
      float* yt = y + t0 * y_stride + g * q8x16::kGroupRows;
      const std::uint8_t* ahead = t0 == 0 ? group + interleaved_prefetch_ahead<kType>(n_tokens) : nullptr;
      auto run = [&]<int T>() {
        if constexpr (kType == WeightType::kQ4_Kx16 || kType == WeightType::kQ5_Kx16) {
          q4kx16_tile<kType == WeightType::kQ5_Kx16, T>(group, w.cols, xq.k_scales + t0 * (w.cols / 256), xq.k_values + t0 * w.cols,
                         xq.k_sums32 + t0 * blocks, yt, y_stride, ahead, prefetch_x,
                         T == 1 && interleaved_token_into_l1<kType>());
        } else if constexpr (kType == WeightType::kQ4_0x16 || kType == WeightType::kQ5_0x16 || kType == WeightType::kQ4_1x16 ||
                             kType == WeightType::kQ5_1x16) {
          block32x16_tile<kType, T>(group, w.cols, xq.scales + t0 * blocks, xq.values + t0 * w.cols,
                                                            xq.block_sums + t0 * blocks, yt, y_stride, ahead,
                                                            T == 1 && interleaved_token_into_l1<kType>());
        } else if constexpr (kType == WeightType::kMxfp4x16) {
          mxfp4x16_tile<T>(group, w.cols, xq.scales + t0 * blocks, xq.values + t0 * w.cols, xq.block_sums + t0 * blocks, yt,
                           y_stride, ahead);
        } else if constexpr (kType == WeightType::kQ6_Kx16 && T == 1) {
          q6kx16_token(group, w.cols, xq.k_scales + t0 * (w.cols / 256), xq.k_values + t0 * w.cols,
                       xq.k_sums16 + t0 * (w.cols / 16), yt, ahead);
        } else if constexpr (kType == WeightType::kQ2_Kx16 && T == 1) {
          q2kx16_token(group, w.cols, xq.k_scales + t0 * (w.cols / 256), xq.k_values + t0 * w.cols,
                       xq.k_sums16 + t0 * (w.cols / 16), yt, ahead);
        } else if constexpr (kType == WeightType::kQ2_Kx16) {
          q2kx16_tile<T>(group, w.cols, xq.k_scales + t0 * (w.cols / 256), xq.k_values + t0 * w.cols,
                         xq.k_sums16 + t0 * (w.cols / 16), yt, y_stride, ahead);
        } else if constexpr (kType == WeightType::kQ3_Kx16 && T == 1) {
          q3kx16_token(group, w.cols, xq.k_scales + t0 * (w.cols / 256), xq.k_values + t0 * w.cols,
                       xq.k_sums16 + t0 * (w.cols / 16), yt, ahead);
        } else if constexpr (kType == WeightType::kQ6_Kx16 || kType == WeightType::kQ3_Kx16) {
          q6kx16_tile<kType == WeightType::kQ3_Kx16, T>(group, w.cols, xq.k_scales + t0 * (w.cols / 256), xq.k_values + t0 * w.cols,
                         xq.k_sums16 + t0 * (w.cols / 16), yt, y_stride, ahead);
        } else {
          q8x16_tile<T>(group, w.cols, xq.scales + t0 * blocks, xq.values + t0 * w.cols, xq.block_sums + t0 * blocks, yt,
                        y_stride, ahead);
        }
      };
      switch (std::min(8, n_tokens - t0)) {
        case 1: run.template operator()<1>(); break;
        case 2: run.template operator()<2>(); break;
        case 3: run.template operator()<3>(); break;
        case 4: run.template operator()<4>(); break;
        case 5: run.template operator()<5>(); break;
        case 6: run.template operator()<6>(); break;
        case 7: run.template operator()<7>(); break;
        default: run.template operator()<8>(); break;
      }
    }
  }
}

// kF16x16 (interleaved16.h): one group of 16 rows, one row per f32 lane, against T <= 7 tokens
// (x_stride floats apart). Column c's 16 weights are one register, times each token's x[c]
// broadcast, into that token's chain c % 4: the statement's arithmetic, so the same bits whatever T
// is. kConverted: the group already as f32 ([c][16], the blocked prefill's copy), else its f16 values.
// prefetch_at (f16 only; nullptr: none): the bytes as far past the group's start as this step is
// past it, prefetched into L2 as the group is read, each line once (f16x16_prefetch_ahead).
//
// The blocked prefill runs kF16PrefillTileTokens a tile (28 accumulators): a group longer than L1 comes from L2
// once per tile, so the tokens per tile set the bytes per FMA. Sapphire Rapids, two threads, the
// model shapes: 4 tokens 0.63-0.73 of sgemm (qwen's), 6 tokens 0.73-0.84, 7 tokens 0.77-0.88; two
// groups against 3 tokens (more rows per broadcast, more L2 bytes per FMA) 0.51-0.62 (BENCHMARKS.md, issue 14).
inline constexpr int kF16PrefillTileTokens = 7;

template <int T, bool kConverted>
void f16x16_tile(const void* group, std::int64_t cols, const float* x, std::int64_t x_stride, float* y,
                 std::int64_t y_stride, const std::uint8_t* prefetch_at = nullptr) {
  constexpr int kChains = q8x16::f16::kChains;
  auto weights = [group](std::int64_t c) {
    if constexpr (kConverted) {
      return _mm512_loadu_ps(static_cast<const float*>(group) + c * q8x16::kGroupRows);
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint8_t*>(group) + c * 32)));
    }
  };
  __m512 acc[T][kChains];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
    for (int j = 0; j < kChains; ++j) acc[t][j] = _mm512_setzero_ps();
  auto column = [&](std::int64_t c, int chain) __attribute__((always_inline)) {
    __m512 wv = weights(c);
    // In a register, loaded once: GCC otherwise folds the load into each token's FMA.
    if constexpr (T > 1) asm("" : "+v"(wv));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t][chain] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[t * x_stride + c]), acc[t][chain]);
  };
  std::int64_t c = 0;
  for (; c + kChains <= cols; c += kChains) {
    // kChains f16 columns of 16 rows: two lines.
    static_assert(kChains * q8x16::kGroupRows * 2 == 128);
    if (!kConverted && prefetch_at != nullptr) prefetch_span(prefetch_at + c * 32, 128);
#pragma GCC unroll 4
    for (int j = 0; j < kChains; ++j) column(c + j, j);
  }
#pragma GCC unroll 4
  for (int j = 0; j < kChains; ++j) {
    if (c + j < cols) column(c + j, j);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(y + t * y_stride, _mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
  }
}

// How far ahead a decode pass over kF16x16 groups prefetches into L2. A group is one linear stream,
// and on Zen 4 the hardware prefetcher alone kept up with it; on Sapphire Rapids it does not.
// bench-engine, decode / the paired streaming read (two threads | one), qwen2.5-0.5b and
// llama-3.2-1b f16: none 82-85 % | 87-88 %; into L1 1-2 KiB ahead 85-90 %; into L2 2 KiB 91-93 %
// | 94-95 %, 3 KiB 93-98 % in every sweep | 95-98 %, 4-16 KiB 95-100 % in the first sweep but
// 86-92 % in the later ones. 3 KiB is 48 lines, as many misses as a Golden Cove L2 keeps in
// flight (BENCHMARKS.md, issue 14). 0 on AMD, where a prototype of the layout read less with a
// prefetch than without (interleaved16.h).
std::size_t f16x16_prefetch_ahead() {
  static const std::size_t ahead = amd_core() ? 0 : std::size_t{3} << 10;
  return ahead;
}

// n_groups consecutive groups from `groups` against tokens [0, n_tokens) of x, 4 tokens at a time
// (decode's small batches), or kF16PrefillTileTokens (kConverted: the blocked prefill). Decode's
// first pass over a group prefetches ahead (f16x16_prefetch_ahead).
template <bool kConverted>
void f16x16_groups(const void* groups, std::int64_t n_groups, std::int64_t cols, const float* x, int n_tokens, float* y,
                   std::int64_t y_stride) {
  const std::size_t group_bytes = q8x16::f16::group_bytes(cols) * (kConverted ? 2 : 1);
  constexpr int kTokens = kConverted ? kF16PrefillTileTokens : 4;
  static_assert(kF16PrefillTileTokens == 7, "the switch below has a case per tile size");
  const std::size_t ahead = kConverted ? 0 : f16x16_prefetch_ahead();
  for (std::int64_t g = 0; g < n_groups; ++g) {
    const void* group = static_cast<const std::uint8_t*>(groups) + static_cast<std::size_t>(g) * group_bytes;
    for (int t0 = 0; t0 < n_tokens; t0 += kTokens) {
      const float* xt = x + static_cast<std::int64_t>(t0) * cols;
      float* yt = y + t0 * y_stride + g * q8x16::kGroupRows;
      const std::uint8_t* pf = ahead > 0 && t0 == 0 ? static_cast<const std::uint8_t*>(group) + ahead : nullptr;
      switch (std::min(kTokens, n_tokens - t0)) {
        case 1: f16x16_tile<1, kConverted>(group, cols, xt, cols, yt, y_stride, pf); break;
        case 2: f16x16_tile<2, kConverted>(group, cols, xt, cols, yt, y_stride, pf); break;
        case 3: f16x16_tile<3, kConverted>(group, cols, xt, cols, yt, y_stride, pf); break;
        case 4: f16x16_tile<4, kConverted>(group, cols, xt, cols, yt, y_stride, pf); break;
        case 5: if constexpr (kConverted) f16x16_tile<5, kConverted>(group, cols, xt, cols, yt, y_stride); break;
        case 6: if constexpr (kConverted) f16x16_tile<6, kConverted>(group, cols, xt, cols, yt, y_stride); break;
        default: if constexpr (kConverted) f16x16_tile<7, kConverted>(group, cols, xt, cols, yt, y_stride); break;
      }
    }
  }
}

// Rows [row_begin, row_end) (whole groups) of a kF16x16 matrix. From kBlockedTokens tokens on
// (prefill), as blocked_float_rows: the rows converted to f32 once into a per-thread buffer, then
// the tokens in blocks whose activations stay in L2, each block against every group.
void f16x16_rows(const WeightView& w, const float* x, int n_tokens, std::int64_t row_begin, std::int64_t row_end,
                 float* y, std::int64_t y_stride) {
  assert(row_begin % q8x16::kGroupRows == 0 && row_end % q8x16::kGroupRows == 0);
  const std::int64_t n_groups = (row_end - row_begin) / q8x16::kGroupRows;
  const std::uint8_t* first = static_cast<const std::uint8_t*>(w.data) +
                              static_cast<std::size_t>(row_begin / q8x16::kGroupRows) * q8x16::f16::group_bytes(w.cols);
  y += row_begin;
  if (n_tokens < kBlockedTokens) return f16x16_groups<false>(first, n_groups, w.cols, x, n_tokens, y, y_stride);
  thread_local std::vector<float> converted;
  const std::int64_t n = (row_end - row_begin) * w.cols;
  converted.resize(static_cast<std::size_t>(n));
  f16_to_f32_row(reinterpret_cast<const std::uint16_t*>(first), converted.data(), static_cast<int>(n));
  const int block = blocked_token_count(w.cols, kF16PrefillTileTokens, n_tokens);
  for (int t0 = 0; t0 < n_tokens; t0 += block) {
    f16x16_groups<true>(converted.data(), n_groups, w.cols, x + static_cast<std::int64_t>(t0) * w.cols,
                        std::min(block, n_tokens - t0), y + t0 * y_stride, y_stride);
  }
}

void matmul_rows(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                 std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride) {
  switch (w.type) {
    case WeightType::kQ8_0x16: return interleaved_rows<WeightType::kQ8_0x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ4_Kx16: return interleaved_rows<WeightType::kQ4_Kx16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ5_Kx16: return interleaved_rows<WeightType::kQ5_Kx16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ6_Kx16: return interleaved_rows<WeightType::kQ6_Kx16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ3_Kx16: return interleaved_rows<WeightType::kQ3_Kx16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ2_Kx16: return interleaved_rows<WeightType::kQ2_Kx16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ4_0x16: return interleaved_rows<WeightType::kQ4_0x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ5_0x16: return interleaved_rows<WeightType::kQ5_0x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ4_1x16: return interleaved_rows<WeightType::kQ4_1x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kQ5_1x16: return interleaved_rows<WeightType::kQ5_1x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kF16x16: return f16x16_rows(w, x, n_tokens, row_begin, row_end, y, y_stride);
    case WeightType::kMxfp4x16: return interleaved_rows<WeightType::kMxfp4x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
    default: break;
  }
  tiled_matmul_rows<Ops>(w, x, xq, n_tokens, row_begin, row_end, y, y_stride);
}

// Interleaved rows are read one at a time (an embedding lookup, or the opt-in sgemm path): the scalar
// statement serves them.
void dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) {
  if (is_interleaved(w.type)) return scalar_kernel_table().dequantize_rows(w, row_begin, row_end, out);
  tiled_dequantize_rows<Ops>(w, row_begin, row_end, out);
}

// Same operations in the same order as the scalar quantizer, so the results are bit-identical.
void quantize_activations(const float* x, std::int64_t n, int block, float* scales, std::int8_t* values) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (std::int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < block / 16; ++k) m = _mm512_max_ps(m, _mm512_and_ps(_mm512_loadu_ps(xb + k * 16), abs_mask));
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / 127.0f;
    const __m512 inv_d = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    scales[b] = d;
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (int k = 0; k < block / 16; ++k) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + k * 16), inv_d), kNearest));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(values + b * block + k * 16), _mm512_cvtepi32_epi8(q));
    }
  }
}

const KernelTable kTable = {
    .path = SimdPath::kAvx512,
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
}  // namespace kvstash::kernels::avx512

namespace kvstash::kernels {
const KernelTable& avx512_kernel_table() { return avx512::kTable; }
}  // namespace kvstash::kernels
