// Scalar Q8_0 encoding and decoding: the reference that SIMD kernels are checked against, and the
// path the model generator uses to write Q8_0 weights.
//
// Q8_0 block (ggml's block_q8_0, 34 bytes): an IEEE half scale d, then 32 int8 values q;
// value i of the block is d * q[i]. Encoding picks d = max|x| / 127 and q = round(x / d).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace kvstash::kernels {

// Decodes n values (n a multiple of 32) from Q8_0 blocks into out.
void dequantize_row_q8_0(const void* blocks, std::int64_t n, float* out);

}  // namespace kvstash::kernels
