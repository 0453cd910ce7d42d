// GELU (tanh approximation) as llama.cpp's CPU backend computes it: each input rounded to f16 and
// looked up in a table of GELU values that are themselves rounded to f16 (ggml-cpu's
// GGML_GELU_FP16); |x| >= 10 bypasses the table (0 below -10, x above 10). Gemma 3's feed-forward
// depends on it: the exact GELU moves greedy tokens of a random-weight model away from llama.cpp's
// (../shared/design/MODELS.md). The table is ours, built from the formula on first use.
#include <array>
#include <cmath>
#include <cstdint>

#include "common/fp16.h"
#include "kernels/kernels.h"

namespace kvstash::kernels {
namespace {

// gelu_tanh(x) = x/2 * (1 + tanh(sqrt(2/pi) * x * (1 + 0.044715 x^2))), evaluated in float.
float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCubic = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCubic * x * x)));
}

// GELU of every f16 value, as f16 bits.
const std::array<std::uint16_t, 1 << 16>& gelu_f16_table() {
  static const std::array<std::uint16_t, 1 << 16> table = [] {
    std::array<std::uint16_t, 1 << 16> t{};
    for (std::uint32_t h = 0; h < t.size(); ++h) t[h] = f32_to_f16(gelu_tanh(f16_to_f32(static_cast<std::uint16_t>(h))));
    return t;
  }();
  return table;
}

}  // namespace

void gelu_mul(const float* gate, const float* up, std::int64_t n, float* out) {
  const auto& table = gelu_f16_table();
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) {
      out[i] = 0.0f;
    } else if (x >= 10.0f) {
      out[i] = x * up[i];
    } else {
      out[i] = f16_to_f32(table[f32_to_f16(x)]) * up[i];
    }
  }
}

}  // namespace kvstash::kernels
