// MXFP4 matmul on the AVX-512 path (mxfp4.h): mxfp4_tiles.h compiled with AVX512-VNNI (one vpdpbusd
// for a block's integer dot product, on 256-bit registers) and 4-row batch tiles (32 registers).
#include "kernels/mxfp4_tiles.h"

namespace kvstash::kernels {

void mxfp4_matmul_rows_avx512(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                              std::int64_t row_end, float* y, std::int64_t y_stride) {
  mxfp4_tiles::matmul_rows<true>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
}

}  // namespace kvstash::kernels
