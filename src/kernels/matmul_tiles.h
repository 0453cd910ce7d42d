// Internal to kernels, for the SIMD translation units only: the decode-matmul glue that every
// instruction set shares, written once as templates over an `Ops` struct and compiled per ISA
// (matmul_avx2.cc and matmul_avx512.cc each instantiate it with their own Ops).
//
// Shared here: the prefetch of the next row tile, the split of rows and tokens into register
// tiles, the dispatch on the weight type, dequantize_rows for the prefill path, and the kernel for
// every slice-form quantized type (quant_formats.h), written with Ops' vector primitives.
// Each ISA keeps only what differs: its float-weight and q8_0 tiles, its vector primitives and its
// tile sizes. Ops must provide:
//
//   using F = float vector; using I = integer vector of kSlices * 32 bytes; static constexpr int kSlices;
//   kSingleTokenRows, kBatchRows: rows per tile at one token and at several;
//   kWideTokens (0: none), kWideRows: float weights from kWideTokens tokens on go in kWideRows x 8 tiles;
//   template <WeightType, int R, int T> float_tile(row0, row_bytes, cols, x, y, y_stride, prefetch);
//   template <int R, int T> q8_tile(row0, row_bytes, cols, x_scales, x_values, y, y_stride, prefetch);
//   template <WeightType> dequantize_float_row(row, cols, out); dequantize_q8_0_row(row, cols, out);
//   zero(), fma(a, b, c) = a b + c, fnmadd(a, b, c) = c - a b, mul, reduce(F) -> float;
//   join(const __m256i* slices) -> I; join_partial(const __m256i* slices, int n) (n < kSlices);
//   load_x(const int8_t*), load_x_partial(const int8_t*, int n_slices) -> I;
//   load_lanes(const float*), load_lanes_partial(const float*, int n_slices) -> F (8 lanes per slice);
//   dot(I u, I x) -> F: per 4-byte lane the sum of u * x (u unsigned <= 63, x signed), as float;
//   per_slice(const float* v, int n_slices) -> F: v[k] over slice k's 8 lanes (0 past n_slices);
//   template <WeightType> unpack_slices(block, first) -> I: codes of slices first.. of a K block;
//   template <WeightType> unpack_blocks(block) -> I: codes of kSlices consecutive 32-weight blocks;
//   block_halves(block, offset) -> F: the f16 at `offset` of each of kSlices consecutive blocks
//   over its 8 lanes; splat_lone(v) -> F: v over the first slice's lanes, 0 elsewhere;
//   splat(float), fmsub(a, b, c) = a b - c;
//   Groups (16 floats); load_groups(const float* g16), groups(__m256 lo, __m256 hi) -> Groups;
//   fnmadd_groups(a, b, F c) = c - a b; mul_groups(a, b);
//   template <int kGroupElems> dx_groups(const float* dx8) -> Groups: the 8 slices' activation
//   scales laid out as the groups (each twice for 16-weight groups);
//   summed into c's lanes in any order;
//   template <int kGroupElems> expand(const Groups&, int first_slice) -> F: per lane its group's value.
//
// Everything is in an unnamed namespace: each ISA's instantiations stay in its own object file.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/quant_unpack_avx2.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {
namespace {

// A tile's R rows are contiguous in memory, and so is the next tile after them. The hardware
// prefetcher sees R short interleaved streams (a 896-column f16 row is 28 cache lines) and ramps up
// anew for every tile; decode at one token then reads DRAM at a fraction of the streaming rate
// (kernels_bench, 151936x896, 2 threads, loaded machine: f16 1.2-1.4 GB/s without, 10-13 GB/s
// with the prefetch, stream 10 GB/s). So while a tile is consumed, its successor is
// prefetched linearly, `bytes` per step: each line exactly once, a few tiles ahead.
// Into L2 (T1), not L1 (T0): a prefetch into L1 holds one of the core's few L1 miss buffers until
// its line arrives, which capped decode at ~15 GB/s per core whatever the memory could give (Zen 4,
// bench-engine pairing each step with a read of the weights' own pages: qwen2.5-0.5b f16 at 29 GB/s
// with T0 against 48 GB/s with T1 where those pages read at 62 GB/s; BENCHMARKS.md, issue 14).
inline void prefetch_span(const std::uint8_t* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
}
// Into L1 (T0) where into_l1: where one core's read is low enough that the miss buffers are not
// what limits it (the one-token kernels on Intel cores; see interleaved_token_into_l1 in
// matmul_avx512.cc).
inline void prefetch_span(const std::uint8_t* p, std::size_t bytes, bool into_l1) {
  if (!into_l1) return prefetch_span(p, bytes);
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

// Slice-form weights (R rows) against quantized activations (T tokens). Per 4-value lane,
//   y += dot(u, x_q) * scale * d_x  -  min * (d_x * sum of the lane's x_q)
// A unit of 8 slices at a time (a K super-block, or 8 consecutive 32-weight blocks): group scales
// once per unit and row (block_groups), the min term once per unit as 16 mins times the
// activations' sums per 16 weights, then kSlices slices per step with their codes unpacked once
// for all T tokens. At one token the scales are multiplied by the activation scales once per unit
// (16 multiplies) rather than once per step.
template <class Ops, WeightType kType, int R, int T>
void unit_steps(typename Ops::F (&acc)[R][T], const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols,
                const QuantizedActivations& xq, std::int64_t x_offset_slices, std::int64_t n_units, bool prefetch) {
  using F = typename Ops::F;
  using I = typename Ops::I;
  using Groups = typename Ops::Groups;
  constexpr int kS = Ops::kSlices;
  constexpr bool kK = slices_per_block<kType>() > 1;
  constexpr std::size_t kBlockBytes = block_bytes<kType>();
  constexpr std::size_t kUnitBytes = kK ? kBlockBytes : 8 * kBlockBytes;
  constexpr int kG = group_elems<kType>();
  const std::int64_t n_slices = cols / kSliceElems;
  const float* x_scales = xq.scales + x_offset_slices;
  const std::int8_t* x_values = xq.values + x_offset_slices * kSliceElems;
  const float* group_sums = xq.group_sums + x_offset_slices * 2;
  const std::uint8_t* next_tile = row0 + prefetch_distance(R * row_bytes);
  for (std::int64_t b = 0; b < n_units; ++b) {
    if (prefetch) prefetch_span(next_tile + b * kUnitBytes * R, kUnitBytes * R);
    Groups scales[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const std::uint8_t* unit = row0 + i * row_bytes + b * kUnitBytes;
      BlockGroups g;
      if constexpr (kK) {
        g = block_groups<kType>(unit);
      } else {
        g = block32_unit_groups<kType>(unit);
      }
      scales[i] = Ops::groups(g.scale_lo, g.scale_hi);
      const Groups mins = Ops::groups(g.min_lo, g.min_hi);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        acc[i][t] = Ops::fnmadd_groups(mins, Ops::load_groups(group_sums + t * (cols / 16) + b * 16), acc[i][t]);
      }
      if constexpr (T == 1) scales[i] = Ops::mul_groups(scales[i], Ops::template dx_groups<kG>(x_scales + b * 8));
    }
#pragma GCC unroll 8
    for (int first = 0; first < 8; first += kS) {
      const std::int64_t slice = b * 8 + first;
      I u[R];
      F sc[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const std::uint8_t* unit = row0 + i * row_bytes + b * kUnitBytes;
        if constexpr (kK) {
          u[i] = Ops::template unpack_slices<kType>(unit, first);
        } else {
          u[i] = Ops::template unpack_blocks<kType>(unit + first * kBlockBytes);
        }
        sc[i] = Ops::template expand<kG>(scales[i], first);
      }
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const I xv = Ops::load_x(x_values + t * cols + slice * kSliceElems);
        if constexpr (T == 1) {
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i) acc[i][t] = Ops::fma(Ops::dot(u[i], xv), sc[i], acc[i][t]);
        } else {
          const F dx = Ops::per_slice(x_scales + t * n_slices + slice, kS);
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i) acc[i][t] = Ops::fma(Ops::dot(u[i], xv), Ops::mul(sc[i], dx), acc[i][t]);
        }
      }
    }
  }
}

// The 32-weight types' blocks [first_block, n_blocks) that do not fill a unit of 8, kSlices blocks
// per step. Q4_0/Q5_0 subtract an offset (8, 16) times d: with min = offset * d the lane term is
// d * (dot * d_x - offset * lane_sum), one fused multiply-subtract per token shared by the R rows'
// scales. Q4_1/Q5_1 add m * lane_sum.
template <class Ops, WeightType kType, int R, int T>
void block32_steps(typename Ops::F (&acc)[R][T], const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols,
                   const QuantizedActivations& xq, std::int64_t x_offset_slices, std::int64_t first_block) {
  using F = typename Ops::F;
  using I = typename Ops::I;
  constexpr int kS = Ops::kSlices;
  constexpr std::size_t kBlockBytes = block_bytes<kType>();
  constexpr bool kAffine = kType == WeightType::kQ4_1 || kType == WeightType::kQ5_1;
  constexpr float kOffset = kType == WeightType::kQ4_0 ? 8.0f : 16.0f;
  const std::int64_t n_blocks = cols / kSliceElems;
  const float* x_scales = xq.scales + x_offset_slices;
  const std::int8_t* x_values = xq.values + x_offset_slices * kSliceElems;
  const float* lane_sums = xq.lane_sums + x_offset_slices * 8;
  for (std::int64_t b = first_block; b < n_blocks; b += kS) {
    const int n = n_blocks - b < kS ? static_cast<int>(n_blocks - b) : kS;  // < kS only at an odd last block
    I u[R];
    F d[R], m[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const std::uint8_t* block = row0 + i * row_bytes + b * kBlockBytes;
      if (n == kS) {
        u[i] = Ops::template unpack_blocks<kType>(block);
        d[i] = Ops::template block_halves<kType>(block, 0);
        if constexpr (kAffine) m[i] = Ops::template block_halves<kType>(block, 2);
      } else {
        __m256i part = slice_values_256<kType>(block, 0);
        u[i] = Ops::join_partial(&part, 1);
        d[i] = Ops::splat_lone(half_at(block));
        if constexpr (kAffine) m[i] = Ops::splat_lone(half_at(block + 2));
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const std::int8_t* xv_at = x_values + t * cols + b * kSliceElems;
      const float* ls_at = lane_sums + t * (cols / 4) + b * 8;
      const I xv = n == kS ? Ops::load_x(xv_at) : Ops::load_x_partial(xv_at, n);
      const F dx = Ops::per_slice(x_scales + t * n_blocks + b, n);
      const F ls = n == kS ? Ops::load_lanes(ls_at) : Ops::load_lanes_partial(ls_at, n);
      if constexpr (kAffine) {
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          acc[i][t] = Ops::fma(Ops::dot(u[i], xv), Ops::mul(d[i], dx), acc[i][t]);
          acc[i][t] = Ops::fma(m[i], ls, acc[i][t]);
        }
      } else {
        const F offset_ls = Ops::mul(Ops::splat(kOffset), ls);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i][t] = Ops::fma(d[i], Ops::fmsub(Ops::dot(u[i], xv), dx, offset_ls), acc[i][t]);
      }
    }
  }
}

template <class Ops, WeightType kType, int R, int T>
void slice_tile(const std::uint8_t* row0, std::size_t row_bytes, std::int64_t cols, const QuantizedActivations& xq,
                std::int64_t x_offset_slices, float* y, std::int64_t y_stride, bool prefetch) {
  typename Ops::F acc[R][T];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[i][t] = Ops::zero();
  const std::int64_t n_units = cols / (8 * kSliceElems);
  unit_steps<Ops, kType, R, T>(acc, row0, row_bytes, cols, xq, x_offset_slices, n_units, prefetch);
  if constexpr (slices_per_block<kType>() == 1) {
    if (n_units * 8 < cols / kSliceElems) {
      if (prefetch) {
        const std::uint8_t* next_tile = row0 + prefetch_distance(R * row_bytes);
        const std::size_t done = n_units * 8 * block_bytes<kType>() * R;
        prefetch_span(next_tile + done, R * row_bytes - done);
      }
      block32_steps<Ops, kType, R, T>(acc, row0, row_bytes, cols, xq, x_offset_slices, n_units * 8);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) y[t * y_stride + i] = Ops::reduce(acc[i][t]);
}

template <class Ops, int R, int T>
void tile(const WeightView& w, const float* x, const QuantizedActivations& xq, int t0, std::int64_t r, float* y,
          std::int64_t y_stride, bool may_prefetch = true) {
  // Later token groups re-read the tile from L1; only the first pass prefetches the next one.
  const bool prefetch = may_prefetch && t0 == 0;
  const std::uint8_t* row0 = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes;
  float* yt = y + t0 * y_stride + r;
  switch (w.type) {
    case WeightType::kF32:
      return Ops::template float_tile<WeightType::kF32, R, T>(row0, w.row_bytes, w.cols, x + t0 * w.cols, yt, y_stride, prefetch);
    case WeightType::kF16:
      return Ops::template float_tile<WeightType::kF16, R, T>(row0, w.row_bytes, w.cols, x + t0 * w.cols, yt, y_stride, prefetch);
    case WeightType::kBF16:
      return Ops::template float_tile<WeightType::kBF16, R, T>(row0, w.row_bytes, w.cols, x + t0 * w.cols, yt, y_stride, prefetch);
    case WeightType::kQ8_0: {
      const std::int64_t blocks = w.cols / kQ8_0BlockElems;
      return Ops::template q8_tile<R, T>(row0, w.row_bytes, w.cols, xq.scales + t0 * blocks, xq.values + t0 * w.cols, yt,
                                         y_stride, prefetch);
    }
    default:
      with_slice_type(w.type, [&]<WeightType kType>() {
        slice_tile<Ops, kType, R, T>(row0, w.row_bytes, w.cols, xq, t0 * (w.cols / kSliceElems), yt, y_stride, prefetch);
      });
  }
}

// Rows in tiles of R, tokens in tiles of up to 4.
template <class Ops, int R>
void tile_tokens(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens, std::int64_t r,
                 float* y, std::int64_t y_stride) {
  for (int t0 = 0; t0 < n_tokens; t0 += 4) {
    switch (n_tokens - t0) {
      case 1: tile<Ops, R, 1>(w, x, xq, t0, r, y, y_stride); break;
      case 2: tile<Ops, R, 2>(w, x, xq, t0, r, y, y_stride); break;
      case 3: tile<Ops, R, 3>(w, x, xq, t0, r, y, y_stride); break;
      default: tile<Ops, R, 4>(w, x, xq, t0, r, y, y_stride); break;
    }
  }
}

// Tiles of R rows x 8 tokens, for float weights in batches: each weight vector is loaded and
// converted once for all 8 tokens, where 4 x 4 tiles do it twice (at 151936x896 f16, 8 tokens,
// one thread, 12-13 GB/s against 8-9.5 with AVX-512). q8_0 and the slice types keep 4 x 4: their
// per-token work per step (activation load, scales) is shared by 4 rows instead of 2.
template <class Ops, int R>
void tile_tokens_wide(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                      std::int64_t r, float* y, std::int64_t y_stride, bool may_prefetch = true) {
  int t0 = 0;
  for (; t0 + 8 <= n_tokens; t0 += 8) tile<Ops, R, 8>(w, x, xq, t0, r, y, y_stride, may_prefetch);
  switch (n_tokens - t0) {
    case 0: break;
    case 1: tile<Ops, R, 1>(w, x, xq, t0, r, y, y_stride, may_prefetch); break;
    case 2: tile<Ops, R, 2>(w, x, xq, t0, r, y, y_stride, may_prefetch); break;
    case 3: tile<Ops, R, 3>(w, x, xq, t0, r, y, y_stride, may_prefetch); break;
    case 4: tile<Ops, R, 4>(w, x, xq, t0, r, y, y_stride, may_prefetch); break;
    case 5: tile<Ops, R, 5>(w, x, xq, t0, r, y, y_stride, may_prefetch); break;
    case 6: tile<Ops, R, 6>(w, x, xq, t0, r, y, y_stride, may_prefetch); break;
    default: tile<Ops, R, 7>(w, x, xq, t0, r, y, y_stride, may_prefetch); break;
  }
}

// Float weights from kBlockedTokens tokens on (prefill), a chunk of rows at a time: its f16 or bf16
// rows converted to f32 once into a per-thread buffer (not once per 8-token group: 64 times at 512
// tokens), then the tokens in blocks whose activations stay in L2 (kBlockedActivationBytes), each
// block against every row tile of the chunk, whose converted rows stay there too. Before, each
// 3-row tile streamed all of the step's activations from L3 (1.8 MB at 512 tokens x 896 columns).
// Every (row, token) output is computed by the same tile code from the same f32 values in the same
// order as without the blocking: the same bits, alone or in any batch (kernels_test).
inline constexpr int kBlockedTokens = 16;
inline constexpr std::int64_t kBlockedActivationBytes = 256 << 10;

// Tokens per block of a blocked prefill: as many as keep their f32 activations of `cols` values
// within kBlockedActivationBytes, a multiple of the tile's `tile_tokens`, at least one tile (n_tokens
// >= kBlockedTokens >= tile_tokens), at most n_tokens.
inline int blocked_token_count(std::int64_t cols, int tile_tokens, int n_tokens) {
  const std::int64_t fit = kBlockedActivationBytes / (cols * static_cast<std::int64_t>(sizeof(float))) / tile_tokens * tile_tokens;
  return static_cast<int>(std::clamp<std::int64_t>(fit, tile_tokens, n_tokens));
}

template <class Ops>
void blocked_float_rows(const WeightView& w, const float* x, int n_tokens, std::int64_t row_begin, std::int64_t row_end,
                        float* y, std::int64_t y_stride) {
  const std::int64_t n_rows = row_end - row_begin;
  const std::uint8_t* rows = static_cast<const std::uint8_t*>(w.data) + row_begin * w.row_bytes;
  WeightView f32{WeightType::kF32, rows, n_rows, w.cols, w.row_bytes};
  if (w.type != WeightType::kF32) {
    thread_local std::vector<float> converted;
    converted.resize(static_cast<std::size_t>(n_rows * w.cols));
    for (std::int64_t i = 0; i < n_rows; ++i) {
      float* out = &converted[static_cast<std::size_t>(i * w.cols)];
      if (w.type == WeightType::kF16) {
        Ops::template dequantize_float_row<WeightType::kF16>(rows + i * w.row_bytes, w.cols, out);
      } else {
        Ops::template dequantize_float_row<WeightType::kBF16>(rows + i * w.row_bytes, w.cols, out);
      }
    }
    f32.data = converted.data();
    f32.row_bytes = static_cast<std::size_t>(w.cols) * sizeof(float);
  }
  const int block = blocked_token_count(w.cols, 8, n_tokens);
  const QuantizedActivations none{};
  for (int t0 = 0; t0 < n_tokens; t0 += block) {
    const int nt = std::min(block, n_tokens - t0);
    const float* xb = x + static_cast<std::int64_t>(t0) * w.cols;
    float* yb = y + t0 * y_stride + row_begin;
    std::int64_t r = 0;
    // No software prefetch: converted rows are in L2 (a prefetch would run past the buffer), and f32
    // rows, used in place, are one contiguous 32 KiB chunk that the hardware prefetcher follows.
    for (; r + Ops::kWideRows <= n_rows; r += Ops::kWideRows) tile_tokens_wide<Ops, Ops::kWideRows>(f32, xb, none, nt, r, yb, y_stride, false);
    for (; r < n_rows; ++r) tile_tokens_wide<Ops, 1>(f32, xb, none, nt, r, yb, y_stride, false);
  }
}

template <class Ops>
void tiled_matmul_rows(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                 std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride) {
  std::int64_t r = row_begin;
  if constexpr (Ops::kWideTokens > 0) {
    if (n_tokens >= Ops::kWideTokens && !is_quantized(w.type)) {
      if (n_tokens >= kBlockedTokens) return blocked_float_rows<Ops>(w, x, n_tokens, row_begin, row_end, y, y_stride);
      for (; r + Ops::kWideRows <= row_end; r += Ops::kWideRows) tile_tokens_wide<Ops, Ops::kWideRows>(w, x, xq, n_tokens, r, y, y_stride);
      for (; r < row_end; ++r) tile_tokens_wide<Ops, 1>(w, x, xq, n_tokens, r, y, y_stride);
      return;
    }
  }
  if (n_tokens == 1) {
    for (; r + Ops::kSingleTokenRows <= row_end; r += Ops::kSingleTokenRows) {
      tile<Ops, Ops::kSingleTokenRows, 1>(w, x, xq, 0, r, y, y_stride);
    }
    if constexpr (Ops::kSingleTokenRows > Ops::kBatchRows) {
      for (; r + Ops::kBatchRows <= row_end; r += Ops::kBatchRows) tile<Ops, Ops::kBatchRows, 1>(w, x, xq, 0, r, y, y_stride);
    }
  } else {
    for (; r + Ops::kBatchRows <= row_end; r += Ops::kBatchRows) {
      tile_tokens<Ops, Ops::kBatchRows>(w, x, xq, n_tokens, r, y, y_stride);
    }
  }
  for (; r < row_end; ++r) tile_tokens<Ops, 1>(w, x, xq, n_tokens, r, y, y_stride);
}

// One slice-form row as f32 for the prefill path: a block's scales and mins per 16 weights once
// (block_groups for K super-blocks), then codes widened to f32 and scale * u - min.
template <WeightType kType>
void dequantize_slice_row(const std::uint8_t* row, std::int64_t cols, float* out) {
  constexpr int kPer = slices_per_block<kType>();
  const __m256i pairs_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), pairs_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
  for (std::int64_t b = 0; b < cols / (kSliceElems * kPer); ++b) {
    const std::uint8_t* block = row + b * block_bytes<kType>();
    alignas(32) float scale16[16], min16[16];
    if constexpr (kPer > 1) {
      const BlockGroups g = block_groups<kType>(block);
      if constexpr (group_elems<kType>() == 32) {
        _mm256_store_ps(scale16, _mm256_permutevar8x32_ps(g.scale_lo, pairs_lo));
        _mm256_store_ps(scale16 + 8, _mm256_permutevar8x32_ps(g.scale_lo, pairs_hi));
      } else {
        _mm256_store_ps(scale16, g.scale_lo);
        _mm256_store_ps(scale16 + 8, g.scale_hi);
      }
      _mm256_store_ps(min16, g.min_lo);
      _mm256_store_ps(min16 + 8, g.min_hi);
    } else {
      const SliceParams p = slice_params<kType>(block, 0);
      scale16[0] = scale16[1] = p.scale[0];
      min16[0] = min16[1] = p.min[0];
    }
    for (int s = 0; s < kPer; ++s, out += kSliceElems) {
      const __m256i u = slice_values_256<kType>(block, s);
      const __m128i halves[2] = {_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)};
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_set1_ps(scale16[2 * s + h]), min = _mm256_set1_ps(min16[2 * s + h]);
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(halves[h]));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(halves[h], halves[h])));
        _mm256_storeu_ps(out + h * 16, _mm256_fmsub_ps(scale, lo, min));
        _mm256_storeu_ps(out + h * 16 + 8, _mm256_fmsub_ps(scale, hi, min));
      }
    }
  }
}

template <class Ops>
void tiled_dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) {
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* row = static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes;
    float* o = out + (r - row_begin) * w.cols;
    switch (w.type) {
      case WeightType::kF32: Ops::template dequantize_float_row<WeightType::kF32>(row, w.cols, o); break;
      case WeightType::kF16: Ops::template dequantize_float_row<WeightType::kF16>(row, w.cols, o); break;
      case WeightType::kBF16: Ops::template dequantize_float_row<WeightType::kBF16>(row, w.cols, o); break;
      case WeightType::kQ8_0: Ops::dequantize_q8_0_row(row, w.cols, o); break;
      default:
        with_slice_type(w.type, [&]<WeightType kType>() { dequantize_slice_row<kType>(row, w.cols, o); });
    }
  }
}

}  // namespace
}  // namespace kvstash::kernels
