// Internal to kernels, for mxfp4_avx2.cc and mxfp4_avx512.cc only: the MXFP4 matmul (mxfp4.h) for
// decode and prefill as register tiles of R rows x T tokens over 256-bit vectors, written once and
// compiled per instruction set. kVnni (the AVX-512 path, whose CPUs have AVX512-VNNI) takes a
// block's integer dot product with one vpdpbusd where AVX2 needs maddubs + madd.
//
// Per block and row: the 16 code bytes' low nibbles and high nibbles side by side in one register
// (values 0-15 then 16-31, the activations' order), looked up with one vpshufb as the doubled E2M1
// value plus 12 (kOffsetValues: unsigned, as maddubs and VNNI take their first operand). Per token:
// the exact integer dot product with its 32 quantized activations as 8 int32 partial sums ((w + 12)
// x summed per 4-byte lane, less 12 x the lane's activation sum, which the R rows of a tile share),
// converted to float and added into the (row, token)'s accumulator times (the block's half scale x
// the activations' block scale) with one fused multiply-add; the 8 lanes are summed once at the end.
// (Against |w| times x carrying w's sign, as llama.cpp does: two instructions fewer per block and
// row; one thread, 2048x8192, AVX2 13.8 -> 15.0 GB/s, the AVX-512 path's GGUF-layout kernel 17.1 ->
// 19.4.)
//
// Bits: the integer sums are exact on both instruction sets and every float operation is the same
// intrinsic in the same order, so the AVX2 and AVX-512 paths give the same bits (mxfp4_test.cc); the
// scalar kernel adds the blocks one by one without fused multiply-adds, so its bits differ (within
// reassociation, as every other type's paths do: kernels.h). Batch invariance: every (row, token)
// accumulator sees the same operations in the same order whatever tile holds it, whichever rows and
// tokens share the call, so a token's result does not depend on its batch.
//
// Thread safety: pure functions.
#pragma once

#include <immintrin.h>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "kernels/matmul_tiles.h"  // prefetch_span, prefetch_distance
#include "kernels/mxfp4.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {
namespace {
namespace mxfp4_tiles {

// mxfp4_half_scale(e) for every e, so that a block's scale is one load.
constexpr std::array<float, 256> kHalfScales = [] {
  std::array<float, 256> t{};
  for (unsigned e = 0; e < 256; ++e) {
    t[e] = std::bit_cast<float>(e < 2 ? std::uint32_t{0x00200000} << e : (e - 1) << 23);
  }
  return t;
}();

// A block's 32 codes as table indices: lanes 0-15 the low nibbles, 16-31 the high ones.
inline __m256i code_indices(const std::uint8_t* codes) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// The doubled E2M1 values plus 12 (0-24): unsigned, as maddubs and VNNI take the weights, and
// small enough that maddubs' pair sums cannot saturate (2 x 24 x 127 < 32767).
constexpr std::array<std::int8_t, 16> kOffsetValues = [] {
  std::array<std::int8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[static_cast<std::size_t>(i)] = static_cast<std::int8_t>(kMxfp4Values[i] + 12);
  return t;
}();

// Per 4-byte lane, 12 x the sum of the lane's 4 activations: what the offset adds to u x.
template <bool kVnni>
inline __m256i offset_share(__m256i x) {
  const __m256i twelve = _mm256_set1_epi8(12);
  if constexpr (kVnni) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), twelve, x);
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(twelve, x), _mm256_set1_epi16(1));
  }
}

// Per 4-byte lane the exact sum of w * x over its 4 pairs: (w + 12) x summed, less the offset's share.
template <bool kVnni>
inline __m256i block_dot(__m256i offset_w, __m256i x, __m256i share) {
  if constexpr (kVnni) {
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), offset_w, x), share);
  } else {
    return _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(offset_w, x), _mm256_set1_epi16(1)), share);
  }
}

inline float reduce(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Rows row0 .. row0 + R - 1 (row_bytes apart) against tokens 0 .. T - 1 of x_values / x_scales
// (cols and cols / 32 apart); y[t * y_stride + i]. With `prefetch`, the next tile's bytes are
// prefetched as this one is read (matmul_tiles.h).
template <bool kVnni, int R, int T>
void tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t blocks, const float* x_scales,
          const std::int8_t* x_values, float* y, std::int64_t y_stride, bool prefetch) {
  const std::int64_t cols = blocks * kMxfp4BlockElems;
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kOffsetValues.data())));
  const std::uint8_t* next_tile = row0 + prefetch_distance(R * row_bytes);
  __m256 acc[R][T];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (prefetch) prefetch_span(next_tile + b * kMxfp4BlockBytes * R, kMxfp4BlockBytes * R);
    __m256i w[R];
    __m256 dw[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const std::uint8_t* block = row0 + i * row_bytes + b * kMxfp4BlockBytes;
      dw[i] = _mm256_broadcast_ss(&kHalfScales[block[0]]);
      w[i] = _mm256_shuffle_epi8(table, code_indices(block + 1));
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_values + t * cols + b * kMxfp4BlockElems));
      const __m256i share = offset_share<kVnni>(xv);
      const __m256 dx = _mm256_broadcast_ss(x_scales + t * blocks + b);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        // dw * dx is one rounding (dw is a power of two: exact unless it leaves the normal range),
        // broadcast loads and one vector multiply rather than a scalar one and a broadcast.
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot<kVnni>(w[i], xv, share)), _mm256_mul_ps(dw[i], dx), acc[i][t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) y[t * y_stride + i] = reduce(acc[i][t]);
}

// Rows starting at r against tokens [t0, t0 + nt), nt <= 4, in one tile of R rows.
template <bool kVnni, int R>
void tile_tokens(const WeightView& w, const QuantizedActivations& xq, int t0, int nt, std::int64_t r, float* y,
                 std::int64_t y_stride, bool prefetch) {
  const std::int64_t blocks = w.cols / kMxfp4BlockElems;
  const std::uint8_t* row0 = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes;
  const float* xs = xq.scales + static_cast<std::int64_t>(t0) * blocks;
  const std::int8_t* xv = xq.values + static_cast<std::int64_t>(t0) * w.cols;
  float* yt = y + t0 * y_stride + r;
  switch (nt) {
    case 1: return tile<kVnni, R, 1>(row0, w.row_bytes, blocks, xs, xv, yt, y_stride, prefetch);
    case 2: return tile<kVnni, R, 2>(row0, w.row_bytes, blocks, xs, xv, yt, y_stride, prefetch);
    case 3: return tile<kVnni, R, 3>(row0, w.row_bytes, blocks, xs, xv, yt, y_stride, prefetch);
    default: return tile<kVnni, R, 4>(row0, w.row_bytes, blocks, xs, xv, yt, y_stride, prefetch);
  }
}

// Rows [row_begin, row_end) for n_tokens tokens. One token: tiles of 4 rows (4 independent
// accumulators keep the fused multiply-adds' latency hidden). Several: tokens in groups of 4 as the
// outer loop, every row tile of the range against one group before the next, so that a group's
// activations (4 x cols bytes) stay in L1 while the range's rows (a decode chunk, ~32 KiB) are
// re-read from L1/L2; the first group's pass prefetches the rows from memory. kBatchRows rows
// per tile: 2 on AVX2 (8 accumulators of 16 registers), 4 with AVX-512's 32.
template <bool kVnni>
void matmul_rows(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                 std::int64_t row_end, float* y, std::int64_t y_stride) {
  constexpr int kBatchRows = kVnni ? 4 : 2;
  if (n_tokens == 1) {
    std::int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) tile_tokens<kVnni, 4>(w, xq, 0, 1, r, y, y_stride, true);
    for (; r < row_end; ++r) tile_tokens<kVnni, 1>(w, xq, 0, 1, r, y, y_stride, true);
    return;
  }
  for (int t0 = 0; t0 < n_tokens; t0 += 4) {
    const int nt = n_tokens - t0 < 4 ? n_tokens - t0 : 4;
    std::int64_t r = row_begin;
    for (; r + kBatchRows <= row_end; r += kBatchRows) tile_tokens<kVnni, kBatchRows>(w, xq, t0, nt, r, y, y_stride, t0 == 0);
    for (; r < row_end; ++r) tile_tokens<kVnni, 1>(w, xq, t0, nt, r, y, y_stride, t0 == 0);
  }
}

}  // namespace mxfp4_tiles
}  // namespace
}  // namespace kvstash::kernels
