// One `kvstash bench` run from start to end: find the model, build the workload, warm up, run
// the load, summarise, print the table, write --out and --report. The CLI (src/cli/bench_cmd.cc)
// only parses flags into a BenchConfig; tests call run_bench directly.
//
// Exit codes: 0 = every measured request succeeded; 2 = the run finished but some requests
// failed (counted by kind in the summary); 1 = the run could not happen (bad options, an
// unreadable trace, an unwritable --out).
//
// Thread safety: run_bench blocks; concurrent runs share nothing.
#pragma once

#include <ostream>
#include <string>

#include "bench/http_client.h"
#include "bench/metrics.h"
#include "bench/result_io.h"
#include "bench/runner.h"
#include "bench/workload.h"

namespace kvstash::bench {

struct BenchConfig {
  std::string url;            // http://HOST:PORT
  ClientOptions client;       // model ("" = first of GET /v1/models), api, ignore_eos, timeout
  WorkloadOptions workload;
  LoadOptions load;
  int warmup_requests = 0;    // sent first, not measured
  Slo slo;
  std::string out_path;       // --out; "" = none
  std::string report_path;    // --report; "" = none
  bool progress = true;       // the progress bar on `log`
  bool print_table = true;    // the summary table on `out`
};

struct BenchOutcome {
  int exit_code = 1;
  BenchResult result;
  std::string error;  // why the run could not happen (exit code 1)
};

// Runs the benchmark. Progress and warnings go to `log` (stderr), the table to `out` (stdout).
BenchOutcome run_bench(const BenchConfig& config, std::ostream& out, std::ostream& log);

// The one-line progress bar (no carriage return), e.g.
// "[##########----------]  50/100 req  errors 0  12.3 s".
std::string format_progress(const Progress& progress);

}  // namespace kvstash::bench
