// The "no stall" measurement of `kvstash bench-cache --stall` (issue 10): N streams decode while
// one more request, whose prefix sits in the KV store, arrives and loads it. Compares the streams'
// inter-token latency (ITL) while that request is loading, and while it is loading and prefilling
// its tail, with their ITL just before it arrived.
#pragma once

#include <vector>

#include "engine/engine.h"
#include "kvstash/status.h"

namespace kvstash::cli {

struct StallResult {
  int streams = 0;
  std::size_t itl_before_n = 0, itl_during_n = 0;  // samples in each window (all streams)
  double itl_before_p99_s = 0, itl_before_max_s = 0;
  double itl_during_p99_s = 0, itl_during_max_s = 0;  // [arrival submitted, its first token]
  // [arrival submitted, its KV loaded]: the load alone (issue 10's "no stall" window). The end is
  // when a poll of the engine's stats (every 0.5 ms) first sees no request loading; 0 samples when
  // nothing was loaded (the control).
  std::size_t itl_load_n = 0;
  double itl_load_p99_s = 0, load_s = 0;
  double arrival_ttft_s = 0;  // submit to first token of the arriving request
  int arrival_cached_tokens = 0;
};

// `base` gives threads and chunk size; `store` holds the prefix of `arrival_prompt` (not owned).
// The streams' prompts are 32 distinct tokens; they run until the arrival has its first token and
// every stream has decoded `after_tokens` more, then are cancelled. With `pool_prompt` (a prompt
// sharing the arrival's cached prefix, not its tail), that prompt is run once before the streams
// start, so the arrival finds its prefix in the engine's own pool and loads nothing: the control
// that isolates the cost of its tail's prefill. Bounded: fails (kUnavailable)
// if the run takes over `limit_s` seconds.
Expected<StallResult> measure_stall(const Model& model, EngineOptions base, cache::TieredStore* store,
                                    const std::vector<TokenId>& arrival_prompt, int streams,
                                    const std::vector<TokenId>* pool_prompt = nullptr,
                                    int warm_tokens = 4, int before_tokens = 12, int after_tokens = 3,
                                    double limit_s = 1200);

}  // namespace kvstash::cli
