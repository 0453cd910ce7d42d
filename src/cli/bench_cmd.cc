// `kvstash bench`: flags -> BenchConfig -> run_bench (src/bench/bench_run.h), and
// `kvstash bench compare a.json b.json`. CLI11's parse exceptions stay inside this file.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_run.h"
#include "bench/result_io.h"
#include "bench/summary_table.h"
#include "cli/commands.h"

namespace kvstash::cli {
namespace {

// Workers under --rate when --concurrency is not given: enough that arrivals, not the limit,
// shape the load at the rates a CPU server sustains.
constexpr int kDefaultRateConcurrency = 64;

int compare_main(int argc, char** argv) {
  CLI::App app{"Print two kvstash bench results side by side with b/a ratios", "bench compare"};
  std::string path_a, path_b;
  app.add_option("a", path_a, "baseline result (--out of a run)")->required();
  app.add_option("b", path_b, "result to compare with it")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  auto a = bench::read_result(path_a);
  auto b = bench::read_result(path_b);
  for (const auto* r : {&a, &b}) {
    if (!r->has_value()) {
      std::cerr << "kvstash bench compare: " << r->status().to_string() << "\n";
      return 1;
    }
  }
  std::cout << bench::format_comparison(a->summary, b->summary, path_a, path_b);
  return 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "compare") return compare_main(argc - 1, argv + 1);

  bench::BenchConfig config;
  auto& w = config.workload;
  auto& load = config.load;
  CLI::App app{"Benchmark an OpenAI-compatible server (kvstash, llama-server, vLLM, SGLang)", "bench"};
  app.footer("Subcommand: kvstash bench compare a.json b.json\n"
             "Exit code: 0 all requests ok, 2 finished with errors, 1 could not run.");
  app.add_option("--url", config.url, "server base URL, http://HOST:PORT")->required();
  app.add_option("--model", config.client.model, "model name (default: first of GET /v1/models)");
  app.add_option("--api-key", config.client.api_key, "sent as a bearer token");
  std::vector<std::string> workload_args = {"random"};
  app.add_option("--workload", workload_args,
                 "random | shared-prefix | multi-turn | long-doc | agent | zipf | mixed | trace FILE.jsonl")
      ->expected(1, 2);
  app.add_option("--seed", w.seed, "workload and arrival seed")->capture_default_str();
  app.add_option("--input-len", w.input_len, "prompt length in tokens (approximate)")->capture_default_str();
  app.add_option("--output-len", w.output_len, "answer length (max_tokens) in tokens")->capture_default_str();
  std::string len_dist = "fixed";
  app.add_option("--len-dist", len_dist, "fixed | uniform | normal")->capture_default_str();
  app.add_option("--len-spread", w.len_spread, "uniform: +-fraction; normal: 2 sd as a fraction")->capture_default_str();
  app.add_option("--groups", w.groups, "shared-prefix: groups G")->capture_default_str();
  app.add_option("--prompts-per-group", w.prompts_per_group, "shared-prefix: prompts P per group")->capture_default_str();
  app.add_option("--prefix-len", w.prefix_len, "shared-prefix: shared system prompt tokens L")->capture_default_str();
  app.add_option("--users", w.users, "multi-turn, mixed: users U (mixed: streaming users); agent: agents")->capture_default_str();
  app.add_option("--rounds", w.rounds, "multi-turn, mixed: rounds R per user; agent: steps")->capture_default_str();
  app.add_option("--arrivals", w.arrivals, "mixed: long-prompt arrivals A")->capture_default_str();
  app.add_option("--arrival-len", w.arrival_len, "mixed: an arrival's prompt tokens")->capture_default_str();
  app.add_option("--arrival-output-len", w.arrival_output_len, "mixed: an arrival's max_tokens")->capture_default_str();
  app.add_option("--arrival-rate", w.arrival_rate, "mixed: arrivals per second (Poisson)")->capture_default_str();
  app.add_option("--arrival-delay", w.arrival_delay_s, "mixed: seconds before the first arrival")->capture_default_str();
  app.add_option("--system-len", w.system_len, "multi-turn: shared system prompt tokens (0 = none); agent: tools")->capture_default_str();
  app.add_option("--question-len", w.question_len, "multi-turn: follow-up question tokens")->capture_default_str();
  app.add_option("--tool-output-len", w.tool_output_len, "agent: tokens per tool output")->capture_default_str();
  app.add_option("--documents", w.documents, "long-doc: documents D")->capture_default_str();
  int doc_len = -1;
  app.add_option("--doc-len", doc_len, "long-doc: document tokens L (default 1024)");
  int questions = -1;
  app.add_option("--questions", questions, "long-doc: questions Q per document (default 4); zipf: distinct questions Q (default 100)");
  app.add_option("--zipf-exponent", w.zipf_exponent, "zipf: question k is asked with probability ~ 1/(k+1)^s")
      ->capture_default_str();
  app.add_option("--temperature", config.client.temperature,
                 "send this temperature (0 = deterministic: a response cache may answer); default: not sent");
  app.add_option("--order", w.doc_order, "long-doc: sequential | interleaved | random")->capture_default_str();
  app.add_option("--trace", w.trace_path, "trace: the JSONL file (or --workload trace FILE)");
  app.add_option("--concurrency", load.concurrency,
                 "sessions in flight (default 1; users for multi-turn/agent; 64 under --rate)");
  app.add_option("--rate", load.rate, "session arrivals per second, Poisson (default: as fast as allowed)");
  app.add_option("--burstiness", load.burstiness, "gamma shape of arrival gaps (1 = Poisson)")->capture_default_str();
  std::int64_t requests = -1;
  app.add_option("--requests", requests, "measured requests (random: default 100; others: cap)");
  app.add_option("--duration", load.duration_s, "stop starting requests after S seconds");
  app.add_option("--warmup", config.warmup_requests, "unmeasured requests first")->capture_default_str();
  app.add_option("--max-tokens", load.max_tokens, "override every request's max_tokens");
  app.add_flag("--ignore-eos", config.client.ignore_eos, "send ignore_eos: true");
  bool cache_keys = false;
  app.add_flag("--prompt-cache-key", cache_keys,
               "send prompt_cache_key (one per session) with every request: a kvstash router keeps each on one worker");
  app.add_option("--api", config.client.api, "chat | completions")->capture_default_str();
  app.add_option("--timeout", config.client.timeout_s, "per-request timeout in seconds")->capture_default_str();
  std::string slo;
  app.add_option("--slo", slo, "goodput objectives, e.g. ttft:500,tpot:50,itl:100,e2e:5000 (ms; itl: every gap)");
  app.add_option("--out", config.out_path, "write records and summary as JSON");
  app.add_option("--report", config.report_path, "write a self-contained HTML report");
  bool no_progress = false;
  app.add_flag("--no-progress", no_progress, "no progress bar on stderr");
  load.concurrency = 0;  // 0 = pick the default below
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }

  w.kind = workload_args[0];
  if (workload_args.size() > 1) w.trace_path = workload_args[1];
  if (w.kind == "long-doc") w.prefix_len = doc_len > 0 ? doc_len : 1024;
  if (questions > 0) {
    w.questions_per_document = questions;
    w.questions = questions;
  }
  auto dist = bench::parse_length_distribution(len_dist);
  if (!dist) {
    std::cerr << "kvstash bench: " << dist.status().message() << "\n";
    return 1;
  }
  w.len_dist = *dist;
  auto parsed_slo = bench::parse_slo(slo);
  if (!parsed_slo) {
    std::cerr << "kvstash bench: " << parsed_slo.status().message() << "\n";
    return 1;
  }
  config.slo = *parsed_slo;
  // random: --requests is the number of prompts; endless under --duration without --requests.
  w.num_prompts = requests >= 0 ? requests : (load.duration_s >= 0 ? -1 : 100);
  load.max_requests = requests;
  load.seed = w.seed;
  if (w.kind == "mixed" && (load.concurrency != 0 || load.rate > 0)) {
    std::cerr << "kvstash bench: mixed sends each session on its own connection at its own time: "
                 "--concurrency and --rate do not apply (use --users, --arrivals, --arrival-rate)\n";
    return 1;
  }
  if (load.concurrency == 0) {
    if (w.kind == "multi-turn" || w.kind == "agent") load.concurrency = w.users;
    else if (load.rate > 0 || w.kind == "trace") load.concurrency = kDefaultRateConcurrency;
    else load.concurrency = 1;
  }
  config.progress = !no_progress;
  if (cache_keys) config.client.prompt_cache_key_prefix = "kvstash-bench-" + std::to_string(w.seed) + "-";

  auto outcome = bench::run_bench(config, std::cout, std::cerr);
  if (!outcome.error.empty()) std::cerr << "kvstash bench: " << outcome.error << "\n";
  return outcome.exit_code;
}

}  // namespace kvstash::cli
