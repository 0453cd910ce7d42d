// MXFP4 matmul on AVX2 (mxfp4.h): mxfp4_tiles.h compiled for AVX2 + FMA (maddubs + madd for a
// block's integer dot product).
#include "kernels/mxfp4_tiles.h"

namespace kvstash::kernels {

void mxfp4_matmul_rows_avx2(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                            std::int64_t row_end, float* y, std::int64_t y_stride) {
  mxfp4_tiles::matmul_rows<false>(w, xq, n_tokens, row_begin, row_end, y, y_stride);
}

}  // namespace kvstash::kernels
