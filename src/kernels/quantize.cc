// Scalar Q8_0 quantisation (kernels::quantize_q8_0) and its inverse.
#include "kernels/quantize.h"

#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "kernels/kernels.h"

namespace kvstash::kernels {
namespace {
constexpr float kQ8Max = 127.0f;  // the largest magnitude an int8 quant takes, so -127..127 is symmetric
}  // namespace

void quantize_q8_0(const float* x, std::int64_t n, void* out) {
  auto* dst = static_cast<std::uint8_t*>(out);
  for (std::int64_t b = 0; b < n / kQ8_0BlockElems; ++b, x += kQ8_0BlockElems, dst += kQ8_0BlockBytes) {
    float amax = 0.0f;
    for (int i = 0; i < kQ8_0BlockElems; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / kQ8Max;
    // Quantise with the exact scale (as ggml does); the stored half rounds it afterwards.
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    const std::uint16_t d16 = f32_to_f16(d);
    std::memcpy(dst, &d16, 2);
    for (int i = 0; i < kQ8_0BlockElems; ++i) {
      const float q = std::round(x[i] * inv_d);
      dst[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
    }
  }
}

void dequantize_row_q8_0(const void* blocks, std::int64_t n, float* out) {
  const auto* src = static_cast<const std::uint8_t*>(blocks);
  for (std::int64_t b = 0; b < n / kQ8_0BlockElems; ++b, src += kQ8_0BlockBytes, out += kQ8_0BlockElems) {
    std::uint16_t d16;
    std::memcpy(&d16, src, 2);
    const float d = f16_to_f32(d16);
    for (int i = 0; i < kQ8_0BlockElems; ++i) out[i] = d * static_cast<float>(static_cast<std::int8_t>(src[2 + i]));
  }
}

}  // namespace kvstash::kernels
