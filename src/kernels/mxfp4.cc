#include "kernels/mxfp4.h"

#include <cmath>
#include <cstring>

namespace kvstash::kernels {

void mxfp4_dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) {
  const std::int64_t blocks = w.cols / kMxfp4BlockElems;
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = static_cast<const std::uint8_t*>(w.data) + static_cast<std::size_t>(r) * w.row_bytes;
    for (std::int64_t i = 0; i < blocks; ++i, b += kMxfp4BlockBytes, out += kMxfp4BlockElems) {
      const float d = mxfp4_half_scale(b[0]);
      for (int j = 0; j < 16; ++j) {
        out[j] = static_cast<float>(kMxfp4Values[b[1 + j] & 15]) * d;
        out[j + 16] = static_cast<float>(kMxfp4Values[b[1 + j] >> 4]) * d;
      }
    }
  }
}

void mxfp4_matmul_rows(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                       std::int64_t row_end, float* y, std::int64_t y_stride) {
  const std::int64_t blocks = w.cols / kMxfp4BlockElems;
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const auto* row = static_cast<const std::uint8_t*>(w.data) + static_cast<std::size_t>(r) * w.row_bytes;
    for (int t = 0; t < n_tokens; ++t) {
      const std::int8_t* xv = xq.values + static_cast<std::size_t>(t) * w.cols;
      const float* xs = xq.scales + static_cast<std::size_t>(t) * blocks;
      const std::uint8_t* b = row;
      float sum = 0.0f;
      for (std::int64_t i = 0; i < blocks; ++i, b += kMxfp4BlockBytes, xv += kMxfp4BlockElems) {
        std::int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; ++j) {
          lo += xv[j] * kMxfp4Values[b[1 + j] & 15];
          hi += xv[j + 16] * kMxfp4Values[b[1 + j] >> 4];
        }
        sum += xs[i] * mxfp4_half_scale(b[0]) * static_cast<float>(lo + hi);
      }
      y[t * y_stride + r] = sum;
    }
  }
}

void quantize_mxfp4(const float* x, std::int64_t n, void* out) {
  auto* b = static_cast<std::uint8_t*>(out);
  for (std::int64_t i = 0; i < n; i += kMxfp4BlockElems, x += kMxfp4BlockElems, b += kMxfp4BlockBytes) {
    float amax = 0.0f;
    for (int j = 0; j < kMxfp4BlockElems; ++j) amax = std::max(amax, std::fabs(x[j]));
    const auto e = static_cast<std::uint8_t>(amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0);
    const float d = mxfp4_half_scale(e);
    const auto nearest = [d](float v) {
      int best = 0;
      float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - v);
      for (int c = 1; c < 16; ++c) {
        const float err = std::fabs(static_cast<float>(kMxfp4Values[c]) * d - v);
        if (err < best_err) best = c, best_err = err;
      }
      return static_cast<std::uint8_t>(best);
    };
    b[0] = e;
    for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<std::uint8_t>(nearest(x[j]) | nearest(x[j + 16]) << 4);
  }
}

}  // namespace kvstash::kernels
