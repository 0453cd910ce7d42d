// MXFP4 (GGUF type 39, gpt-oss's expert weights): blocks of 32 values, one E8M0 scale byte then 16
// bytes of 4-bit E2M1 codes; value j of a block is the low nibble of byte j, value j + 16 its high
// nibble. A code is a sign bit and the E2M1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}; the block
// scale is 2^(e - 127). As llama.cpp does, the magnitudes are kept doubled as small integers
// (kMxfp4Values) and the scale halved (2^(e - 128)), so a dot product against 8-bit activations is
// an integer sum per block times one float.
//
// matmul multiplies the activations quantized per 32 (QuantizedActivations, as every 32-block type
// here and llama.cpp's mxfp4 x q8_0 do), for decode and prefill alike (the sgemm path only where an
// operator opts in to it): per block the exact integer dot product times (half scale x activation
// scale). Scalar code, and kernels for AVX2 and for the AVX-512 path (mxfp4_tiles.h: vpshufb table
// lookup, maddubs or VNNI integer dot, one fused multiply-add per block into 8 float lanes).
// Bits, as kernels.h promises for every type: the AVX2 and AVX-512 kernels give each other's bits;
// the scalar kernel's differ from theirs by float reassociation only (it adds block after block
// without fused multiply-adds). Within a path a token's result never depends on how many tokens
// share the call or which rows share its tile (batch invariance, mxfp4_test.cc).
// On the AVX-512 path a loaded model's MXFP4 matrices (rows % 16 == 0) are copied interleaved by 16
// rows (kMxfp4x16, interleaved16.h) for a VNNI kernel that takes 16 rows per register (matmul_avx512.cc);
// that layout gives the scalar statement's bits on every path, as the other interleaved types do.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {

inline constexpr int kMxfp4BlockElems = 32;
inline constexpr int kMxfp4BlockBytes = 17;
// The 16 E2M1 codes' values, doubled: sign bit 3, magnitude codes 0..7.
inline constexpr std::int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128): the block scale halved, to go with the doubled values. Exact for every e (denormal
// for e < 2, as llama.cpp's ggml_e8m0_to_fp32_half).
inline float mxfp4_half_scale(std::uint8_t e) {
  // The float with only exponent bits e - 1 (e >= 2) is 2^(e - 128); below, the denormals
  // 2^-128 and 2^-127 (mantissa bit 21 or 22).
  const std::uint32_t bits = e < 2 ? std::uint32_t{0x00200000} << e : static_cast<std::uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void mxfp4_dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out);
// y[t * y_stride + r] = dot(row r, activations of token t) for rows [row_begin, row_end).
void mxfp4_matmul_rows(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                       std::int64_t row_end, float* y, std::int64_t y_stride);
// The same on AVX2 (mxfp4_avx2.cc) and on the AVX-512 path (mxfp4_avx512.cc, with VNNI), only where
// the CPU has them; the two give the same bits.
void mxfp4_matmul_rows_avx2(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                            std::int64_t row_end, float* y, std::int64_t y_stride);
void mxfp4_matmul_rows_avx512(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                              std::int64_t row_end, float* y, std::int64_t y_stride);
// Encodes n values (a multiple of 32) as llama.cpp's reference quantizer does: per block, the
// exponent e = floor(log2(max |x|)) - 2 + 127 (0 for an all-zero block), each value the nearest
// code (the first of equals).
void quantize_mxfp4(const float* x, std::int64_t n, void* out);

}  // namespace kvstash::kernels
