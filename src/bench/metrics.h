// The numbers of a benchmark run, computed from its request records as vLLM's
// benchmark_serving defines them:
//   TTFT  time from sending to the first content chunk
//   TPOT  (E2E - TTFT) / (output tokens - 1), per request with more than one output token
//   ITL   every gap between consecutive content chunks, pooled over requests
//   E2E   time from sending to the end of the stream
// each as mean, p50, p90, p99 (linear interpolation between order statistics, as numpy's
// percentile) and max, in milliseconds. Duration is from the first request's start to the last
// request's end; throughputs are per second of it. Goodput counts successful requests that meet
// every given SLO, per second. The cached token ratio is sum(cached) / sum(prompt) over the
// successful requests whose server reported cached tokens.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/record.h"
#include "kvstash/status.h"

namespace kvstash::bench {

struct Distribution {
  std::int64_t count = 0;  // number of samples; all fields 0 when there are none
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// Service-level objectives for goodput, in ms; a negative value is "no objective".
struct Slo {
  double ttft_ms = -1;
  double tpot_ms = -1;
  double e2e_ms = -1;
  double itl_ms = -1;  // every gap between a request's content chunks, its longest included
  bool any() const { return ttft_ms >= 0 || tpot_ms >= 0 || e2e_ms >= 0 || itl_ms >= 0; }
};

struct RoundStats {
  int round = 0;            // 0-based
  std::int64_t count = 0;   // successful requests of this round
  double mean_ttft_ms = 0;
  double p50_ttft_ms = 0;
  double cached_token_ratio = -1;  // -1 = not reported
};

struct Summary {
  std::int64_t requests = 0;   // all records
  std::int64_t completed = 0;  // successful records
  std::int64_t failed = 0;
  double duration_s = 0;
  std::int64_t prompt_tokens = 0;  // over successful requests
  std::int64_t output_tokens = 0;
  double request_throughput = 0;      // completed / duration
  double output_throughput = 0;       // output tokens / duration
  double total_token_throughput = 0;  // (prompt + output tokens) / duration
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::map<std::string, std::int64_t> errors;  // error kind -> count
  std::int64_t cached_tokens = 0;              // sum over requests that report it
  double cached_token_ratio = -1;              // -1 = no request reported cached tokens
  Slo slo;
  std::int64_t good_requests = 0;  // meeting every SLO (all completed ones when there is no SLO)
  double goodput = 0;              // good_requests / duration
  std::vector<RoundStats> rounds;  // one per round seen, in order; empty for single-round runs
  // Requests per worker (x-kvstash-worker, set by a kvstash router); empty without a router.
  std::map<std::string, std::int64_t> per_worker;
  // Through a kvstash router: per request, the time to the first byte minus the router's own wait
  // on the worker (x-kvstash-upstream-ms), i.e. what the router added (its work and the extra
  // hop), paired request by request; count 0 without a router.
  Distribution router_added_ms;
};

// The p-th percentile (p in [0, 100]) of `values` with linear interpolation; 0 when empty.
double percentile(std::vector<double> values, double p);
// Count, mean, p50, p90, p99, max of `values` scaled by `scale` (e.g. 1000 for s -> ms).
Distribution distribution(const std::vector<double>& values, double scale);

Summary summarize(const std::vector<RequestRecord>& records, const Slo& slo);

// Parses "ttft:500,tpot:50,e2e:3000" (ms). kInvalidArgument for unknown names or bad numbers.
Expected<Slo> parse_slo(const std::string& text);

}  // namespace kvstash::bench
