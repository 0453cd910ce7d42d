// KVSTASH_SIMD=scalar must really run the scalar code. The variable is set by a static
// initializer, before main() and so before the first kernel call reads it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {
namespace {

const bool kForcedScalar = setenv("KVSTASH_SIMD", "scalar", 1) == 0;

// A sum whose value depends on the order of additions: in order, every +1 after 1e8 is lost
// (1e8's ulp is 8) and the result is 0; a vector kernel adds 1e8 and -1e8 in one lane first and
// keeps the fifteen 1s.
std::vector<float> order_sensitive() {
  std::vector<float> a(32, 0.0f);
  a[0] = 1e8f;
  for (int i = 1; i < 16; ++i) a[i] = 1.0f;
  a[16] = -1e8f;
  return a;
}

TEST(SimdEnv, ScalarIsForced) {
  ASSERT_TRUE(kForcedScalar);
  EXPECT_STREQ(simd_path(), "scalar");
  const std::vector<float> a = order_sensitive();
  const std::vector<float> ones(32, 1.0f);
  EXPECT_EQ(dot_f32(a.data(), ones.data(), 32), 0.0f);
  // The same input on the vector path gives a different answer, so the check above can fail.
  if (set_simd_path_for_testing(SimdPath::kAvx512) || set_simd_path_for_testing(SimdPath::kAvx2)) {
    EXPECT_EQ(dot_f32(a.data(), ones.data(), 32), 15.0f);
    reset_simd_path_for_testing();
  }
  EXPECT_STREQ(simd_path(), "scalar");
}

}  // namespace
}  // namespace kvstash::kernels
