#include "bench/arrival.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "bench/rng.h"

namespace kvstash::bench {
namespace {

struct Moments {
  double mean;
  double cv;  // standard deviation / mean
};

Moments gap_moments(double rate, double burstiness, int n) {
  ArrivalSchedule schedule(rate, burstiness, /*seed=*/42);
  std::vector<double> gaps;
  for (int i = 0; i < n; ++i) gaps.push_back(schedule.draw_gap_s());
  double sum = 0, sq = 0;
  for (double g : gaps) sum += g;
  const double mean = sum / n;
  for (double g : gaps) sq += (g - mean) * (g - mean);
  return {mean, std::sqrt(sq / (n - 1)) / mean};
}

TEST(ArrivalTest, PoissonGapsHaveMeanOneOverRateAndUnitCv) {
  const Moments m = gap_moments(/*rate=*/8, /*burstiness=*/1, 200000);
  EXPECT_NEAR(m.mean, 1.0 / 8, 0.01 / 8);
  EXPECT_NEAR(m.cv, 1.0, 0.02);  // exponential: sd == mean
}

TEST(ArrivalTest, GammaBurstinessSetsCoefficientOfVariation) {
  // Gamma with shape k has CV 1/sqrt(k), whatever the scale.
  for (double k : {0.25, 0.5, 2.0, 4.0}) {
    const Moments m = gap_moments(/*rate=*/5, k, 200000);
    EXPECT_NEAR(m.mean, 0.2, 0.2 * 0.02) << "shape " << k;
    EXPECT_NEAR(m.cv, 1 / std::sqrt(k), 0.03 / std::sqrt(k)) << "shape " << k;
  }
}

TEST(ArrivalTest, ArrivalsStartAtZeroAndIncrease) {
  ArrivalSchedule schedule(10, 1, 7);
  double last = schedule.next_arrival_s();
  EXPECT_EQ(last, 0.0);
  for (int i = 0; i < 100; ++i) {
    const double t = schedule.next_arrival_s();
    EXPECT_GE(t, last);
    last = t;
  }
  EXPECT_GT(last, 0.0);
}

TEST(ArrivalTest, NoRateMeansAllAtOnce) {
  ArrivalSchedule schedule(0, 1, 7);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(schedule.next_arrival_s(), 0.0);
}

TEST(ArrivalTest, SameSeedSameSchedule) {
  ArrivalSchedule a(3, 0.5, 99), b(3, 0.5, 99), c(3, 0.5, 100);
  bool any_differs = false;
  for (int i = 0; i < 50; ++i) {
    const double ta = a.next_arrival_s();
    EXPECT_EQ(ta, b.next_arrival_s());
    any_differs = any_differs || ta != c.next_arrival_s();
  }
  EXPECT_TRUE(any_differs);
}

TEST(RngTest, UniformIntStaysInRangeAndHitsBothEnds) {
  Rng rng(1);
  bool lo = false, hi = false;
  for (int i = 0; i < 10000; ++i) {
    const auto v = rng.uniform_int(-3, 3);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 3);
    lo = lo || v == -3;
    hi = hi || v == 3;
  }
  EXPECT_TRUE(lo && hi);
}

TEST(RngTest, NormalHasZeroMeanUnitVariance) {
  Rng rng(5);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0, 0.01);
  EXPECT_NEAR(sq / n, 1, 0.02);
}

TEST(RngTest, StreamsAreReproducibleAndDistinct) {
  Rng a = Rng::for_stream(7, 1), b = Rng::for_stream(7, 1), c = Rng::for_stream(7, 2);
  const auto va = a.next_u64();
  EXPECT_EQ(va, b.next_u64());
  EXPECT_NE(va, c.next_u64());
}

}  // namespace
}  // namespace kvstash::bench
