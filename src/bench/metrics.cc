#include "bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace kvstash::bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = static_cast<std::size_t>(std::ceil(rank));
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

Distribution distribution(const std::vector<double>& values, double scale) {
  Distribution d;
  if (values.empty()) return d;
  std::vector<double> scaled;
  scaled.reserve(values.size());
  for (double v : values) scaled.push_back(v * scale);
  std::sort(scaled.begin(), scaled.end());
  d.count = static_cast<std::int64_t>(scaled.size());
  double sum = 0;
  for (double v : scaled) sum += v;
  d.mean = sum / static_cast<double>(scaled.size());
  d.p50 = percentile(scaled, 50);
  d.p90 = percentile(scaled, 90);
  d.p99 = percentile(scaled, 99);
  d.max = scaled.back();
  return d;
}

namespace {

constexpr double kMsPerS = 1000.0;

double tpot_s(const RequestRecord& r) {
  return r.output_tokens > 1 ? (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1) : 0.0;
}

bool meets(const RequestRecord& r, const Slo& slo) {
  if (slo.ttft_ms >= 0 && r.ttft_s * kMsPerS > slo.ttft_ms) return false;
  if (slo.tpot_ms >= 0 && tpot_s(r) * kMsPerS > slo.tpot_ms) return false;
  if (slo.e2e_ms >= 0 && r.e2e_s * kMsPerS > slo.e2e_ms) return false;
  if (slo.itl_ms >= 0) {
    for (double gap : r.itl_s) {
      if (gap * kMsPerS > slo.itl_ms) return false;  // every gap, the longest included
    }
  }
  return true;
}

std::vector<RoundStats> round_stats(const std::vector<RequestRecord>& records) {
  int max_round = -1;
  for (const auto& r : records) max_round = std::max(max_round, r.round);
  if (max_round < 1) return {};
  std::vector<RoundStats> rounds;
  for (int round = 0; round <= max_round; ++round) {
    std::vector<double> ttfts;
    std::int64_t cached = 0, prompt = 0;
    bool reported = false;
    for (const auto& r : records) {
      if (r.round != round || !r.ok()) continue;
      ttfts.push_back(r.ttft_s);
      if (r.cached_tokens >= 0) {
        reported = true;
        cached += r.cached_tokens;
        prompt += r.prompt_tokens;
      }
    }
    const Distribution d = distribution(ttfts, kMsPerS);
    RoundStats stats;
    stats.round = round;
    stats.count = d.count;
    stats.mean_ttft_ms = d.mean;
    stats.p50_ttft_ms = d.p50;
    if (reported && prompt > 0) stats.cached_token_ratio = static_cast<double>(cached) / static_cast<double>(prompt);
    rounds.push_back(stats);
  }
  return rounds;
}

}  // namespace

Summary summarize(const std::vector<RequestRecord>& records, const Slo& slo) {
  Summary s;
  s.slo = slo;
  s.requests = static_cast<std::int64_t>(records.size());
  std::vector<double> ttfts, tpots, itls, e2es, router_added;
  double first_start = std::numeric_limits<double>::infinity();
  double last_end = -std::numeric_limits<double>::infinity();
  std::int64_t cached_prompt_tokens = 0;
  bool cached_reported = false;
  for (const auto& r : records) {
    if (!r.worker.empty()) ++s.per_worker[r.worker];
    first_start = std::min(first_start, r.start_s);
    last_end = std::max(last_end, r.start_s + r.e2e_s);
    if (!r.ok()) {
      ++s.failed;
      ++s.errors[r.error];
      continue;
    }
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    ttfts.push_back(r.ttft_s);
    e2es.push_back(r.e2e_s);
    if (r.upstream_s >= 0) router_added.push_back(r.ttfb_s - r.upstream_s);
    if (r.output_tokens > 1) tpots.push_back(tpot_s(r));
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
    if (r.cached_tokens >= 0) {
      cached_reported = true;
      s.cached_tokens += r.cached_tokens;
      cached_prompt_tokens += r.prompt_tokens;
    }
    if (meets(r, slo)) ++s.good_requests;
  }
  if (!records.empty()) s.duration_s = std::max(0.0, last_end - first_start);
  if (s.duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / s.duration_s;
    s.output_throughput = static_cast<double>(s.output_tokens) / s.duration_s;
    s.total_token_throughput = static_cast<double>(s.prompt_tokens + s.output_tokens) / s.duration_s;
    s.goodput = static_cast<double>(s.good_requests) / s.duration_s;
  }
  s.ttft_ms = distribution(ttfts, kMsPerS);
  s.tpot_ms = distribution(tpots, kMsPerS);
  s.itl_ms = distribution(itls, kMsPerS);
  s.e2e_ms = distribution(e2es, kMsPerS);
  s.router_added_ms = distribution(router_added, kMsPerS);
  if (cached_reported && cached_prompt_tokens > 0) {
    s.cached_token_ratio = static_cast<double>(s.cached_tokens) / static_cast<double>(cached_prompt_tokens);
  }
  s.rounds = round_stats(records);
  return s;
}

Expected<Slo> parse_slo(const std::string& text) {
  Slo slo;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string::npos) return invalid_argument("--slo item '" + item + "' is not NAME:MS");
    const std::string name = item.substr(0, colon);
    const std::string value = item.substr(colon + 1);
    char* end = nullptr;
    const double ms = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(ms >= 0)) {
      return invalid_argument("--slo " + name + ": '" + value + "' is not a number of ms >= 0");
    }
    if (name == "ttft") slo.ttft_ms = ms;
    else if (name == "tpot") slo.tpot_ms = ms;
    else if (name == "e2e" || name == "e2el") slo.e2e_ms = ms;
    else if (name == "itl") slo.itl_ms = ms;
    else return invalid_argument("--slo knows ttft, tpot, itl and e2e, not '" + name + "'");
  }
  return slo;
}

}  // namespace kvstash::bench
