// The server's counters and the /metrics page in Prometheus text format (version 0.0.4):
// requests by endpoint and HTTP status, prompt / cached / generated token counters, a TTFT
// histogram, plus the engine's own gauges and counters read from EngineStats at scrape time
// (running, waiting, KV blocks used/free/cached, prefill and decode seconds, preemptions, prompt tokens reused
// from the pool and from the tiered store), and, when the engine has a tiered KV store, per tier
// (label tier="memory|disk|redis") hits, misses, bytes read/written, load latency (a summary:
// _sum/_count, plus the max), entries, bytes used, capacity, evictions, errors and rejected chunks,
// and the store's write-behind counters; end-to-end latency and time-per-output-token histograms;
// the HTTP layer's connections (open, rejected by reason) and refused requests by reason.
// Names follow vLLM's where one exists (docs/http-layer.md maps them).
//
// Thread safety: all methods may be called from any thread; one mutex guards the counters.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "http/http_server.h"
#include "server/backend.h"

namespace kvstash::server {

class Metrics {
 public:
  // Upper bounds of the TTFT histogram's buckets, seconds (+Inf is implied).
  static constexpr std::array<double, 11> kTtftBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                          0.5,   1.0,  2.5,   5.0,  10.0};

  // End-to-end request latency (vLLM: e2e_request_latency_seconds), seconds.
  static constexpr std::array<double, 11> kE2eBuckets = {0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                                         10.0, 20.0, 40.0, 60.0, 120.0};
  // Time per output token after the first (vLLM: time_per_output_token_seconds), seconds.
  static constexpr std::array<double, 11> kTpotBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                          0.075, 0.1, 0.25, 0.5, 1.0};

  void count_request(const std::string& endpoint, int http_status);
  // One finished generation's token counts, its time to first token (ttft_s < 0: none) and its
  // end-to-end latency (e2e_s < 0: not observed, e.g. the client left). TPOT is derived:
  // (e2e - ttft) / (generated - 1) when both are known and generated > 1.
  void observe_generation(int prompt_tokens, int cached_tokens, int generated_tokens, double ttft_s,
                          double e2e_s = -1.0);

  // The whole page. `store` and `http` are read at scrape time too; disabled = no kv store
  // families; http = null: no HTTP-layer families.
  std::string render(const EngineStats& engine, const KvStoreSnapshot& store = {},
                     const http::HttpStats* http = nullptr) const;

  // A histogram's counts (not cumulative) and sum.
  template <std::size_t N>
  struct Histogram {
    std::array<std::int64_t, N> counts{};
    std::int64_t count = 0;
    double sum = 0.0;
    void observe(const std::array<double, N>& bounds, double v) {
      ++count;
      sum += v;
      for (std::size_t i = 0; i < N; ++i) {
        if (v <= bounds[i]) {
          ++counts[i];
          break;
        }
      }
    }
  };

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::int64_t> requests_;  // guarded by mutex_
  std::int64_t prompt_tokens_ = 0;                                // guarded by mutex_
  std::int64_t cached_tokens_ = 0;                                // guarded by mutex_
  std::int64_t generated_tokens_ = 0;                             // guarded by mutex_
  std::array<std::int64_t, kTtftBuckets.size()> ttft_counts_{};   // guarded by mutex_ (not cumulative)
  std::int64_t ttft_count_ = 0;                                   // guarded by mutex_
  double ttft_sum_ = 0.0;                                         // guarded by mutex_
  Histogram<kE2eBuckets.size()> e2e_;                             // guarded by mutex_
  Histogram<kTpotBuckets.size()> tpot_;                           // guarded by mutex_
};

}  // namespace kvstash::server
