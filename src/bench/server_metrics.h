// What a kvstash server's /metrics says changed over a benchmark run: `kvstash bench` reads the
// server's Prometheus text before the measured requests (after the warm-up) and after them, and
// reports the difference of the counters a client cannot see in its own records: speculative
// decoding's drafts and acceptance, and where cached prompt tokens came from (pool or store).
// Other servers (vLLM, llama-server) have none of these names: the report then has no such part.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvstash::bench {

// Samples of a Prometheus text exposition: "name" or "name{labels}" (as written) → value.
// Comments, blank lines and lines without a number are left out.
using MetricSamples = std::map<std::string, double>;
MetricSamples parse_prometheus_text(std::string_view text);

// The run's part of the server's counters, as JSON:
//   {"speculative": {"drafts", "draft_tokens", "accepted_tokens", "acceptance", "mean_accepted_length",
//                    "draft_seconds"},          only when the server drafted during the run
//    "prompt_cache": {"prompt_tokens", "cached_tokens", "from_pool", "from_store"}}
// An empty object when `after` has none of kvstash's names (another server, or /metrics refused).
nlohmann::json server_counters_delta(const MetricSamples& before, const MetricSamples& after);

// The lines `kvstash bench` prints for it under its tables ("" for an empty object).
std::string format_server_counters(const nlohmann::json& delta);

}  // namespace kvstash::bench
