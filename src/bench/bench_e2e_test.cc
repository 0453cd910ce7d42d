// kvstash bench against the real `kvstash serve` on loopback with a tiny generated model:
// every workload runs, each summary equals the one recomputed from the raw records of --out,
// multi-turn rounds after the first hit the server's prefix cache, and a server killed mid-run
// gives counted errors, not a crash. Skipped (with the reason) while the kvstash binary lacks
// `serve` or `gen-model`. KVSTASH_BIN overrides the binary's path.
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "bench/bench_run.h"
#include "bench/http_client.h"
#include "bench/result_io.h"

namespace kvstash::bench {
namespace {

std::string kvstash_binary() {
  if (const char* bin = std::getenv("KVSTASH_BIN")) return bin;
  return std::string(KVSTASH_BINARY_DIR) + "/kvstash";
}

// A directory of this process's own (model, logs, outputs), so that test runs at the same time
// never share or race on files; removed when the process exits.
const std::string& scratch_dir() {
  struct Dir {
    Dir() {
      std::string pattern = testing::TempDir() + "/kvstash-bench-e2e-XXXXXX";
      if (mkdtemp(pattern.data()) != nullptr) path = pattern;
    }
    ~Dir() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove_all(path, ignored);
    }
    std::string path;
  };
  static const Dir dir;
  return dir.path;
}

int run_quietly(const std::string& command) {
  const int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// A `kvstash serve` child process on 127.0.0.1.
class ServerProcess {
 public:
  // Starts the server and waits (bounded) for GET /health; "" on success, else why not.
  std::string start(const std::string& model_path, const std::string& log_path) {
    port_ = free_port();
    pid_ = fork();
    if (pid_ == 0) {
      // The server must not outlive a test binary that is killed.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(log, 1);
      dup2(log, 2);
      const std::string bin = kvstash_binary(), port = std::to_string(port_);
      // --alias tiny: the tests name the model "tiny" (a request naming another model gets 404).
      // --spec ngram: the server drafts by prompt lookup, which the bench reports from /metrics.
      execl(bin.c_str(), bin.c_str(), "serve", "-m", model_path.c_str(), "--host", "127.0.0.1", "--port",
            port.c_str(), "--alias", "tiny", "--spec", "ngram", static_cast<char*>(nullptr));
      _exit(127);
    }
    OpenAiClient probe(*parse_url(url()), ClientOptions{});
    // Up to 60 s: loading and fingerprinting the model takes a moment on a busy machine.
    for (int attempt = 0; attempt < 600; ++attempt) {
      auto status = probe.get_status("/health");
      if (status && *status == 200) return "";
      int child_status;
      if (waitpid(pid_, &child_status, WNOHANG) == pid_) {
        pid_ = -1;
        return "kvstash serve exited early; see " + log_path;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "kvstash serve did not answer /health within 60 s; see " + log_path;
  }
  void kill_now() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  ~ServerProcess() { kill_now(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Why the tests cannot run here, or "" when they can; makes the tiny model once.
std::string prepare(std::string& model_path) {
  const std::string bin = kvstash_binary();
  if (access(bin.c_str(), X_OK) != 0) return "no kvstash binary at " + bin + " (build the kvstash target)";
  if (run_quietly(bin + " serve --help") != 0) return "the kvstash binary lacks the `serve` subcommand";
  model_path = scratch_dir() + "/kvstash_bench_tiny.gguf";
  if (access(model_path.c_str(), R_OK) != 0 &&
      run_quietly(bin + " gen-model --preset tiny --type f16 --out " + model_path) != 0) {
    return "`kvstash gen-model --preset tiny --type f16` failed";
  }
  return "";
}

BenchConfig small_config(const std::string& url, const std::string& kind) {
  BenchConfig c;
  c.url = url;
  c.client.ignore_eos = true;  // a random-weight model may pick EOS at once
  c.client.timeout_s = 60;
  c.workload.kind = kind;
  c.workload.seed = 7;
  c.workload.input_len = 48;
  c.workload.output_len = 6;
  c.workload.num_prompts = 6;
  c.workload.groups = 2;
  c.workload.prompts_per_group = 3;
  c.workload.prefix_len = 96;
  c.workload.users = 2;
  c.workload.rounds = 3;
  c.workload.question_len = 12;
  c.workload.tool_output_len = 24;
  c.workload.documents = 2;
  c.workload.questions_per_document = 2;
  c.load.concurrency = 2;
  c.warmup_requests = 1;
  c.progress = false;
  c.print_table = false;
  return c;
}

class BenchAgainstServer : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    setup_error_ = new std::string(prepare(model_path_));
    if (!setup_error_->empty()) return;
    server_ = new ServerProcess();
    *setup_error_ = server_->start(model_path_, scratch_dir() + "/kvstash_bench_serve.log");
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(setup_error_->empty()) << "cannot run: " << *setup_error_;  // fails, never skips
  }

  // Runs `config`, checks it completed, and that --out's summary is the one its records give.
  BenchResult run_and_check(BenchConfig config, std::int64_t expected_requests) {
    config.out_path = scratch_dir() + "/kvstash_bench_" + config.workload.kind + ".json";
    std::ostringstream out, log;
    const BenchOutcome outcome = run_bench(config, out, log);
    EXPECT_EQ(outcome.exit_code, 0) << outcome.error << log.str() << first_error(outcome.result);
    auto back = read_result(config.out_path);
    EXPECT_TRUE(back.has_value()) << back.status().to_string();
    if (!back) return {};
    EXPECT_EQ(back->summary.requests, expected_requests);
    EXPECT_EQ(back->summary.completed, expected_requests);
    const Summary recomputed = summarize(back->records, back->summary.slo);
    EXPECT_EQ(summary_to_json(recomputed), summary_to_json(back->summary));
    EXPECT_GT(back->summary.ttft_ms.mean, 0);
    EXPECT_GT(back->summary.output_throughput, 0);
    for (const auto& r : back->records) {
      EXPECT_TRUE(r.usage_reported);
      EXPECT_EQ(r.output_tokens, config.workload.output_len);
      EXPECT_GT(r.prompt_tokens, 0);
    }
    return std::move(*back);
  }

  static std::string first_error(const BenchResult& result) {
    for (const auto& r : result.records) {
      if (!r.ok()) return " first error: " + r.error + ": " + r.error_detail;
    }
    return "";
  }

  static std::string* setup_error_;
  static std::string model_path_;
  static ServerProcess* server_;
};

std::string* BenchAgainstServer::setup_error_ = nullptr;
std::string BenchAgainstServer::model_path_;
ServerProcess* BenchAgainstServer::server_ = nullptr;

TEST_F(BenchAgainstServer, RandomChat) { run_and_check(small_config(server_->url(), "random"), 6); }

TEST_F(BenchAgainstServer, RandomCompletionsUnderPoissonRate) {
  BenchConfig c = small_config(server_->url(), "random");
  c.client.api = "completions";
  c.load.rate = 20;
  c.slo.ttft_ms = 1e9;
  const BenchResult r = run_and_check(c, 6);
  EXPECT_EQ(r.summary.good_requests, 6);
}

TEST_F(BenchAgainstServer, EndlessRandomStopsAfterDuration) {
  BenchConfig c = small_config(server_->url(), "random");
  c.workload.num_prompts = -1;  // endless: --duration without --requests
  c.load.duration_s = 0.5;
  c.warmup_requests = 0;
  std::ostringstream out, log;
  const BenchOutcome outcome = run_bench(c, out, log);
  EXPECT_EQ(outcome.exit_code, 0) << outcome.error << first_error(outcome.result);
  const Summary& s = outcome.result.summary;
  EXPECT_GT(s.requests, 0);
  for (const auto& r : outcome.result.records) EXPECT_LT(r.start_s, 0.5);  // none started after the limit
}

TEST_F(BenchAgainstServer, SharedPrefix) {
  const BenchResult r = run_and_check(small_config(server_->url(), "shared-prefix"), 6);
  EXPECT_GT(r.summary.cached_token_ratio, 0) << "the later prompts of a group share its system prompt";
}

TEST_F(BenchAgainstServer, MultiTurnRoundsHitTheCache) {
  const BenchResult r = run_and_check(small_config(server_->url(), "multi-turn"), 6);
  ASSERT_EQ(r.summary.rounds.size(), 3u);
  std::int64_t prompt = 0, cached = 0;
  for (const auto& rec : r.records) {
    prompt += rec.prompt_tokens;
    cached += rec.cached_tokens;
    if (rec.round > 0) {
      EXPECT_GT(rec.cached_tokens, 0) << "session " << rec.session_id << " round " << rec.round;
    }
  }
  // The server's /metrics over the measured run (after the warm-up) counts what the records report.
  ASSERT_TRUE(r.server.contains("prompt_cache")) << r.server.dump();
  EXPECT_EQ(r.server["prompt_cache"]["prompt_tokens"].get<double>(), static_cast<double>(prompt));
  EXPECT_EQ(r.server["prompt_cache"]["cached_tokens"].get<double>(), static_cast<double>(cached));
}

TEST_F(BenchAgainstServer, SpeculativeDecodingIsReportedFromTheServersMetrics) {
  // Greedy answers of a random-weight model repeat themselves, so prompt lookup finds drafts in
  // them; the output is deterministic (batch-invariant kernels), so the drafts happen every run.
  BenchConfig c = small_config(server_->url(), "multi-turn");
  c.client.temperature = 0;
  c.workload.output_len = 40;
  c.print_table = true;
  std::ostringstream out, log;
  c.out_path = scratch_dir() + "/kvstash_bench_spec.json";
  const BenchOutcome outcome = run_bench(c, out, log);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.error << log.str() << first_error(outcome.result);
  const nlohmann::json& s = outcome.result.server;
  ASSERT_TRUE(s.contains("speculative")) << s.dump();
  EXPECT_GT(s["speculative"]["drafts"].get<double>(), 0);
  EXPECT_LE(s["speculative"]["accepted_tokens"].get<double>(), s["speculative"]["draft_tokens"].get<double>());
  EXPECT_NE(out.str().find("speculative decoding:"), std::string::npos) << out.str();
  auto back = read_result(c.out_path);
  ASSERT_TRUE(back.has_value()) << back.status().to_string();
  EXPECT_EQ(back->server, s);
}

TEST_F(BenchAgainstServer, LongDoc) { run_and_check(small_config(server_->url(), "long-doc"), 4); }

TEST_F(BenchAgainstServer, Agent) {
  const BenchResult r = run_and_check(small_config(server_->url(), "agent"), 6);
  // The context grows each step.
  for (const auto& rec : r.records) {
    for (const auto& prev : r.records) {
      if (prev.session_id == rec.session_id && prev.round + 1 == rec.round) {
        EXPECT_GT(rec.prompt_tokens, prev.prompt_tokens);
      }
    }
  }
}

TEST_F(BenchAgainstServer, Trace) {
  const std::string trace = scratch_dir() + "/kvstash_bench_trace.jsonl";
  {
    std::ofstream out(trace);
    out << R"({"timestamp": 100.0, "prompt": "The river holds a small light.", "max_tokens": 6})" << "\n"
        << R"({"timestamp": 100.2, "messages": [{"role": "user", "content": "What is a tree?"}], "max_tokens": 6})"
        << "\n"
        << R"({"timestamp": 100.3, "prompt": "Some old road.", "max_tokens": 6})" << "\n";
  }
  BenchConfig c = small_config(server_->url(), "trace");
  c.workload.trace_path = trace;
  const BenchResult r = run_and_check(c, 3);
  // Replayed at the trace's pace: the third request is sent about 0.3 s after the first.
  EXPECT_GE(r.records[2].start_s - r.records[0].start_s, 0.29);
}

// Streams and long-prompt arrivals at once: each class summarised on its own, every arrival sent
// at (never before) its Poisson time.
TEST_F(BenchAgainstServer, MixedReportsEachClass) {
  BenchConfig c = small_config(server_->url(), "mixed");
  c.workload.users = 2;
  c.workload.rounds = 3;
  c.workload.arrivals = 3;
  c.workload.arrival_len = 120;
  c.workload.arrival_output_len = 6;  // run_and_check expects output_len tokens from every request
  c.workload.arrival_rate = 20;
  c.workload.arrival_delay_s = 0.1;
  c.slo.ttft_ms = 1e9;
  c.slo.itl_ms = 1e9;
  const BenchResult r = run_and_check(c, 2 * 3 + 3);
  ASSERT_EQ(r.classes.size(), 2u);
  EXPECT_EQ(r.classes.at("stream").requests, 6);
  EXPECT_EQ(r.classes.at("arrival").requests, 3);
  EXPECT_EQ(r.classes.at("arrival").good_requests, 3);
  auto w = make_workload(c.workload);
  ASSERT_TRUE(w.has_value());
  for (const auto& rec : r.records) {
    if (rec.label != "arrival") continue;
    EXPECT_GE(rec.start_s, w->session(rec.session_id)->timestamp_s) << "session " << rec.session_id;
    EXPECT_GT(rec.prompt_tokens, 100);
  }
}

TEST_F(BenchAgainstServer, CommandLineAndCompare) {
  const std::string bin = kvstash_binary();
  const std::string out = scratch_dir() + "/kvstash_bench_cli.json";
  const std::string report = scratch_dir() + "/kvstash_bench_cli.html";
  const std::string common = bin + " bench --url " + server_->url() +
                             " --workload random --requests 3 --input-len 32 --output-len 4 --ignore-eos";
  EXPECT_EQ(run_quietly(common + " --out " + out + " --report " + report), 0);
  EXPECT_EQ(run_quietly(bin + " bench compare " + out + " " + out), 0);
  EXPECT_EQ(run_quietly(common + " --len-dist zipf"), 1);  // bad arguments: could not run
  EXPECT_TRUE(read_result(out).has_value());
  EXPECT_EQ(access(report.c_str(), R_OK), 0);
}

// Its own server: this test kills it.
TEST(BenchServerKilled, ErrorsAreCountedAndTheRunFinishes) {
  std::string model_path;
  const std::string why = prepare(model_path);
  ASSERT_TRUE(why.empty()) << "cannot run: " << why;
  ServerProcess server;
  const std::string started = server.start(model_path, scratch_dir() + "/kvstash_bench_serve_killed.log");
  ASSERT_TRUE(started.empty()) << "cannot run: " << started;

  BenchConfig c = small_config(server.url(), "random");
  c.workload.num_prompts = 40;
  c.workload.output_len = 200;  // each request lasts many steps: progress (every 200 ms) sees 3 done long before 40
  c.load.max_requests = 40;
  c.client.timeout_s = 10;
  c.warmup_requests = 0;
  auto endpoint = parse_url(c.url);
  ClientOptions client = c.client;
  client.model = "tiny";
  auto workload = make_workload(c.workload);
  ASSERT_TRUE(workload.has_value());
  bool killed = false;
  const auto records = run_load(*workload, nullptr, 0, *endpoint, client, c.load, [&](const Progress& p) {
    if (!killed && p.finished >= 3) {
      server.kill_now();
      killed = true;
    }
  });
  ASSERT_TRUE(killed);
  const Summary s = summarize(records, Slo{});
  EXPECT_GE(s.completed, 3);
  EXPECT_GT(s.failed, 0);
  EXPECT_EQ(s.completed + s.failed, s.requests);
  EXPECT_EQ(s.requests, 40);  // every request was attempted and recorded
  std::int64_t counted = 0;
  for (const auto& [kind, count] : s.errors) counted += count;
  EXPECT_EQ(counted, s.failed);
  EXPECT_GT(s.errors.count(error_kind::kConnect), 0u);
}

}  // namespace
}  // namespace kvstash::bench
