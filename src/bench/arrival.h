// When requests are sent under --rate: gaps between arrivals drawn from a gamma distribution
// with shape B (--burstiness) and mean 1/R, as vLLM's benchmark does. B = 1 is a Poisson
// process (exponential gaps); B < 1 is burstier, B > 1 more regular. Rate <= 0 means "all at
// once" (every gap 0), the concurrency limit alone then shapes the load.
//
// Thread safety: not thread-safe; the runner draws from one schedule under its lock.
#pragma once

#include <cstdint>

#include "bench/rng.h"

namespace kvstash::bench {

class ArrivalSchedule {
 public:
  ArrivalSchedule(double rate_per_s, double burstiness, std::uint64_t seed);

  // Seconds after the start at which the next arrival happens (0 for the first, then
  // increasing by one drawn gap each call).
  double next_arrival_s();
  // One gap; exposed for the statistics test.
  double draw_gap_s();

 private:
  double rate_per_s_;
  double burstiness_;
  Rng rng_;
  double next_s_ = 0;
  bool first_ = true;
};

}  // namespace kvstash::bench
