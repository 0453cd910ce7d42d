// The load generator: sends a workload's sessions to a server under a concurrency limit and an
// arrival process, and collects one RequestRecord per request.
//
// Each of `concurrency` worker threads owns one keep-alive connection and runs one session at
// a time; a session's rounds are sequential (round r+1 carries the real answer to round r), so
// sessions, not requests, are what run concurrently. Session start times come from the trace
// timestamps, or from an ArrivalSchedule under --rate; a worker that is busy when a start time
// passes starts that session late (the limit wins, as in vLLM's benchmark). The run stops
// starting requests when the workload is exhausted, max_requests have been sent, or duration_s
// has passed; requests in flight then finish. A failed request ends its session (its answer is
// missing) and the run goes on.
//
// Thread safety: run_load is blocking and may be called from any thread; the progress callback
// is called from a separate thread the run owns, never concurrently with itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "bench/http_client.h"
#include "bench/record.h"
#include "bench/workload.h"

namespace kvstash::bench {

struct LoadOptions {
  int concurrency = 1;             // sessions in flight (worker threads); >= 1
  double rate = 0;                 // session arrivals per second; <= 0 = all at once
  double burstiness = 1;           // gamma shape of the gaps; 1 = Poisson
  std::int64_t max_requests = -1;  // measured requests to send at most; -1 = the whole workload
  double duration_s = -1;          // stop starting requests after this long; -1 = no limit
  int max_tokens = -1;             // overrides every session's max_tokens when > 0
  std::uint64_t seed = 0;          // for the arrival process
};

struct Progress {
  std::int64_t finished = 0;  // measured requests done (ok or not)
  std::int64_t errors = 0;
  std::int64_t total = -1;    // expected measured requests; -1 when unknown (duration-bound)
  double elapsed_s = 0;
  double duration_s = -1;     // the --duration limit, for a time-based bar
  bool warming_up = false;
  bool final = false;         // the last call of the run
};

using ProgressCallback = std::function<void(const Progress&)>;

// Sends `warmup_requests` first rounds of `warmup` sessions (not recorded), then the measured
// run of `workload`; `before_measured` (if any) runs between the two, on the calling thread.
// Returns the measured records sorted by index (send order). Never fails: every error is a record's.
std::vector<RequestRecord> run_load(const Workload& workload, const Workload* warmup, int warmup_requests,
                                    const Endpoint& endpoint, const ClientOptions& client_options,
                                    const LoadOptions& load, const ProgressCallback& on_progress,
                                    const std::function<void()>& before_measured = {});

}  // namespace kvstash::bench
