// AVX-512 weight kernels: the decode row kernels (register tiles of 4 rows x up to 4 tokens, or
// 2 rows x 8 tokens for float weights in batches, so a weight vector loaded once feeds every token;
// q8_0 two blocks per register through VNNI; the next tiles prefetched), weight-to-f32 conversion
// for the sgemm path, and the activation quantizer for q8_0. Also assembles this level's KernelTable.
// GCC 12's own AVX-512 headers trip its uninitialized-value warnings (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/simd_dispatch.h"
#include "kernels/simd_impl.h"



namespace kvstash::kernels::avx512 {
namespace {

constexpr int kRowTile = 4;    // rows per register tile
constexpr int kTokenTile = 4;  // tokens per register tile: 16 accumulators + 4 weights of 32 zmm
constexpr int kWideTokens = 5;   // from here on: 2 rows x 8 tokens, 16 accumulators
constexpr int kWideRowTile = 2;

__mmask16 tail_mask(std::int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << remaining) - 1);
}

// A tile's R rows are contiguous in memory, and so is the next tile after them. The hardware
// prefetcher sees R short interleaved streams (a 896-column f16 row is 28 cache lines) and ramps up
// anew for every tile; decode at one token then reads DRAM at a fraction of the streaming rate
// (kernels_bench, 151936x896, 2 threads, loaded machine: f16 1.2-1.4 GB/s without, 10-13 GB/s
// with the prefetch, stream 10 GB/s). So while a tile is consumed, its successor is
// prefetched linearly, `bytes` per step: each line exactly once, a few tiles ahead.
inline void prefetch_span(const std::uint8_t* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// How far ahead the prefetch runs: whole tiles, at least 16 KiB, so that enough lines are in flight
// to cover DRAM latency at the streaming rate. One tile ahead (3.8 KiB for 4 q8_0 rows of 896)
// measured 24 GB/s for q8_0 at 151936x896 on one thread; 8-16 KiB ahead 28-32 GB/s (f16: 32-37
// against 36-38 GB/s).
constexpr std::size_t kPrefetchAheadBytes = 16 << 10;

inline std::size_t prefetch_distance(std::size_t tile_bytes) {
  const std::size_t tiles = (kPrefetchAheadBytes + tile_bytes - 1) / tile_bytes;
  return (tiles < 1 ? 1 : tiles) * tile_bytes;
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
      dx = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(sb)));
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

template <int R, int T>
void tile(const WeightView& w, const float* x, const QuantizedActivations& xq, int t0, std::int64_t r,
          float* y, std::int64_t y_stride) {
  // Later token groups re-read the tile from L1; only the first pass prefetches the next one.
  const bool prefetch = t0 == 0;
  const std::uint8_t* row0 = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes;
  float* yt = y + t0 * y_stride + r;
  const float* xt = x + t0 * w.cols;
  switch (w.type) {
    case WeightType::kF32: return float_tile<WeightType::kF32, R, T>(row0, w.row_bytes, w.cols, xt, yt, y_stride, prefetch);
    case WeightType::kF16: return float_tile<WeightType::kF16, R, T>(row0, w.row_bytes, w.cols, xt, yt, y_stride, prefetch);
    case WeightType::kBF16: return float_tile<WeightType::kBF16, R, T>(row0, w.row_bytes, w.cols, xt, yt, y_stride, prefetch);
    case WeightType::kQ8_0: {
      const std::int64_t blocks = w.cols / kQ8_0BlockElems;
      return q8_tile<R, T>(row0, w.row_bytes, w.cols, xq.scales + t0 * blocks, xq.values + t0 * w.cols, yt,
                           y_stride, prefetch);
    }
  }
}

template <int R>
void tile_tokens(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                 std::int64_t r, float* y, std::int64_t y_stride) {
  for (int t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
    switch (n_tokens - t0) {
      case 1: tile<R, 1>(w, x, xq, t0, r, y, y_stride); break;
      case 2: tile<R, 2>(w, x, xq, t0, r, y, y_stride); break;
      case 3: tile<R, 3>(w, x, xq, t0, r, y, y_stride); break;
      default: tile<R, 4>(w, x, xq, t0, r, y, y_stride); break;
    }
  }
}

// From kWideTokens tokens on, float weights go in tiles of kWideRowTile rows x 8 tokens: each
// weight vector is loaded and converted once for all 8 tokens of a batch, where 4 x 4 tiles do it
// twice (same operations per FMA, but one pass per tile: at 151936x896 f16, 8 tokens, one thread,
// 12-13 GB/s against 8-9.5). q8_0 keeps 4 x 4: its per-token work per block pair (activation load,
// bias correction, scales) is shared by 4 rows instead of 2 and measured no better at 2 x 8.
template <int R>
void tile_tokens_wide(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                      std::int64_t r, float* y, std::int64_t y_stride) {
  int t0 = 0;
  for (; t0 + 8 <= n_tokens; t0 += 8) tile<R, 8>(w, x, xq, t0, r, y, y_stride);
  switch (n_tokens - t0) {
    case 0: break;
    case 1: tile<R, 1>(w, x, xq, t0, r, y, y_stride); break;
    case 2: tile<R, 2>(w, x, xq, t0, r, y, y_stride); break;
    case 3: tile<R, 3>(w, x, xq, t0, r, y, y_stride); break;
    case 4: tile<R, 4>(w, x, xq, t0, r, y, y_stride); break;
    case 5: tile<R, 5>(w, x, xq, t0, r, y, y_stride); break;
    case 6: tile<R, 6>(w, x, xq, t0, r, y, y_stride); break;
    default: tile<R, 7>(w, x, xq, t0, r, y, y_stride); break;
  }
}

void matmul_rows(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                 std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride) {
  std::int64_t r = row_begin;
  if (n_tokens >= kWideTokens && w.type != WeightType::kQ8_0) {
    for (; r + kWideRowTile <= row_end; r += kWideRowTile) tile_tokens_wide<kWideRowTile>(w, x, xq, n_tokens, r, y, y_stride);
    for (; r < row_end; ++r) tile_tokens_wide<1>(w, x, xq, n_tokens, r, y, y_stride);
    return;
  }
  for (; r + kRowTile <= row_end; r += kRowTile) tile_tokens<kRowTile>(w, x, xq, n_tokens, r, y, y_stride);
  for (; r < row_end; ++r) tile_tokens<1>(w, x, xq, n_tokens, r, y, y_stride);
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

void dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) {
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* row = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes;
    float* o = out + (r - row_begin) * w.cols;
    if (w.type == WeightType::kQ8_0) {
      dequantize_q8_0_row(row, w.cols, o);
      continue;
    }
    for (std::int64_t c = 0; c < w.cols; c += 16) {
      const __mmask16 m = tail_mask(w.cols - c);
      __m512 v;
      switch (w.type) {
        case WeightType::kF32: v = load_weights<WeightType::kF32>(row, c, m); break;
        case WeightType::kF16: v = load_weights<WeightType::kF16>(row, c, m); break;
        default: v = load_weights<WeightType::kBF16>(row, c, m); break;
      }
      _mm512_mask_storeu_ps(o + c, m, v);
    }
  }
}

// Same operations in the same order as the scalar quantizer, so the results are bit-identical.
void quantize_activations(const float* x, std::int64_t n, float* scales, std::int8_t* values) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (std::int64_t b = 0; b < n / kQ8_0BlockElems; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * 32);
    const __m512 x1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, abs_mask), _mm512_and_ps(x1, abs_mask)));
    const float d = amax / 127.0f;
    const __m512 inv_d = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    scales[b] = d;
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x0, inv_d), kNearest));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x1, inv_d), kNearest));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(values + b * 32), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(values + b * 32 + 16), _mm512_cvtepi32_epi8(q1));
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
