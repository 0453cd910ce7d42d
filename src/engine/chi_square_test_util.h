// For tests: whether two samples of a sampled token come from one distribution. A two-sample
// chi-square test over the tokens' counts (equal sample sizes: a bin's expected count in each arm
// is half its total); bins under 10 in all are pooled into one; the bound is chi-square's 99.9%
// quantile for the bins' degrees of freedom (Wilson–Hilferty), so a correct engine fails once in a
// thousand seed sets, and the tests' seeds are fixed. Header only, test code.
#pragma once

#include <cmath>
#include <map>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace kvstash::testing {

struct ChiSquare {
  double chi2 = 0.0;
  int dof = -1;  // degrees of freedom: the bins less one
  double bound = 0.0;
};

inline ChiSquare two_sample_chi_square(const std::map<TokenId, int>& a, const std::map<TokenId, int>& b) {
  std::map<TokenId, std::pair<int, int>> bins;
  for (const auto& [t, n] : a) bins[t].first += n;
  for (const auto& [t, n] : b) bins[t].second += n;
  ChiSquare out;
  int pooled_a = 0, pooled_b = 0;
  auto add = [&](int x, int y) {
    const double e = (x + y) / 2.0;
    out.chi2 += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
    ++out.dof;
  };
  for (const auto& [t, ab] : bins) {
    if (ab.first + ab.second < 10) {
      pooled_a += ab.first;
      pooled_b += ab.second;
    } else {
      add(ab.first, ab.second);
    }
  }
  if (pooled_a + pooled_b > 0) add(pooled_a, pooled_b);
  if (out.dof > 0) {
    const double z = 3.090;  // the standard normal's 99.9% quantile
    const double h = 2.0 / (9.0 * out.dof);
    out.bound = out.dof * std::pow(1.0 - h + z * std::sqrt(h), 3);
  }
  return out;
}

}  // namespace kvstash::testing
