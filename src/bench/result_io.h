// The --out file: one JSON document with the run's configuration, its summary and every
// request's record, so that a run can be re-analysed, compared (compare.h) or rendered
// (report_html.h) later. Format version 1:
//
//   {"format": "kvstash-bench", "version": 1,
//    "config": {...as given...},
//    "summary": {"requests": N, "completed": N, "duration_s": s, "ttft_ms": {"count", "mean",
//                "p50", "p90", "p99", "max"}, ..., "errors": {"timeout": 2}, "cached_token_ratio":
//                0.41 | null, "rounds": [{"round", "count", "mean_ttft_ms", ...}], ...},
//    "records": [{"index", "session_id", "round", "start_s", "ttft_s", "itl_s": [...], "e2e_s",
//                 "prompt_tokens", "output_tokens", "cached_tokens" (null = not reported),
//                 "usage_reported", "http_status", "error" (null = ok), "error_detail"}]}
//
// Times in records are seconds, in the summary milliseconds (as their names say).
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"
#include "bench/record.h"
#include "kvstash/status.h"

namespace kvstash::bench {

struct BenchResult {
  nlohmann::json config = nlohmann::json::object();  // url, model, workload and load options
  Summary summary;
  std::vector<RequestRecord> records;
  // The summary of each traffic class's records (mixed: "stream", "arrival"); empty when the
  // workload has no classes.
  std::map<std::string, Summary> classes;
  // What the server's /metrics counted over the measured run (server_metrics.h); {} when it has
  // none of kvstash's counters.
  nlohmann::json server = nlohmann::json::object();
};

nlohmann::json summary_to_json(const Summary& summary);
// kCorrupt when a field is missing or has the wrong type.
Expected<Summary> summary_from_json(const nlohmann::json& json);

nlohmann::json record_to_json(const RequestRecord& record);
Expected<RequestRecord> record_from_json(const nlohmann::json& json);

nlohmann::json result_to_json(const BenchResult& result);
Expected<BenchResult> result_from_json(const nlohmann::json& json);

// Writes the result to `path` (kIoError when it cannot). Reads one back (kNotFound, kCorrupt).
Status write_result(const std::string& path, const BenchResult& result);
Expected<BenchResult> read_result(const std::string& path);

}  // namespace kvstash::bench
