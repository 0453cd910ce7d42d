#include "router/metrics.h"

#include <algorithm>
#include <cstdio>

#include "common/prometheus_text.h"

namespace kvstash::router {
namespace {

std::string num(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
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

void RouterMetrics::count_prefill(const std::string& outcome) {
  std::lock_guard lock(mu_);
  ++prefill_[outcome];
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
  PrometheusText m;
  std::lock_guard lock(mu_);
  m.family("kvstash_router_requests_total", "counter", "Requests sent to a worker, by the policy's decision.");
  for (const auto& [k, v] : requests_) m.sample({{"worker", k.first}, {"decision", k.second}}, v);
  m.family("kvstash_router_responses_total", "counter", "Worker responses by HTTP status.");
  for (const auto& [k, v] : responses_) m.sample({{"worker", k.first}, {"status", std::to_string(k.second)}}, v);
  m.counter("kvstash_router_retries_total", "Requests sent again to another worker after a failure.", retries_);
  m.family("kvstash_router_prefill_total", "counter", "Prefill hops to a prefill worker: hop (done), skipped, failed (colocated instead).");
  for (const auto& [k, v] : prefill_) m.sample("outcome", k, v);
  m.counter("kvstash_router_failed_total", "Requests no worker could answer.", failed_);
  m.family("kvstash_router_predicted_cached_tokens_total", "counter", "Cached prompt tokens the router's index predicted.");
  for (const auto& [w, c] : cached_) m.sample("worker", w, c.predicted);
  m.family("kvstash_router_actual_cached_tokens_total", "counter", "Cached prompt tokens the workers reported (usage).");
  for (const auto& [w, c] : cached_) m.sample("worker", w, c.actual);
  m.family("kvstash_router_prompt_tokens_total", "counter", "Prompt tokens sent to each worker.");
  for (const auto& [w, c] : cached_) m.sample("worker", w, c.prompt);
  m.append_rendered(overhead_.render("kvstash_router_overhead", "Router-added latency to the first byte (decision + return)."));
  m.append_rendered(queue_.render("kvstash_router_queue",
                                  "Arrival to the request's routing starting (0 but for long prompts, tokenized on a job thread)."));
  m.append_rendered(decision_.render("kvstash_router_decision", "Arrival to the request handed to the upstream connection."));
  m.append_rendered(return_.render("kvstash_router_return", "Upstream first byte to the answer handed to the client's connection."));
  m.family("kvstash_router_upstream_connections_total", "counter", "Connections to workers: opened, or reused from the pool.")
      .sample("kind", "new", connections_new_)
      .sample("kind", "reused", connections_reused_);
  m.counter("kvstash_router_prefix_tokens_lookups_total", "Prompt tokenizations looked up in the prompt-prefix cache.",
            prefix_cache.lookups);
  m.counter("kvstash_router_prefix_tokens_hits_total", "Lookups that found a tokenized prefix.", prefix_cache.hits);
  m.counter("kvstash_router_prefix_tokens_reused_total", "Tokens taken from the prompt-prefix cache instead of tokenizing.",
            prefix_cache.tokens_reused);
  // One family at a time (Prometheus rejects a family whose samples are interleaved with another's).
  auto per_worker = [&](const char* name, const char* type, const char* help, auto field) {
    m.family(name, type, help);
    for (const WorkerStatus& w : workers) m.sample("worker", w.url, field(w));
  };
  per_worker("kvstash_router_worker_up", "gauge", "1 while the worker answers its health checks.",
             [](const WorkerStatus& w) { return w.up ? 1 : 0; });
  per_worker("kvstash_router_worker_marked_down_total", "counter", "Times the worker was marked down.",
             [](const WorkerStatus& w) { return w.marked_down; });
  per_worker("kvstash_router_worker_draining", "gauge", "1 while the worker drains (no new requests).",
             [](const WorkerStatus& w) { return w.draining ? 1 : 0; });
  per_worker("kvstash_router_worker_in_flight", "gauge", "Requests the router has in flight on the worker.",
             [](const WorkerStatus& w) { return w.in_flight; });
  per_worker("kvstash_router_worker_load_tokens", "gauge", "Tokens the router counts as the worker's load.",
             [](const WorkerStatus& w) { return w.load_tokens; });
  per_worker("kvstash_router_worker_events_last_seq", "gauge", "Sequence number of the worker's last KV event.",
             [](const WorkerStatus& w) { return w.events_last_seq; });
  per_worker("kvstash_router_worker_events_gaps_total", "counter", "Gaps found in the worker's KV event sequence.",
             [](const WorkerStatus& w) { return w.events_gaps; });
  m.family("kvstash_router_worker_kv_keys", "gauge", "KV keys the router's index holds for the worker, by source.");
  for (const WorkerStatus& w : workers) {
    m.sample({{"worker", w.url}, {"source", "pool"}}, w.pool_keys)
        .sample({{"worker", w.url}, {"source", "memory"}}, w.memory_keys)
        .sample({{"worker", w.url}, {"source", "disk"}}, w.disk_keys);
  }
  return m.take();
}

}  // namespace kvstash::router
