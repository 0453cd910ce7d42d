// The spot check's comparison: float rounding passes, altered KV fails.
#include "share/spot_check.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/fp16.h"

namespace kvstash::share {
namespace {

std::vector<std::uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> out;
  for (float f : v) {
    const std::uint16_t h = f32_to_f16(f);
    out.push_back(static_cast<std::uint8_t>(h));
    out.push_back(static_cast<std::uint8_t>(h >> 8));
  }
  return out;
}

TEST(SpotCheckTest, RoundingPassesAlteredKvFails) {
  const auto ours = f16_bytes({0.5f, -1.25f, 3.0f, 0.0f, 100.0f});
  EXPECT_TRUE(kv_close(ours, ours, 1).close);
  EXPECT_EQ(kv_close(ours, ours, 1).max_abs_diff, 0.0f);
  const auto rounded = f16_bytes({0.5005f, -1.251f, 3.002f, 0.001f, 100.1f});
  const auto near = kv_close(ours, rounded, 1);
  EXPECT_TRUE(near.close);
  EXPECT_GT(near.max_abs_diff, 0.0f);
  EXPECT_FALSE(kv_close(ours, f16_bytes({0.5f, -1.25f, 3.5f, 0.0f, 100.0f}), 1).close);  // one element altered
  EXPECT_FALSE(kv_close(ours, f16_bytes({0.5f, -1.25f, 3.0f, 0.0f}), 1).close);         // sizes differ
  auto flipped = ours;
  flipped[3] ^= 0x40;  // one exponent bit: a large change
  EXPECT_FALSE(kv_close(ours, flipped, 1).close);
  // Other element types: equal bytes only.
  EXPECT_TRUE(kv_close(ours, ours, 0).close);
  EXPECT_FALSE(kv_close(ours, rounded, 0).close);
}

}  // namespace
}  // namespace kvstash::share
