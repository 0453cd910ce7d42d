// A small deterministic random number generator for workloads and arrival times.
//
// Workloads must be the same on every machine for a given --seed, and the standard library's
// distributions (std::normal_distribution, ...) are implementation-defined, so kvstash bench draws
// every random number here: xoshiro256** seeded by splitmix64, with our own uniform, normal
// (Box-Muller), exponential and gamma (Marsaglia-Tsang) transforms.
//
// Thread safety: an Rng is a plain value; use one per thread (or guard it).
#pragma once

#include <cstdint>

namespace kvstash::bench {

class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  // A generator for stream `stream` of `seed`: the same (seed, stream) always gives the same
  // numbers, and different streams are independent. Lets session i be generated without
  // generating sessions 0..i-1.
  static Rng for_stream(std::uint64_t seed, std::uint64_t stream);

  std::uint64_t next_u64();
  // Uniform in [0, 1).
  double uniform();
  // Uniform integer in [lo, hi] (inclusive); requires lo <= hi.
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi);
  // Standard normal N(0, 1).
  double normal();
  // Exponential with the given mean (> 0).
  double exponential(double mean);
  // Gamma with shape k > 0 and scale theta > 0 (mean k * theta).
  double gamma(double shape, double scale);

 private:
  std::uint64_t s_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0;
};

}  // namespace kvstash::bench
