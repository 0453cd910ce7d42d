// The --report page: one self-contained HTML file (no external scripts, fonts or CDNs) with the
// summary table and charts drawn as inline SVG by inline JavaScript from the run's data:
//   - TTFT distribution (histogram)
//   - latency over time (scatter of E2E and TTFT against send time; failed requests in red)
//   - ITL distribution (histogram)
//   - TTFT per round (line; multi-turn and agent runs)
// When every chart is drawn the script sets <body data-charts-drawn="N"> and fills
// #kvstash-report-status with "ready"; a script error shows in that element instead. Tests and
// people use that marker to know the page rendered.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "bench/result_io.h"
#include "kvstash/status.h"

namespace kvstash::bench {

std::string render_report_html(const BenchResult& result);

// Writes render_report_html to `path`; kIoError when it cannot.
Status write_report_html(const std::string& path, const BenchResult& result);

}  // namespace kvstash::bench
