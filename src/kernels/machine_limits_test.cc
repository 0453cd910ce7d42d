#include "kernels/machine_limits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

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

// A pass over memory the caller owns, of a size that is not a multiple of the threads' page-aligned
// parts (the last thread's part is shorter, one thread's may be empty); nothing to read reads 0.
TEST(MachineLimits, StreamReadPassOverCallersMemory) {
  ThreadPool pool(3);
  alignas(64) static std::uint8_t bytes[5 * 4096 + 640];
  for (std::size_t i = 0; i < sizeof bytes; ++i) bytes[i] = static_cast<std::uint8_t>(i);
  for (std::size_t n : {sizeof bytes, std::size_t{4096}, std::size_t{64}}) {
    const double gbs = stream_read_pass_gbs(pool, bytes, n);
    EXPECT_GT(gbs, 0.0) << n;
    EXPECT_TRUE(std::isfinite(gbs)) << n;
  }
  EXPECT_EQ(stream_read_pass_gbs(pool, nullptr, 4096), 0.0);
  EXPECT_EQ(stream_read_pass_gbs(pool, bytes, 0), 0.0);
}

}  // namespace
}  // namespace kvstash::kernels
