#include "bench/rng.h"

#include <cassert>
#include <cmath>

namespace kvstash::bench {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

constexpr double kTwoPi = 6.283185307179586476925286766559;

}  // namespace

Rng::Rng(std::uint64_t seed) {
  std::uint64_t state = seed;
  for (auto& word : s_) word = splitmix64(state);
}

Rng Rng::for_stream(std::uint64_t seed, std::uint64_t stream) {
  // Mix the stream through splitmix64 once so that streams 0, 1, 2 do not give seeds that
  // differ in one bit only.
  std::uint64_t state = stream ^ 0x6b767374617368ULL;  // "kvstash"
  return Rng(seed ^ splitmix64(state));
}

std::uint64_t Rng::next_u64() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() {
  // The top 53 bits make every double in [0, 1) with spacing 2^-53 equally likely.
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

std::int64_t Rng::uniform_int(std::int64_t lo, std::int64_t hi) {
  assert(lo <= hi);
  const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
  if (span == 0) return static_cast<std::int64_t>(next_u64());  // the whole 64-bit range
  // Rejection removes the modulo bias.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  std::uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return lo + static_cast<std::int64_t>(x % span);
}

double Rng::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  double u1 = uniform();
  while (u1 <= 0) u1 = uniform();
  const double u2 = uniform();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  spare_normal_ = radius * std::sin(kTwoPi * u2);
  has_spare_normal_ = true;
  return radius * std::cos(kTwoPi * u2);
}

double Rng::exponential(double mean) {
  double u = uniform();
  while (u <= 0) u = uniform();
  return -mean * std::log(u);
}

double Rng::gamma(double shape, double scale) {
  assert(shape > 0 && scale > 0);
  if (shape < 1) {
    // Boost a shape below 1 to shape + 1 and scale back by U^(1/shape) (Marsaglia-Tsang, sec. 8).
    double u = uniform();
    while (u <= 0) u = uniform();
    return gamma(shape + 1, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = uniform();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v * scale;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v * scale;
  }
}

}  // namespace kvstash::bench
