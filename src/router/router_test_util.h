// For the router's and the KV events' end-to-end tests (header only, test code): reading a
// node's KV event stream, computing a prompt's keys as a router does, and the router as a test
// harness (in process, on a free port) in front of real `kvstash serve` workers.
//
// Every wait is a bounded poll. Thread safety: one thread per helper object.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/sse.h"
#include "router/router.h"
#include "router/router_impl.h"
#include "server/prompt_builder.h"
#include "server/request_parser.h"
#include "server/serve_process.h"

namespace kvstash::router::testing {

// The id the workers serve: the generated models' general.name ("kvstash-random " + preset).
inline const std::string kTinyModelId = "kvstash-random tiny";


using nlohmann::json;

// Reads GET /v1/kv/events?QUERY from a node, one JSON data object per SSE message, until `done`
// says so (or the stream ends / 20 s pass without a byte). Returns the messages read.
inline std::vector<json> read_events(int port, const std::string& query, const std::function<bool(const std::vector<json>&)>& done) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20, 0);
  std::vector<json> got;
  bench::SseParser parser;
  bool finished = false;
  c.Get("/v1/kv/events" + (query.empty() ? "" : "?" + query), [&](const char* data, std::size_t n) {
    parser.feed(std::string_view(data, n), [&](const std::string& d) {
      if (finished) return;
      got.push_back(json::parse(d, nullptr, false));
      finished = done(got);
    });
    return !finished;
  });
  return got;
}

// Reads a stream until its snapshot has ended.
inline std::vector<json> read_snapshot(int port, const std::string& query = "") {
  return read_events(port, query, [](const std::vector<json>& m) { return m.back().value("type", "") == "snapshot_end"; });
}

// The keys of `source` in a snapshot's messages, as hex.
inline std::set<std::string> snapshot_keys(const std::vector<json>& messages, const std::string& source) {
  std::set<std::string> out;
  for (const json& m : messages) {
    if (m.value("type", "") == "snapshot" && m.value("source", "") == source) {
      for (const auto& k : m["keys"]) out.insert(k.get<std::string>());
    }
  }
  return out;
}

// A node's KV layout from its /v1/kv/info.
inline WorkerKvInfo kv_info_of(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/v1/kv/info");
  WorkerKvInfo info;
  if (!r || r->status != 200) return info;
  json j = json::parse(r->body);
  info.fingerprint = cache::ChunkKey::from_hex(j["model_fingerprint"].get<std::string>())->bytes;
  info.kv_format = j["kv_format"];
  info.block_size = j["block_size"];
  info.chunk_tokens = j["chunk_tokens"];
  return info;
}

// The keys of a /v1/completions request with token-id prompt `prompt`, as a worker computes them
// (the prompt builder adds BOS where the model wants one).
inline RequestKeys keys_of(const RouterModel& model, const WorkerKvInfo& info, const std::vector<int>& prompt,
                           const std::string& salt = "") {
  json body = {{"model", kTinyModelId}, {"prompt", prompt}, {"max_tokens", 4}};
  if (!salt.empty()) body["cache_salt"] = salt;
  server::ParsedRequest parsed;
  EXPECT_FALSE(server::parse_request(server::Endpoint::kCompletions, body.dump(), parsed));
  GenerationRequest gen;
  EXPECT_FALSE(server::build_generation_request(parsed, model.info, model.chat_template, gen));
  return compute_request_keys(info, gen.prompt, salt);
}

// `kvstash route ARGS --port 0` as a child process (stderr in `log_path`), its port read from
// the "routing on http://HOST:PORT" line (a bounded wait). The destructor kills it.
class RouteProcess {
 public:
  RouteProcess(std::vector<std::string> args, const std::string& log_path) : log_path_(log_path) {
    std::vector<std::string> argv_s = {std::string(KVSTASH_BINARY_DIR) + "/kvstash", "route", "--port", "0"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    const std::string marker = "routing on http://";
    for (int i = 0; i < 2400 && port_ == 0 && exit_code_ < 0; ++i) {  // 2400 x 25 ms, bounded
      const std::string text = log();
      const auto at = text.find(marker);
      const auto colon = at == std::string::npos ? at : text.find(':', at + marker.size());
      if (colon != std::string::npos) {
        port_ = std::atoi(text.c_str() + colon + 1);
      } else {
        poll_exit();
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
    }
  }
  ~RouteProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  RouteProcess(const RouteProcess&) = delete;
  RouteProcess& operator=(const RouteProcess&) = delete;
  int port() const { return port_; }
  std::string log() const { return server::testing::read_text_file(log_path_); }
  // The exit code once it exited by itself (bounded wait), -1 while it runs.
  int wait_exit() {
    for (int i = 0; i < 6000 && exit_code_ < 0; ++i) {  // 6000 x 10 ms, bounded
      poll_exit();
      if (exit_code_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_code_;
  }

 private:
  void poll_exit() {
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
    }
  }
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
};

// A deterministic prompt of n token ids in [3, 243) (an LCG seeded by `seed`).
inline std::vector<int> prompt(int seed, int n) {
  std::vector<int> out;
  std::uint32_t x = 2246822519u * static_cast<std::uint32_t>(seed + 7);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(3 + static_cast<int>((x >> 8) % 240));
  }
  return out;
}

inline std::string worker_url(const server::testing::ServeProcess& p) { return "http://127.0.0.1:" + std::to_string(p.port()); }

struct Answer {
  int status = 0;
  std::string body;
  std::string worker;  // x-kvstash-worker
  std::string upstream_ms;  // x-kvstash-upstream-ms
  double elapsed_ms = 0;    // the whole exchange, as this client saw it
  json json_body() const { return json::parse(body, nullptr, false); }
  int cached() const {
    json j = json_body();
    return j.is_object() && j.contains("usage") ? j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() : -1;
  }
};

// body to path, naming kTinyModelId when path is an API request without a model.
inline Answer post(int port, const std::string& path, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  const auto start = std::chrono::steady_clock::now();
  auto r = c.Post(path, path.rfind("/v1/", 0) == 0 ? server::testing::naming_model(body.dump(), kTinyModelId) : body.dump(),
                  "application/json");
  Answer a;
  a.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!r) return a;
  a.status = r->status;
  a.body = r->body;
  a.worker = r->get_header_value("x-kvstash-worker");
  a.upstream_ms = r->get_header_value("x-kvstash-upstream-ms");
  return a;
}

inline json completion(const std::vector<int>& prompt, int max_tokens = 4, const std::string& salt = "") {
  json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  if (!salt.empty()) body["cache_salt"] = salt;
  return body;
}

// Polls (bounded: 60 s, for a loaded sanitizer run) until pred() holds; its last value.
inline bool wait_until(const std::function<bool()>& pred) {
  for (int i = 0; i < 3000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

inline WorkerStatus status_of(const Router& r, const std::string& url) {
  for (const WorkerStatus& s : r.workers()) {
    if (s.url == url) return s;
  }
  return {};
}

}  // namespace kvstash::router::testing
