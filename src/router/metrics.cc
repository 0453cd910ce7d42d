#include "router/metrics.h"

#include <algorithm>
#include <cstdio>

namespace kvstash::router {
namespace {

std::string num(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// A Prometheus label value: backslash, quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void RouterMetrics::count_request(const std::string& worker, const std::string& decision) {
  std::lock_guard lock(mu_);
  ++requests_[{worker, decision}];
}

void RouterMetrics::count_response(const std::string& worker, int status) {
  std::lock_guard lock(mu_);
  ++responses_[{worker, status}];
}

void RouterMetrics::count_retry() {
  std::lock_guard lock(mu_);
  ++retries_;
}

void RouterMetrics::count_failed() {
  std::lock_guard lock(mu_);
  ++failed_;
}

void RouterMetrics::count_cached(const std::string& worker, std::int64_t predicted, std::int64_t actual,
                                 std::int64_t prompt_tokens) {
  std::lock_guard lock(mu_);
  Cached& c = cached_[worker];
  c.predicted += predicted;
  if (actual >= 0) {
    c.actual += actual;
    c.prompt += prompt_tokens;
    ++c.answers_with_usage;
  }
}

void RouterMetrics::observe_overhead(double seconds) {
  std::lock_guard lock(mu_);
  std::size_t b = 0;
  while (b < kBounds.size() && seconds > kBounds[b]) ++b;
  ++buckets_[b];
  overhead_sum_ += seconds;
  ++overhead_count_;
  if (samples_.size() < kMaxSamples) {
    samples_.push_back(seconds);
  } else {
    samples_[next_sample_] = seconds;
    next_sample_ = (next_sample_ + 1) % kMaxSamples;
  }
}

double RouterMetrics::overhead_quantile(double q) const {
  std::vector<double> s;
  {
    std::lock_guard lock(mu_);
    s = samples_;
  }
  if (s.empty()) return 0;
  const std::size_t k = std::min(s.size() - 1, static_cast<std::size_t>(q * static_cast<double>(s.size() - 1) + 0.5));
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
  return s[k];
}

std::string RouterMetrics::render(const std::vector<WorkerStatus>& workers) const {
  std::string out;
  const double p50 = overhead_quantile(0.5), p99 = overhead_quantile(0.99);
  std::lock_guard lock(mu_);
  out += "# HELP kvstash_router_requests_total Requests sent to a worker, by the policy's decision.\n";
  out += "# TYPE kvstash_router_requests_total counter\n";
  for (const auto& [k, v] : requests_) {
    out += "kvstash_router_requests_total{worker=\"" + label(k.first) + "\",decision=\"" + label(k.second) + "\"} " + std::to_string(v) + "\n";
  }
  out += "# TYPE kvstash_router_responses_total counter\n";
  for (const auto& [k, v] : responses_) {
    out += "kvstash_router_responses_total{worker=\"" + label(k.first) + "\",status=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(v) + "\n";
  }
  out += "# TYPE kvstash_router_retries_total counter\nkvstash_router_retries_total " + std::to_string(retries_) + "\n";
  out += "# TYPE kvstash_router_failed_total counter\nkvstash_router_failed_total " + std::to_string(failed_) + "\n";
  out += "# HELP kvstash_router_predicted_cached_tokens_total Cached prompt tokens the router's index predicted.\n";
  out += "# TYPE kvstash_router_predicted_cached_tokens_total counter\n";
  for (const auto& [w, c] : cached_) {
    out += "kvstash_router_predicted_cached_tokens_total{worker=\"" + label(w) + "\"} " + std::to_string(c.predicted) + "\n";
  }
  out += "# HELP kvstash_router_actual_cached_tokens_total Cached prompt tokens the workers reported (usage).\n";
  out += "# TYPE kvstash_router_actual_cached_tokens_total counter\n";
  for (const auto& [w, c] : cached_) {
    out += "kvstash_router_actual_cached_tokens_total{worker=\"" + label(w) + "\"} " + std::to_string(c.actual) + "\n";
  }
  out += "# TYPE kvstash_router_prompt_tokens_total counter\n";
  for (const auto& [w, c] : cached_) {
    out += "kvstash_router_prompt_tokens_total{worker=\"" + label(w) + "\"} " + std::to_string(c.prompt) + "\n";
  }
  out += "# HELP kvstash_router_overhead_seconds Router-added latency to the first byte.\n";
  out += "# TYPE kvstash_router_overhead_seconds histogram\n";
  std::int64_t cumulative = 0;
  for (std::size_t b = 0; b <= kBounds.size(); ++b) {
    cumulative += buckets_[b];
    out += "kvstash_router_overhead_seconds_bucket{le=\"" + (b < kBounds.size() ? num(kBounds[b]) : std::string("+Inf")) +
           "\"} " + std::to_string(cumulative) + "\n";
  }
  out += "kvstash_router_overhead_seconds_sum " + num(overhead_sum_) + "\n";
  out += "kvstash_router_overhead_seconds_count " + std::to_string(overhead_count_) + "\n";
  out += "# TYPE kvstash_router_overhead_quantile_seconds gauge\n";
  out += "kvstash_router_overhead_quantile_seconds{quantile=\"0.5\"} " + num(p50) + "\n";
  out += "kvstash_router_overhead_quantile_seconds{quantile=\"0.99\"} " + num(p99) + "\n";
  out += "# TYPE kvstash_router_worker_up gauge\n";
  for (const WorkerStatus& w : workers) {
    const std::string l = "{worker=\"" + label(w.url) + "\"}";
    out += "kvstash_router_worker_up" + l + " " + (w.up ? "1" : "0") + "\n";
    out += "kvstash_router_worker_draining" + l + " " + (w.draining ? "1" : "0") + "\n";
    out += "kvstash_router_worker_in_flight" + l + " " + std::to_string(w.in_flight) + "\n";
    out += "kvstash_router_worker_load_tokens" + l + " " + std::to_string(w.load_tokens) + "\n";
    out += "kvstash_router_worker_events_last_seq" + l + " " + std::to_string(w.events_last_seq) + "\n";
    out += "kvstash_router_worker_events_gaps_total" + l + " " + std::to_string(w.events_gaps) + "\n";
    for (auto [name, n] : {std::pair<const char*, std::size_t>{"pool", w.pool_keys}, {"memory", w.memory_keys}, {"disk", w.disk_keys}}) {
      out += "kvstash_router_worker_kv_keys{worker=\"" + label(w.url) + "\",source=\"" + name + "\"} " + std::to_string(n) + "\n";
    }
  }
  return out;
}

}  // namespace kvstash::router
