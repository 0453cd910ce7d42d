// Internal to kernels: weights interleaved by 16 rows, the layouts the AVX-512 VNNI decode kernels
// read, made from GGUF Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16 and MXFP4 matrices
// when the weights are copied at load (kernels.h repack_for_decode). Never stored in a file. (The namespace is q8x16 for all of them:
// Q8_0 came first.)
//
// Why: in the GGUF layouts each row's blocks carry their own scales, so the kernels spent most of
// their instructions per block on fetching and converting one row's scales and lining blocks up in
// a register (Q8_0: about 17 instructions per row and pair of blocks), and decode at batch 1 and
// small batches was compute-bound. Here one 32-bit lane of a register is one row: 32 weights of 16
// rows are 8 registers of 4 weights per row, each multiplied by the token's 4 activations broadcast
// (one VNNI instruction per 64 weights); the 16 rows' scales are one load, and each row's exact
// integer sum per 32 weights is converted and scaled once.
//
// Q8_0 as kQ8_0x16:
// Layout of a matrix of R rows (R % 16 == 0) by C columns (C % 64 == 0), B = C / 32 blocks per row;
// the same bytes as the GGUF matrix (16 rows x B blocks x 34 bytes per group), reordered:
//   group g (rows 16g..16g+15) starts at g * 16 * row_bytes, row_bytes = 34 x B bytes;
//   unit u of the group (blocks 2u, 2u+1) starts at 1088 u within the group:
//     bytes    0- 31  the f16 scales of block 2u, row 16g + l at 2 l;
//     bytes   32- 63  the same for block 2u + 1;
//     bytes  64-575   block 2u's weights: 8 chunks k of 64 bytes, chunk k holding weights 4k..4k+3
//                     of row 16g + l at 4 l, each stored + 128 (as an unsigned byte: VNNI multiplies
//                     unsigned by signed bytes);
//     bytes 576-1087  the same for block 2u + 1.
// Every group and unit is a multiple of 64 bytes (1088 = 17 x 64), so every 64-byte chunk is one
// aligned cache line when the matrix starts on one.
//
// Q4_K as kQ4_Kx16: rows % 16 == 0, C % 256 == 0; group g starts at g * (C / 256) * 2368, and its
// super-block s (weights 256 s .. 256 s + 255 of each row) at 2368 s within the group:
//     bytes    0- 31  d of row 16g + l at 2 l (f16);      bytes 32-63  dmin, the same;
//     bytes   64-191  the 6-bit scale of sub-block j (32 weights) of row l at 64 + 16 j + l (a byte);
//     bytes  192-319  the 6-bit mins, by pairs of sub-blocks: the min of sub-block 2p + i of row l
//                     at 192 + 32 p + 2 l + i (widened to 16 bits, lane l holds the pair for one
//                     16-bit multiply-add against the two sub-blocks' activation sums);
//     bytes 320-2367  the codes: pair p (sub-blocks 2p, 2p+1), chunk k at 320 + 512 p + 64 k holds
//                     row l's GGUF qs bytes 32 p + 4 k .. + 3 at 4 l: their low nibbles are weights
//                     4k..4k+3 of sub-block 2p, their high nibbles those of sub-block 2p + 1.
//   w = d sc u - dmin m. The scales and mins as bytes make it 148 bytes per row and super-block
//   instead of 144 (+2.8%): unpacking the 6-bit fields per row in vector code cost more than the
//   bytes.
//
// Q5_K as kQ5_Kx16: Q4_K's layout with 640-byte pairs, super-block s of group g at 2880 s within the
// group (g * (C / 256) * 2880): bytes 0-319 as Q4_K's; pair p's codes at 320 + 640 p, chunk k at
// + 64 k (Q4_K's: the low and high nibbles of sub-blocks 2p and 2p + 1), then its fifth bits as 16
// masks of 64 bits: mask k (0-7) of sub-block 2p + i at 320 + 640 p + 512 + 64 i + 8 k has bit
// 4 l + n set when weight 4 k + n of that sub-block of row l has its fifth bit (the bytes of code
// chunk k that get + 16). 180 bytes per row and super-block instead of 176 (+2.3%); each pair's
// bytes follow one another in the order the kernel reads them.
//   w = d sc u - dmin m, u = nibble | fifth bit << 4.
//
// Q6_K as kQ6_Kx16: rows % 16 == 0, C % 256 == 0; super-block s of group g at 3392 s within the
// group (g * (C / 256) * 3392):
//     bytes    0-  31  d of row l at 2 l (f16);
//     bytes   32- 287  the int8 scale of 16-weight group q (0-15) of row l at 32 + 16 q + l;
//     bytes  288- 319  zero (so that the codes start on a cache line: 212 bytes per row and
//                      super-block instead of 210, +1%);
//     bytes  320-3391  the codes, 64-byte chunks: ql chunk (h, jj, k) holds row l's ql bytes
//                      64 h + 32 jj + 4 k .. + 3 at 4 l (low nibbles: slice 4h + jj, high: slice
//                      4h + jj + 2); qh chunk (h, k) holds row l's qh bytes 32 h + 4 k .. + 3 at 4 l
//                      (bits 2j, 2j+1: slice 4h + j's top two bits). In the order the one-token
//                      kernel reads them, each once: for each half h (1536 bytes from 320 + 1536 h)
//                      and k = 0..7, ql (h, 0, k), ql (h, 1, k), qh (h, k) (at + 192 k, + 64, + 128);
//                      low_at and high_at below. The kernel for several tokens reads a slice at a
//                      time, qh chunks four times and ql chunks twice, from L1.
//                      (History, one thread's decode, BENCHMARKS.md, issue 14: all ql chunks then
//                      all qh chunks read 0.83-0.90 of a read of the same copies; ql (h, 0, k) and
//                      qh (h, k) alternating, then ql (h, 1, k), the slice kernel's first-read
//                      order, 0.86-0.97. In the engine, one thread, llama-3.2-1b q6_k decode
//                      over the paired read: that order 0.79-0.84, this one with the one-token
//                      kernel and its prefetch into L1 0.85-0.89.)
//   w = d sc (u - 32), u = low nibble | top bits << 4.
//
// Q2_K as kQ2_Kx16: rows % 16 == 0, C % 256 == 0; super-block s of group g at 1344 s within the
// group (g * (C / 256) * 1344), the same bytes as the GGUF blocks (16 x 84), reordered:
//     bytes    0-  31  d of row l at 2 l (f16);      bytes 32-63  dmin, the same;
//     bytes   64- 319  the GGUF scale byte (scale | min << 4) of 16-weight group 2 j + i (slice j's
//                      first or second half) of row l at 64 + 32 j + 2 l + i: widened to 16 bits,
//                      lane l holds the slice's two mins for one 16-bit multiply-add against the two
//                      halves' activation sums, and its two scales;
//     bytes  320-1343  per step k (0-7, weights 4k..4k+3 of each 32-weight slice), qs chunk (0, k)
//                      and qs chunk (1, k) from 320 + 128 k, chunk (h, k) holding row l's GGUF qs
//                      bytes 32 h + 4 k .. + 3 at 4 l (bits 2j, 2j+1: slice 4h + j's code).
//   w = d sc u - dmin m.
//
// Q3_K as kQ3_Kx16: rows % 16 == 0, C % 256 == 0; super-block s of group g at 1856 s within the
// group (g * (C / 256) * 1856):
//     bytes    0-  31  d of row l at 2 l (f16);
//     bytes   32- 287  the signed scale (the GGUF 6-bit field - 32) of 16-weight group q (0-15) of
//                      row l at 32 + 16 q + l (a byte);
//     bytes  288- 319  zero (the codes start on a cache line: 116 bytes per row and super-block
//                      instead of 110, +5.5%);
//     bytes  320-1855  per step k (0-7, weights 4k..4k+3 of each 32-weight slice), 192 bytes from
//                      320 + 192 k: qs chunk (0, k) and qs chunk (1, k), chunk (h, k) holding row
//                      l's GGUF qs bytes 32 h + 4 k .. + 3 at 4 l (bits 2j, 2j+1: slice 4h + j's
//                      low two bits), then 8 masks of 64 bits, the one of slice s (0-7) at + 128 +
//                      8 s with bit 4 l + i set when weight 4 k + i of slice s of row l has its hmask
//                      bit (the bytes of the code register that get + 4).
//   w = d sc (u - 4), u = low bits | hmask bit << 2 (GGUF: q - 4 where the hmask bit is clear).
//
// Q4_0, Q5_0, Q4_1, Q5_1 as kQ4_0x16, kQ5_0x16, kQ4_1x16, kQ5_1x16 (b32 below; `fifth`: Q5_0 and
// Q5_1, `min`: Q4_1 and Q5_1): rows % 16 == 0, C % 64 == 0; group g at g * (C / 64) * U, unit u
// (blocks 2u, 2u+1) at U u within it, U = 576 (Q4_0), 704 (Q5_0), 640 (Q4_1) or 768 (Q5_1):
//     bytes   0- 63  the f16 d of block 2u + j of row l at 32 j + 2 l;
//     with a min, bytes 64-127: the f16 m of block 2u + j of row l at 64 + 32 j + 2 l;
//     with a fifth bit, the next 128 bytes (from M = 64, or 128 with a min): the fifth bits of block
//                    2u + j as 8 masks of 64 bits at M + 64 j + 8 m: mask m = 4 h + k has bit 4 l + i
//                    set when weight 16 h + 4 k + i of row l has its fifth bit (the bytes of code
//                    register m below that get + 16);
//     then the codes of block 2u + j (256 bytes each): chunk k (0-3) at 64 k holds row l's qs bytes
//                    4k..4k+3 at 4 l (low nibbles: weights 4k..4k+3, high: 16+4k..16+4k+3).
//   w = d (u - 8) (Q4_0), d (u - 16) (Q5_0), d u + m (Q4_1, Q5_1). The same bytes as the GGUF blocks
//   (16 x 2 x 18, 22, 20, 24), reordered.
//
// F16 as kF16x16: rows % 16 == 0, any C; group g at g * 32 C, column c at 32 c within it: the f16
//   value of row 16g + l at 2 l. The same bytes as the GGUF matrix, reordered. Why, though F16 had
//   no scales to fetch: in rows, a tile of 8 rows is 8 streams 2 C bytes apart, and one core read
//   them at 0.78-0.84 of what it reads of one stream (issue 14's one-thread decode); a group is one
//   stream, which a prototype read at 0.90-1.07 of a plain read on one thread (Zen 4) with no
//   software prefetch (0.82-0.94 with a 1 KiB lead, 0.66-0.74 with 4 KiB). Sapphire Rapids needs
//   one: 3 KiB ahead into L2 (f16x16_prefetch_ahead in matmul_avx512.cc). One column's 16 weights
//   are one register, times the token's activation broadcast: no horizontal sums.
//
// MXFP4 as kMxfp4x16 (mxfp4.h): rows % 16 == 0, any whole blocks (C % 32 == 0: gpt-oss's 2880 columns
// are 90 blocks, not a multiple of 64), B = C / 32 blocks per row; group g at g * (64 ceil(B / 4) +
// 256 B), unit u (blocks 4u .. 4u + 3, fewer in the last unit) at 1088 u within it:
//     bytes   0-  63  the E8M0 scale byte of block 4u + j of row l at 16 j + l (zero past the last block);
//     bytes  64-1087  block 4u + j's codes from 64 + 256 j: chunk k (0-3) at + 64 k holds row l's GGUF
//                     code bytes 4k..4k+3 at 4 l (their low nibbles: weights 4k..4k+3, high: 16 + 4k..).
//   Each unit starts on a cache line when the matrix does (1088 = 17 x 64): with B % 4 == 0 the same
//   size as the GGUF matrix, else up to 48 bytes per group more (0.1 % at 2880 columns).
//
// Every path computes a row's dot product the same way, in order:
//   Q8_0, per 32 weights: acc = fma(isum, d_w * d_x, acc), isum the exact integer sum of
//         (w + 128 - 128) * x_q, with x_q, d_x the activations quantized per 32 (one scale each);
//   Q4_0, Q5_0: the same with isum the exact sum of (u - 8) x_q, (u - 16) x_q;
//   Q4_1, Q5_1: the same with isum the exact sum of u x_q, then acc = fma(m_w, d_x * float(xsum), acc)
//         (xsum the block's sum of x_q, exact);
//   the K types against the activations quantized per 256 (QuantizedActivations::k_*: x_q, one d_x
//   per super-block), per super-block:
//   Q4_K, Q5_K: isc = sum over sub-blocks j of sc_j * (sum of u * x_q), imn = sum over j of m_j * xsum_j
//         (xsum_j the sum of the sub-block's 32 x_q), both exact in int32; then
//         acc = fma(float(isc), d * d_x, acc), acc = fma(-float(imn), dmin * d_x, acc);
//   Q2_K: the same over its 16 groups of 16 weights (xsum_q the sum of the group's 16 x_q);
//   Q6_K: isc = sum over the 16 groups q of 16 weights of sc_q * (sum of (u - 32) * x_q), exact;
//         acc = fma(float(isc), d * d_x, acc); Q3_K the same with u - 4.
//   MXFP4, per 32 weights: acc = fma(isum, s_w * d_x, acc), isum the exact integer sum of v x_q (v the
//         code's doubled E2M1 value, kMxfp4Values) and s_w = 2^(e - 128) (mxfp4_half_scale);
//   F16: four partial sums p_j (j = 0..3), p_j = fma(w_c, x_c, p_j) over c = j, j + 4, ... < C in
//         order from p_j = 0; y = (p0 + p1) + (p2 + p3). Four chains, not one, so that one token is
//         not bound by the FMA latency; the same four whatever the batch.
// each product rounded once, left to right. (The AVX-512 Q4_K kernel keeps the high nibbles in
// place, codes times 16, and so computes 16 isc with (d * d_x) / 16: the same float result, since
// scaling by a power of two commutes with rounding.) So the scalar statement (kernels_scalar.cc)
// and the AVX-512 kernels agree bit for bit, and a token's result does not depend on the other
// tokens of its batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"

namespace kvstash::kernels::q8x16 {

inline constexpr std::int64_t kGroupRows = 16;
inline constexpr std::size_t kUnitBytes = 1088;  // two blocks of 16 rows
inline constexpr std::size_t kScalesBytes = 64;  // both blocks' scales
inline constexpr std::size_t kBlockWeightBytes = 512;

inline bool fits(std::int64_t rows, std::int64_t cols) {
  return rows > 0 && cols > 0 && rows % kGroupRows == 0 && cols % 64 == 0;
}

inline std::size_t group_bytes(std::int64_t cols) {
  return static_cast<std::size_t>(cols / 64) * kUnitBytes;
}

// Where the f16 scale of block b of row r is, and the stored (+128) weight c of row r.
inline std::size_t scale_offset(std::int64_t cols, std::int64_t r, std::int64_t b) {
  return static_cast<std::size_t>(r / kGroupRows) * group_bytes(cols) + static_cast<std::size_t>(b / 2) * kUnitBytes +
         static_cast<std::size_t>(b % 2) * 32 + static_cast<std::size_t>(r % kGroupRows) * 2;
}

inline std::uint16_t scale_bits(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t b) {
  std::uint16_t h;
  std::memcpy(&h, data + scale_offset(cols, r, b), 2);
  return h;
}

inline std::size_t weight_offset(std::int64_t cols, std::int64_t r, std::int64_t c) {
  const std::int64_t b = c / 32, k = (c % 32) / 4;
  return static_cast<std::size_t>(r / kGroupRows) * group_bytes(cols) + static_cast<std::size_t>(b / 2) * kUnitBytes +
         kScalesBytes + static_cast<std::size_t>(b % 2) * kBlockWeightBytes + static_cast<std::size_t>(k) * 64 +
         static_cast<std::size_t>(r % kGroupRows) * 4 + static_cast<std::size_t>(c % 4);
}

// The signed Q8_0 value of weight c of row r.
inline int weight(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t c) {
  return static_cast<int>(data[weight_offset(cols, r, c)]) - 128;
}

// What the K layouts share: columns in super-blocks of 256, super-block s of group g at
// (g * (C / 256) + s) x its bytes, each row's f16 d at 2 l.
namespace k {
inline bool fits(std::int64_t rows, std::int64_t cols) {
  return rows > 0 && cols > 0 && rows % kGroupRows == 0 && cols % 256 == 0;
}
inline std::size_t group_bytes(std::size_t super_block_bytes, std::int64_t cols) {
  return static_cast<std::size_t>(cols / 256) * super_block_bytes;
}
inline const std::uint8_t* super_block(const std::uint8_t* data, std::size_t super_block_bytes, std::int64_t cols,
                                       std::int64_t r, std::int64_t s) {
  return data + static_cast<std::size_t>(r / kGroupRows) * group_bytes(super_block_bytes, cols) +
         static_cast<std::size_t>(s) * super_block_bytes;
}
// Row r's f16 field at `at` in super-block s (16 rows' values side by side: d at 0).
inline std::uint16_t row_f16(const std::uint8_t* data, std::size_t super_block_bytes, std::int64_t cols, std::int64_t r,
                             std::int64_t s, std::size_t at = 0) {
  std::uint16_t h;
  std::memcpy(&h, super_block(data, super_block_bytes, cols, r, s) + at + 2 * (r % kGroupRows), 2);
  return h;
}
// Q3_K's and Q6_K's signed scale of the 16 weights around weight c of row r (byte 32 + 16 q + l;
// d_bits: row_f16).
inline int signed_scale(const std::uint8_t* data, std::size_t super_block_bytes, std::int64_t cols, std::int64_t r,
                        std::int64_t c) {
  return static_cast<std::int8_t>(super_block(data, super_block_bytes, cols, r, c / 256)[32 + 16 * ((c % 256) / 16) + r % kGroupRows]);
}
}  // namespace k

// Q4_K and Q5_K as kQ4_Kx16 and kQ5_Kx16 (`fifth`: Q5_K).
namespace q4k {
inline constexpr std::size_t kScales = 64, kMins = 192, kCodes = 320;
inline constexpr std::size_t pair_bytes(bool fifth) { return fifth ? 640 : 512; }
inline constexpr std::size_t super_block_bytes(bool fifth) { return kCodes + 4 * pair_bytes(fifth); }  // 16 rows x 256 weights
// Where chunk k (0-7) of pair p's codes starts within a super-block, and (Q5_K) the 64-bit
// fifth-bit mask of chunk k of sub-block j.
inline constexpr std::size_t codes_at(bool fifth, int p, int k) {
  return kCodes + pair_bytes(fifth) * static_cast<std::size_t>(p) + 64 * static_cast<std::size_t>(k);
}
inline constexpr std::size_t mask_at(int j, int k) {
  return codes_at(true, j / 2, 0) + 512 + 64 * static_cast<std::size_t>(j % 2) + 8 * static_cast<std::size_t>(k);
}
static_assert(super_block_bytes(false) == 2368 && super_block_bytes(true) == 2880 && mask_at(7, 7) + 8 == 2880);

using k::fits;
inline std::size_t group_bytes(bool fifth, std::int64_t cols) { return k::group_bytes(super_block_bytes(fifth), cols); }
inline const std::uint8_t* super_block(const std::uint8_t* data, bool fifth, std::int64_t cols, std::int64_t r, std::int64_t s) {
  return k::super_block(data, super_block_bytes(fifth), cols, r, s);
}

// Row r's fields in super-block s: d, dmin (f16 bits), and sub-block j's scale and min.
struct RowFields {
  std::uint16_t d, dmin;
  int sc[8], m[8];
};
inline RowFields fields(const std::uint8_t* data, bool fifth, std::int64_t cols, std::int64_t r, std::int64_t s) {
  const std::uint8_t* sb = super_block(data, fifth, cols, r, s);
  const int l = static_cast<int>(r % kGroupRows);
  RowFields f;
  std::memcpy(&f.d, sb + 2 * l, 2);
  std::memcpy(&f.dmin, sb + 32 + 2 * l, 2);
  for (int j = 0; j < 8; ++j) {
    f.sc[j] = sb[kScales + 16 * j + l];
    f.m[j] = sb[kMins + 32 * (j / 2) + 2 * l + j % 2];
  }
  return f;
}

// The 4-bit (Q4_K) or 5-bit (Q5_K) code of weight c of row r.
inline int code(const std::uint8_t* data, bool fifth, std::int64_t cols, std::int64_t r, std::int64_t c) {
  const std::uint8_t* sb = super_block(data, fifth, cols, r, c / 256);
  const int j = static_cast<int>((c % 256) / 32), k = static_cast<int>((c % 32) / 4);
  const int lane = static_cast<int>(r % kGroupRows) * 4 + static_cast<int>(c % 4);
  const std::uint8_t byte = sb[codes_at(fifth, j / 2, k) + static_cast<std::size_t>(lane)];
  int v = j % 2 == 0 ? byte & 15 : byte >> 4;
  if (fifth) {
    std::uint64_t mask;
    std::memcpy(&mask, sb + mask_at(j, k), 8);
    v |= static_cast<int>((mask >> lane) & 1) << 4;
  }
  return v;
}
}  // namespace q4k

// Q2_K as kQ2_Kx16.
namespace q2k {
inline constexpr std::size_t kSuperBlockBytes = 1344;
inline constexpr std::size_t kScales = 64, kCodes = 320, kStepBytes = 128;
// Where qs chunk (h, k) starts within a super-block, and the scale byte of group 2 j + i of row l.
inline constexpr std::size_t low_at(int h, int k) {
  return kCodes + kStepBytes * static_cast<std::size_t>(k) + 64 * static_cast<std::size_t>(h);
}
inline constexpr std::size_t scale_at(int q, int l) {
  return kScales + 32 * static_cast<std::size_t>(q / 2) + 2 * static_cast<std::size_t>(l) + static_cast<std::size_t>(q % 2);
}
static_assert(low_at(1, 7) + 64 == kSuperBlockBytes && scale_at(15, 15) + 1 == kCodes);

using k::fits;
inline std::size_t group_bytes(std::int64_t cols) { return k::group_bytes(kSuperBlockBytes, cols); }
inline const std::uint8_t* super_block(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t s) {
  return k::super_block(data, kSuperBlockBytes, cols, r, s);
}
// d (dmin: false) of row r in super-block s, as f16 bits.
inline std::uint16_t d_bits(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t s, bool d = true) {
  return k::row_f16(data, kSuperBlockBytes, cols, r, s, d ? 0 : 32);
}
// The scale byte (scale | min << 4) of the 16 weights around weight c of row r.
inline int scale_byte(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t c) {
  return super_block(data, cols, r, c / 256)[scale_at(static_cast<int>((c % 256) / 16), static_cast<int>(r % kGroupRows))];
}
// The 2-bit code u of weight c of row r.
inline int code(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t c) {
  const std::uint8_t* sb = super_block(data, cols, r, c / 256);
  const int slice = static_cast<int>((c % 256) / 32), k = static_cast<int>((c % 32) / 4);
  const int lane = static_cast<int>(r % kGroupRows) * 4 + static_cast<int>(c % 4);
  return (sb[low_at(slice / 4, k) + static_cast<std::size_t>(lane)] >> (2 * (slice % 4))) & 3;
}
}  // namespace q2k

// Q3_K as kQ3_Kx16.
namespace q3k {
inline constexpr std::size_t kSuperBlockBytes = 1856;
inline constexpr std::size_t kScales = 32, kCodes = 320, kStepBytes = 192;
// Where qs chunk (h, k) and the hmask mask of slice s at step k start within a super-block.
inline constexpr std::size_t low_at(int h, int k) {
  return kCodes + kStepBytes * static_cast<std::size_t>(k) + 64 * static_cast<std::size_t>(h);
}
inline constexpr std::size_t mask_at(int s, int k) {
  return kCodes + kStepBytes * static_cast<std::size_t>(k) + 128 + 8 * static_cast<std::size_t>(s);
}
static_assert(mask_at(7, 7) + 8 == kSuperBlockBytes);

using k::fits;
inline std::size_t group_bytes(std::int64_t cols) { return k::group_bytes(kSuperBlockBytes, cols); }
inline const std::uint8_t* super_block(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t s) {
  return k::super_block(data, kSuperBlockBytes, cols, r, s);
}
// The 3-bit code u of weight c of row r.
inline int code(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t c) {
  const std::uint8_t* sb = super_block(data, cols, r, c / 256);
  const int slice = static_cast<int>((c % 256) / 32), k = static_cast<int>((c % 32) / 4);
  const int lane = static_cast<int>(r % kGroupRows) * 4 + static_cast<int>(c % 4);
  const int low = (sb[low_at(slice / 4, k) + static_cast<std::size_t>(lane)] >> (2 * (slice % 4))) & 3;
  std::uint64_t mask;
  std::memcpy(&mask, sb + mask_at(slice, k), 8);
  return low | static_cast<int>((mask >> lane) & 1) << 2;
}
}  // namespace q3k

// Q4_0, Q5_0, Q4_1, Q5_1 as kQ4_0x16, kQ5_0x16, kQ4_1x16, kQ5_1x16.
namespace b32 {
struct Form {
  bool fifth = false;  // Q5_0, Q5_1: a fifth bit per weight
  bool min = false;    // Q4_1, Q5_1: w = d u + m
};
// The form of a GGUF type that becomes one of these layouts, or of the layout itself.
inline constexpr Form form_of(WeightType type) {
  return {type == WeightType::kQ5_0 || type == WeightType::kQ5_1 || type == WeightType::kQ5_0x16 || type == WeightType::kQ5_1x16,
          type == WeightType::kQ4_1 || type == WeightType::kQ5_1 || type == WeightType::kQ4_1x16 || type == WeightType::kQ5_1x16};
}
inline constexpr std::size_t kScalesBytes = 64, kMins = 64;
// The offset a code is stored with, w = d (u - offset): Q4_0 8, Q5_0 16; none in the min forms.
inline constexpr int code_offset(Form f) { return f.min ? 0 : f.fifth ? 16 : 8; }
inline constexpr std::size_t masks_at(Form f) { return f.min ? 128 : 64; }
inline constexpr std::size_t codes_at(Form f) { return masks_at(f) + (f.fifth ? 128 : 0); }
inline constexpr std::size_t unit_bytes(Form f) { return codes_at(f) + 512; }
static_assert(unit_bytes({}) == 576 && unit_bytes({true, false}) == 704 && unit_bytes({false, true}) == 640 &&
              unit_bytes({true, true}) == 768);
inline std::size_t group_bytes(Form f, std::int64_t cols) { return static_cast<std::size_t>(cols / 64) * unit_bytes(f); }

inline const std::uint8_t* unit(const std::uint8_t* data, Form f, std::int64_t cols, std::int64_t r, std::int64_t b) {
  return data + static_cast<std::size_t>(r / kGroupRows) * group_bytes(f, cols) + static_cast<std::size_t>(b / 2) * unit_bytes(f);
}
inline std::uint16_t d_bits(const std::uint8_t* data, Form f, std::int64_t cols, std::int64_t r, std::int64_t b) {
  std::uint16_t h;
  std::memcpy(&h, unit(data, f, cols, r, b) + 32 * (b % 2) + 2 * (r % kGroupRows), 2);
  return h;
}
inline std::uint16_t m_bits(const std::uint8_t* data, Form f, std::int64_t cols, std::int64_t r, std::int64_t b) {
  std::uint16_t h;
  std::memcpy(&h, unit(data, f, cols, r, b) + kMins + 32 * (b % 2) + 2 * (r % kGroupRows), 2);
  return h;
}
// The code u (4 or 5 bits) of weight c of row r.
inline int code(const std::uint8_t* data, Form f, std::int64_t cols, std::int64_t r, std::int64_t c) {
  const std::int64_t b = c / 32, w = c % 32, half = w / 16, k = (w % 16) / 4, i = w % 4, l = r % kGroupRows;
  const std::uint8_t* u = unit(data, f, cols, r, b);
  const std::uint8_t byte = u[codes_at(f) + static_cast<std::size_t>(b % 2) * 256 + static_cast<std::size_t>(k * 64 + l * 4 + i)];
  int v = half == 0 ? byte & 15 : byte >> 4;
  if (f.fifth) {
    std::uint64_t mask;
    std::memcpy(&mask, u + masks_at(f) + 64 * (b % 2) + 8 * (4 * half + k), 8);
    v |= static_cast<int>((mask >> (4 * l + i)) & 1) << 4;
  }
  return v;
}
}  // namespace b32

// Q6_K as kQ6_Kx16.
namespace q6k {
inline constexpr std::size_t kSuperBlockBytes = 3392;
inline constexpr std::size_t kScales = 32, kCodes = 320, kHalfBytes = 1536;
// Where ql chunk k of half h, byte offset jj, and qh chunk k of half h start within a super-block.
inline constexpr std::size_t low_at(int h, int jj, int k) {
  return kCodes + kHalfBytes * static_cast<std::size_t>(h) + 192 * static_cast<std::size_t>(k) + 64 * static_cast<std::size_t>(jj);
}
inline constexpr std::size_t high_at(int h, int k) {
  return kCodes + kHalfBytes * static_cast<std::size_t>(h) + 192 * static_cast<std::size_t>(k) + 128;
}
static_assert(high_at(1, 7) + 64 == kSuperBlockBytes);

using k::fits;
inline std::size_t group_bytes(std::int64_t cols) { return k::group_bytes(kSuperBlockBytes, cols); }
inline const std::uint8_t* super_block(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t s) {
  return k::super_block(data, kSuperBlockBytes, cols, r, s);
}
// The 6-bit code u of weight c of row r.
inline int code(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t c) {
  const std::uint8_t* sb = super_block(data, cols, r, c / 256);
  const int slice = static_cast<int>((c % 256) / 32), h = slice / 4, j = slice % 4, k = static_cast<int>((c % 32) / 4);
  const std::size_t lane = static_cast<std::size_t>(r % kGroupRows) * 4 + static_cast<std::size_t>(c % 4);
  const std::uint8_t low = sb[low_at(h, j % 2, k) + lane];
  const std::uint8_t high = sb[high_at(h, k) + lane];
  return (j < 2 ? low & 15 : low >> 4) | ((high >> (2 * j)) & 3) << 4;
}
}  // namespace q6k

// F16 as kF16x16.
namespace f16 {
inline constexpr int kChains = 4;  // the partial sums of the statement above
inline bool fits(std::int64_t rows, std::int64_t cols) { return rows > 0 && cols > 0 && rows % kGroupRows == 0; }
inline std::size_t group_bytes(std::int64_t cols) { return static_cast<std::size_t>(cols) * 2 * kGroupRows; }
// The f16 bits of weight c of row r.
inline std::uint16_t value_bits(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t c) {
  std::uint16_t h;
  std::memcpy(&h, data + static_cast<std::size_t>(r / kGroupRows) * group_bytes(cols) + static_cast<std::size_t>(c) * 32 +
                      static_cast<std::size_t>(r % kGroupRows) * 2, 2);
  return h;
}
}  // namespace f16

// MXFP4 as kMxfp4x16.
namespace mxfp4 {
inline constexpr std::size_t kUnitBytes = 1088, kCodes = 64, kBlockCodes = 256;
inline constexpr int kUnitBlocks = 4;
inline bool fits(std::int64_t rows, std::int64_t cols) {
  return rows > 0 && cols > 0 && rows % kGroupRows == 0 && cols % 32 == 0;
}
inline std::size_t group_bytes(std::int64_t cols) {
  const std::int64_t blocks = cols / 32;
  return static_cast<std::size_t>((blocks + kUnitBlocks - 1) / kUnitBlocks) * kCodes + static_cast<std::size_t>(blocks) * kBlockCodes;
}
// The unit holding block b of row r.
inline const std::uint8_t* unit(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t b) {
  return data + static_cast<std::size_t>(r / kGroupRows) * group_bytes(cols) + static_cast<std::size_t>(b / kUnitBlocks) * kUnitBytes;
}
// The E8M0 scale byte of block b of row r.
inline std::uint8_t scale_byte(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t b) {
  return unit(data, cols, r, b)[16 * (b % kUnitBlocks) + r % kGroupRows];
}
// The 4-bit code of weight c of row r.
inline int code(const std::uint8_t* data, std::int64_t cols, std::int64_t r, std::int64_t c) {
  const std::int64_t b = c / 32, j = c % 32, k = (j % 16) / 4;
  const std::uint8_t byte = unit(data, cols, r, b)[kCodes + kBlockCodes * static_cast<std::size_t>(b % kUnitBlocks) +
                                                    static_cast<std::size_t>(64 * k + 4 * (r % kGroupRows) + j % 4)];
  return j < 16 ? byte & 15 : byte >> 4;
}
}  // namespace mxfp4

}  // namespace kvstash::kernels::q8x16
