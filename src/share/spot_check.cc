#include "share/spot_check.h"

#include <cmath>
#include <cstring>

#include "common/fp16.h"

namespace kvstash::share {

KvComparison kv_close(std::span<const std::uint8_t> ours, std::span<const std::uint8_t> theirs, std::uint32_t element_type) {
  KvComparison out;
  if (ours.size() != theirs.size()) return out;
  constexpr std::uint32_t kF16 = 1;  // gguf::TensorType::kF16, the engine's KV element type
  if (element_type != kF16 || ours.size() % 2 != 0) {
    out.close = std::memcmp(ours.data(), theirs.data(), ours.size()) == 0;
    return out;
  }
  out.close = true;
  for (std::size_t i = 0; i < ours.size(); i += 2) {
    std::uint16_t a = 0, b = 0;
    std::memcpy(&a, ours.data() + i, 2);
    std::memcpy(&b, theirs.data() + i, 2);
    const float x = f16_to_f32(a), y = f16_to_f32(b);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (a != b) out.close = false;
      continue;
    }
    const float d = std::fabs(x - y);
    if (d > out.max_abs_diff) out.max_abs_diff = d;
    if (d > kSpotCheckAbs + kSpotCheckRel * std::fabs(x)) out.close = false;
  }
  return out;
}

}  // namespace kvstash::share
