// Internal to kernels: Q8_0 weights interleaved by 16 rows (WeightType::kQ8_0x16), the layout the
// AVX-512 VNNI decode kernel reads, made from a GGUF Q8_0 matrix when the weights are copied at
// load (kernels.h repack_for_decode). Never stored in a file.
//
// Why: in the GGUF layout a row's 32-weight blocks are 34 bytes apart, each with its own f16 scale,
// so the Q8_0 kernel spends most of its instructions per block on fetching and converting one
// scale per row and on lining two blocks up in a register (about 17 instructions per row and pair
// of blocks), and decode at batch 1 was compute-bound against the memory it streams. Here one
// 32-bit lane of a register is one row: a block of 16 rows is 8 registers of 4 weights per row,
// multiplied by the token's 4 activations broadcast (one VNNI instruction per 64 weights), its 16
// scales are one f16 load, and the block's integer sum per row is converted and scaled once.
//
// Layout of a matrix of R rows (R % 16 == 0) by C columns (C % 64 == 0), B = C / 32 blocks per row;
// the same bytes as the GGUF matrix (16 rows x B blocks x 34 bytes per group), reordered:
//   group g (rows 16g..16g+15) starts at g * 16 * row_bytes, row_bytes = 34 B;
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
// Every path computes a row's dot product the same way: per block the exact integer sum
// of (w + 128 - 128) * x_q, converted to f32, times (d_w * d_x) rounded once, added with one fused
// multiply-add in block order. So the scalar statement (kernels_scalar.cc) and the AVX-512 kernel
// agree bit for bit, and a token's result does not depend on the other tokens of its batch.
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

}  // namespace kvstash::kernels::q8x16
