// Scalar encoders for every quantized weight type, and the Q8_0 decoder. The model generator and
// `kvstash quantize` write weights with them; tests decode what they wrote with
// reference_dequant.h.
//
// The encoders round to nearest (no search for better scales, no importance matrix): per group
// (16 or 32 weights) a scale from the group's range, then per super-block the 4/6/8-bit
// quantization of those scales against one f16 super-scale, then the weights re-rounded against
// the scales as stored. An all-zero group encodes as zeros.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace kvstash::kernels {

// Decodes n values (n a multiple of 32) from Q8_0 blocks into out.
void dequantize_row_q8_0(const void* blocks, std::int64_t n, float* out);

}  // namespace kvstash::kernels
