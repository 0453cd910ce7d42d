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

void LatencyHistogram::observe(double seconds) {
  std::size_t b = 0;
  while (b < kBounds.size() && seconds > kBounds[b]) ++b;
  ++buckets_[b];
  sum_ += seconds;
  ++count_;
  if (samples_.size() < kMaxSamples) {
    samples_.push_back(seconds);
  } else {
    samples_[next_sample_] = seconds;
    next_sample_ = (next_sample_ + 1) % kMaxSamples;
  }
}

double LatencyHistogram::quantile(double q) const {
  if (samples_.empty()) return 0;
  std::vector<double> s = samples_;
  const std::size_t k = std::min(s.size() - 1, static_cast<std::size_t>(q * static_cast<double>(s.size() - 1) + 0.5));
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
  return s[k];
}

std::string LatencyHistogram::render(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + "_seconds " + help + "\n# TYPE " + name + "_seconds histogram\n";
  std::int64_t cumulative = 0;
  for (std::size_t b = 0; b <= kBounds.size(); ++b) {
    cumulative += buckets_[b];
    out += name + "_seconds_bucket{le=\"" + (b < kBounds.size() ? num(kBounds[b]) : std::string("+Inf")) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += name + "_seconds_sum " + num(sum_) + "\n";
  out += name + "_seconds_count " + std::to_string(count_) + "\n";
  out += "# TYPE " + name + "_quantile_seconds gauge\n";
  out += name + "_quantile_seconds{quantile=\"0.5\"} " + num(quantile(0.5)) + "\n";
  out += name + "_quantile_seconds{quantile=\"0.99\"} " + num(quantile(0.99)) + "\n";
  return out;
}

void RouterMetrics::observe_overhead(double seconds) {
  std::lock_guard lock(mu_);
  overhead_.observe(seconds);
}

void RouterMetrics::observe_queue(double seconds) {
  std::lock_guard lock(mu_);
  queue_.observe(seconds);
}

void RouterMetrics::observe_decision(double seconds) {
  std::lock_guard lock(mu_);
  decision_.observe(seconds);
}

void RouterMetrics::observe_return(double seconds) {
  std::lock_guard lock(mu_);
  return_.observe(seconds);
}

void RouterMetrics::count_connection(bool reused) {
  std::lock_guard lock(mu_);
  ++(reused ? connections_reused_ : connections_new_);
}

double RouterMetrics::overhead_quantile(double q) const {
  std::lock_guard lock(mu_);
  return overhead_.quantile(q);
}

double RouterMetrics::decision_quantile(double q) const {
  std::lock_guard lock(mu_);
  return decision_.quantile(q);
}

std::string RouterMetrics::render(const std::vector<WorkerStatus>& workers, const PrefixCacheCounts& prefix_cache) const {
  std::string out;
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
  out += overhead_.render("kvstash_router_overhead", "Router-added latency to the first byte (decision + return).");
  out += queue_.render("kvstash_router_queue", "Arrival to the request's routing starting (0 but for long prompts, tokenized on a job thread).");
  out += decision_.render("kvstash_router_decision", "Arrival to the request handed to the upstream connection.");
  out += return_.render("kvstash_router_return", "Upstream first byte to the answer handed to the client's connection.");
  out += "# TYPE kvstash_router_upstream_connections_total counter\n";
  out += "kvstash_router_upstream_connections_total{kind=\"new\"} " + std::to_string(connections_new_) + "\n";
  out += "kvstash_router_upstream_connections_total{kind=\"reused\"} " + std::to_string(connections_reused_) + "\n";
  out += "# TYPE kvstash_router_prefix_tokens_lookups_total counter\n";
  out += "kvstash_router_prefix_tokens_lookups_total " + std::to_string(prefix_cache.lookups) + "\n";
  out += "# TYPE kvstash_router_prefix_tokens_hits_total counter\n";
  out += "kvstash_router_prefix_tokens_hits_total " + std::to_string(prefix_cache.hits) + "\n";
  out += "# TYPE kvstash_router_prefix_tokens_reused_total counter\n";
  out += "kvstash_router_prefix_tokens_reused_total " + std::to_string(prefix_cache.tokens_reused) + "\n";
  out += "# TYPE kvstash_router_worker_up gauge\n";
  for (const WorkerStatus& w : workers) {
    const std::string l = "{worker=\"" + label(w.url) + "\"}";
    out += "kvstash_router_worker_up" + l + " " + (w.up ? "1" : "0") + "\n";
    out += "kvstash_router_worker_marked_down_total" + l + " " + std::to_string(w.marked_down) + "\n";
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
