#include "kernels/machine_limits.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvstash::kernels {
namespace {

TEST(MachineLimits, GemmGflopsIsPositive) {
  ThreadPool pool(2);
  const double g = measure_gemm_gflops(128, 96, 64, pool);
  EXPECT_GT(g, 0.0);
  EXPECT_TRUE(std::isfinite(g));
  EXPECT_EQ(measure_gemm_gflops(0, 8, 8, pool), 0.0);
}

TEST(MachineLimits, StreamReadIsPositive) {
  ThreadPool pool(3);
  const double gbs = measure_stream_read_gbs(pool, 48 << 20);  // small for test time
  EXPECT_GT(gbs, 0.0);
  EXPECT_TRUE(std::isfinite(gbs));
}

TEST(MachineLimits, StreamReaderPassesCoverTheBufferAndArePositive) {
  ThreadPool pool(3);
  for (StreamMemory memory : {StreamMemory::kHugePages, StreamMemory::kSmallPages}) {
    StreamReader reader(pool, (24 << 20) + 5, memory);
    ASSERT_TRUE(reader.ok());
    // Three page-aligned parts of equal size, together at least what was asked for less a page each.
    EXPECT_EQ(reader.size() % (3 * 4096), 0u);
    EXPECT_GE(reader.size(), (24u << 20) - 3 * 4096);
    EXPECT_LE(reader.size(), (24u << 20) + 5);
    for (int pass = 0; pass < 3; ++pass) {
      const double gbs = reader.pass_gbs();
      EXPECT_GT(gbs, 0.0);
      EXPECT_TRUE(std::isfinite(gbs));
    }
  }
}

}  // namespace
}  // namespace kvstash::kernels
