// Plain-text tables of benchmark summaries: the one `kvstash bench` prints at the end of a run,
// and the side-by-side one of `kvstash bench compare` (b/a ratios).
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/metrics.h"

namespace kvstash::bench {

// One row of a summary: a label and its value (NaN when the metric does not apply, e.g. the
// cached ratio of a server that does not report it).
struct SummaryRow {
  std::string label;
  double value;
  std::string unit;  // "ms", "req/s", "tok/s", "%", "" (counts)
};

// The rows, in display order, shared by the table, the comparison and the HTML report.
std::vector<SummaryRow> summary_rows(const Summary& summary);

// The end-of-run table.
std::string format_summary(const Summary& summary);
// The response cache's share of the run, from the x-kvstash-cache header of each successful
// request: counts by result, hit ratio, and end-to-end latency (p50, p99) of hits vs misses.
// "" when no response carried the header (a server without a response cache).
std::string format_cache_summary(const std::vector<RequestRecord>& records);
// A block per traffic class (mixed: stream, arrival): requests, TTFT and ITL percentiles, and the
// share that met the --slo objectives. "" when there are no classes.
std::string format_class_summaries(const std::map<std::string, Summary>& classes);

// Both summaries side by side with b/a for every row ("-" where a is 0 or a value is missing).
std::string format_comparison(const Summary& a, const Summary& b, const std::string& name_a,
                              const std::string& name_b);

}  // namespace kvstash::bench
