#include "bench/arrival.h"

#include <cmath>

namespace kvstash::bench {

ArrivalSchedule::ArrivalSchedule(double rate_per_s, double burstiness, std::uint64_t seed)
    : rate_per_s_(rate_per_s),
      burstiness_(burstiness > 0 ? burstiness : 1.0),
      rng_(Rng::for_stream(seed, 0x4152524956414cULL)) {}  // "ARRIVAL"

double ArrivalSchedule::draw_gap_s() {
  if (!(rate_per_s_ > 0) || std::isinf(rate_per_s_)) return 0;
  // Mean shape * scale = 1 / rate.
  return rng_.gamma(burstiness_, 1.0 / (rate_per_s_ * burstiness_));
}

double ArrivalSchedule::next_arrival_s() {
  // The first request goes at once, so a run does not start with an idle gap.
  if (first_) {
    first_ = false;
    return next_s_;
  }
  next_s_ += draw_gap_s();
  return next_s_;
}

}  // namespace kvstash::bench
