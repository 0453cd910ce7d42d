// The router's /metrics (Prometheus text):
//   kvstash_router_requests_total{worker,decision}            requests sent, by why
//   kvstash_router_responses_total{worker,status}             answers by HTTP status
//   kvstash_router_retries_total                              requests sent again after a failure before the first byte
//   kvstash_router_prefill_total{outcome="hop"|"skipped"|"failed"}  the prefill hop (docs/router.md)
//   kvstash_router_failed_total                               requests no worker could take (503)
//   kvstash_router_predicted_cached_tokens_total{worker}      what the index predicted
//   kvstash_router_actual_cached_tokens_total{worker}         what usage.prompt_tokens_details.cached_tokens said
//   kvstash_router_prompt_tokens_total{worker}                prompt tokens of those answers (usage)
//   kvstash_router_overhead_seconds (histogram) and _quantile{quantile} over the last samples:
//     router-added latency to the first byte, as the router sees it (arrival → sent upstream,
//     plus upstream first byte → handed to the client's connection)
//   its parts, each a histogram with _quantile: kvstash_router_queue_seconds (arrival → its
//     routing starts: ~0 on the I/O thread; for a prompt over tokenize_inline_bytes, until a job
//     thread takes it), kvstash_router_decision_seconds (arrival → the request handed to
//     the upstream connection: queue, tokenizing, keying, scoring), kvstash_router_return_seconds
//     (upstream first byte → handed to the client's connection)
//   kvstash_router_upstream_connections_total{kind="new"|"reused"}  upstream connections used
//   kvstash_router_prefix_tokens_{lookups,hits,reused}_total  the tokenized-prefix cache (router/prompt_cache.h)
//   kvstash_router_worker_up / _marked_down_total / _in_flight / _load_tokens / _kv_keys{worker,source}
//
// Thread safety: every method is safe from any thread (one mutex).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "router/worker.h"

namespace kvstash::router {

// A latency histogram (fixed bounds) and the last kMaxSamples samples for quantiles.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 11> kBounds = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                     0.005,   0.01,   0.05,    0.25,   1.0};
  static constexpr std::size_t kMaxSamples = 1 << 17;
  void observe(double seconds);  // caller holds the owner's lock
  double quantile(double q) const;  // caller holds the owner's lock
  // Prometheus text: NAME_bucket/_sum/_count and NAME_quantile{quantile="0.5"|"0.99"} (as a
  // gauge named NAME without "_seconds" + "_quantile_seconds").
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<std::int64_t> buckets_ = std::vector<std::int64_t>(kBounds.size() + 1, 0);
  double sum_ = 0;
  std::int64_t count_ = 0;
  std::vector<double> samples_;  // ring of the last kMaxSamples
  std::size_t next_sample_ = 0;
};

class RouterMetrics {
 public:
  void count_request(const std::string& worker, const std::string& decision);
  void count_response(const std::string& worker, int status);
  void count_retry();
  void count_failed();
  // The prefill hop (prefill/decode disaggregation): sent and answered 200, skipped (the prompt's
  // uncached part under prefill_min_tokens, or no prefill worker eligible), failed (fell back to
  // colocated serving on the decode worker).
  void count_prefill(const std::string& outcome);
  // predicted: what the index said; actual: from usage (-1 when the answer had none).
  void count_cached(const std::string& worker, std::int64_t predicted, std::int64_t actual, std::int64_t prompt_tokens);
  void observe_overhead(double seconds);
  void observe_queue(double seconds);
  void observe_decision(double seconds);
  void observe_return(double seconds);
  void count_connection(bool reused);
  // Quantile q (0..1) of the overhead samples kept (the last kMaxSamples); 0 when none.
  double overhead_quantile(double q) const;
  double decision_quantile(double q) const;
  struct PrefixCacheCounts {
    std::uint64_t lookups = 0, hits = 0, tokens_reused = 0;
  };
  std::string render(const std::vector<WorkerStatus>& workers, const PrefixCacheCounts& prefix_cache) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::int64_t> requests_;  // (worker, decision)
  std::map<std::pair<std::string, int>, std::int64_t> responses_;         // (worker, status)
  std::int64_t retries_ = 0, failed_ = 0;
  std::map<std::string, std::int64_t> prefill_ = {{"failed", 0}, {"hop", 0}, {"skipped", 0}};  // outcome -> count
  struct Cached {
    std::int64_t predicted = 0, actual = 0, prompt = 0, answers_with_usage = 0;
  };
  std::map<std::string, Cached> cached_;
  LatencyHistogram overhead_, queue_, decision_, return_;
  std::int64_t connections_new_ = 0, connections_reused_ = 0;
};

}  // namespace kvstash::router
