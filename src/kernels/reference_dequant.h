// The reference that every quantized kernel is checked against: decodes one block at a time, in
// double precision, straight from the GGUF block layout (element by element, in the order the
// format describes its fields), sharing no code with the kernels' slice unpacking.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace kvstash::kernels {

// Decodes one block of `type` (weight_block_elems(type) values) into out.
void reference_dequantize_block(WeightType type, const std::uint8_t* block, double* out);
// Decodes n values (a multiple of the block) of a row.
void reference_dequantize_row(WeightType type, const void* row, std::int64_t n, double* out);

}  // namespace kvstash::kernels
