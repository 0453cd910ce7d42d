#include "bench/bench_run.h"

#include <cstdio>
#include <ctime>
#include <mutex>

#include "bench/report_html.h"
#include "bench/server_metrics.h"
#include "bench/summary_table.h"

namespace kvstash::bench {
namespace {

constexpr int kBarWidth = 30;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

nlohmann::json config_json(const BenchConfig& c, const std::string& model) {
  const auto& w = c.workload;
  nlohmann::json workload = {{"kind", w.kind}, {"seed", w.seed}, {"input_len", w.input_len},
                             {"output_len", w.output_len}};
  if (w.kind == "random") workload["num_prompts"] = w.num_prompts;
  if (w.kind == "shared-prefix") {
    workload.update({{"groups", w.groups}, {"prompts_per_group", w.prompts_per_group}, {"prefix_len", w.prefix_len}});
  }
  if (w.kind == "multi-turn" || w.kind == "agent") {
    workload.update({{"users", w.users}, {"rounds", w.rounds}, {"system_len", w.system_len}});
  }
  if (w.kind == "long-doc") {
    workload.update({{"documents", w.documents}, {"questions", w.questions_per_document},
                     {"doc_len", w.prefix_len}, {"order", w.doc_order}});
  }
  if (w.kind == "trace") workload["trace"] = w.trace_path;
  if (w.kind == "mixed") {
    workload.update({{"users", w.users}, {"rounds", w.rounds}, {"arrivals", w.arrivals}, {"arrival_len", w.arrival_len},
                     {"arrival_output_len", w.arrival_output_len}, {"arrival_rate", w.arrival_rate},
                     {"arrival_delay_s", w.arrival_delay_s}});
  }
  return {{"url", c.url}, {"model", model}, {"api", c.client.api}, {"workload", w.kind},
          {"workload_options", workload}, {"concurrency", c.load.concurrency}, {"rate", c.load.rate},
          {"burstiness", c.load.burstiness}, {"max_requests", c.load.max_requests},
          {"duration_s", c.load.duration_s}, {"warmup", c.warmup_requests}, {"max_tokens", c.load.max_tokens},
          {"ignore_eos", c.client.ignore_eos}, {"timeout_s", c.client.timeout_s}, {"started_at", utc_now()}};
}

BenchOutcome fail(std::string why) {
  BenchOutcome outcome;
  outcome.exit_code = 1;
  outcome.error = std::move(why);
  return outcome;
}

}  // namespace

std::string format_progress(const Progress& p) {
  double fraction = 0;
  if (p.total > 0) fraction = static_cast<double>(p.finished) / static_cast<double>(p.total);
  else if (p.duration_s > 0) fraction = p.elapsed_s / p.duration_s;
  fraction = std::min(1.0, std::max(0.0, fraction));
  const int filled = static_cast<int>(fraction * kBarWidth + 0.5);
  std::string bar = "[" + std::string(static_cast<std::size_t>(filled), '#') +
                    std::string(static_cast<std::size_t>(kBarWidth - filled), '-') + "]";
  char line[160];
  if (p.total > 0) {
    std::snprintf(line, sizeof line, "%s%s %lld/%lld req  errors %lld  %.1f s", p.warming_up ? "warm-up " : "",
                  bar.c_str(), static_cast<long long>(p.finished), static_cast<long long>(p.total),
                  static_cast<long long>(p.errors), p.elapsed_s);
  } else {
    std::snprintf(line, sizeof line, "%s%s %lld req  errors %lld  %.1f/%.0f s", p.warming_up ? "warm-up " : "",
                  bar.c_str(), static_cast<long long>(p.finished), static_cast<long long>(p.errors), p.elapsed_s,
                  p.duration_s);
  }
  return line;
}

BenchOutcome run_bench(const BenchConfig& config, std::ostream& out, std::ostream& log) {
  auto endpoint = parse_url(config.url);
  if (!endpoint) return fail(endpoint.status().message());
  if (config.load.concurrency < 1) return fail("--concurrency must be >= 1");
  if (config.client.timeout_s <= 0) return fail("--timeout must be > 0");
  if (config.client.api != "chat" && config.client.api != "completions") return fail("--api must be chat or completions");
  auto workload = make_workload(config.workload);
  if (!workload) return fail(workload.status().message());
  LoadOptions load = config.load;
  // mixed: one connection per session, so that an arrival is sent at its time, never held behind
  // a stream that occupies a connection.
  if (workload->kind() == "mixed") load.concurrency = static_cast<int>(workload->size());

  ClientOptions client_options = config.client;
  if (client_options.model.empty()) {
    OpenAiClient probe(*endpoint, client_options);
    auto model = probe.first_model();
    if (model) {
      client_options.model = *model;
    } else {
      // Not fatal: the requests themselves will fail and be counted, which says more.
      log << "kvstash bench: could not list models (" << model.status().message()
          << "); sending model \"default\"\n";
      client_options.model = "default";
    }
  }
  // Warm-up prompts are random ones of the workload's lengths with another seed, so that they
  // warm the server without pre-filling the measured prompts into its cache.
  WorkloadOptions warm_options = config.workload;
  warm_options.kind = "random";
  warm_options.seed = config.workload.seed ^ 0x5741524d5550ULL;  // "WARMUP"
  warm_options.num_prompts = config.warmup_requests;
  auto warmup = make_workload(warm_options);

  std::mutex log_mu;
  ProgressCallback progress;
  if (config.progress) {
    progress = [&](const Progress& p) {
      std::lock_guard<std::mutex> lock(log_mu);
      log << '\r' << format_progress(p) << (p.final ? "\n" : "") << std::flush;
    };
  }
  // The server's own counters around the measured run (a kvstash server's speculative decoding and
  // prompt cache); a server without /metrics, or one that refuses it, just has no such report.
  OpenAiClient metrics_client(*endpoint, client_options);
  const auto scrape = [&metrics_client] {
    auto text = metrics_client.get_text("/metrics");
    return text ? parse_prometheus_text(*text) : MetricSamples{};
  };
  MetricSamples before;
  BenchOutcome outcome;
  outcome.result.config = config_json(config, client_options.model);
  outcome.result.records = run_load(*workload, warmup ? &*warmup : nullptr, config.warmup_requests, *endpoint,
                                    client_options, load, progress, [&] { before = scrape(); });
  outcome.result.server = server_counters_delta(before, scrape());
  outcome.result.summary = summarize(outcome.result.records, config.slo);
  std::map<std::string, std::vector<RequestRecord>> by_class;
  for (const RequestRecord& r : outcome.result.records) {
    if (!r.label.empty()) by_class[r.label].push_back(r);
  }
  for (const auto& [label, records] : by_class) outcome.result.classes[label] = summarize(records, config.slo);
  if (config.print_table) {
    out << format_summary(outcome.result.summary) << format_class_summaries(outcome.result.classes)
        << format_cache_summary(outcome.result.records) << format_server_counters(outcome.result.server) << std::flush;
  }
  if (!config.out_path.empty()) {
    if (Status st = write_result(config.out_path, outcome.result); !st) return fail(st.to_string());
  }
  if (!config.report_path.empty()) {
    if (Status st = write_report_html(config.report_path, outcome.result); !st) return fail(st.to_string());
  }
  const auto& s = outcome.result.summary;
  outcome.exit_code = (s.failed == 0 && s.requests > 0) ? 0 : 2;
  return outcome;
}

}  // namespace kvstash::bench
