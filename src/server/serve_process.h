// For tests: the real `kvstash serve` binary as a child process on 127.0.0.1, and the HTTP calls
// the tiered-store end-to-end tests make to it (header only, test code).
//
// A ServeProcess runs KVSTASH_BINARY_DIR/kvstash serve with `--port 0`, its stderr in a log file,
// and learns its port from the "serving ... on http://HOST:PORT" line (a bounded wait). stop()
// sends SIGTERM (the server finishes its queued chunk writes), kill9() sends SIGKILL.
//
// Thread safety: one thread per ServeProcess; the HTTP helpers make their own clients.
#pragma once

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/http_test_util.h"

namespace kvstash::server::testing {

using nlohmann::json;

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline int count_substr(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

class ServeProcess {
 public:
  // args: the serve flags after -m MODEL (cache flags, --chunk-tokens, ...).
  ServeProcess(const std::string& model, std::vector<std::string> args, const std::string& log_path)
      : log_path_(log_path) {
    std::vector<std::string> argv_s = {std::string(KVSTASH_BINARY_DIR) + "/kvstash", "serve", "-m", model,
                                       "--host", "127.0.0.1", "--port", "0", "--threads", "1"};
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
    // 2400 x 25 ms: a bounded wait for the model to load (a loaded machine under a sanitizer can take
    // seconds), not a timing assertion.
    for (int i = 0; i < 2400 && port_ == 0 && alive(); ++i) {
      const std::string log = read_text_file(log_path_);
      const auto at = log.find(" on http://127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::atoi(log.c_str() + at + std::string(" on http://127.0.0.1:").size());
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
    }
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--alias") model_id_ = args[i + 1];
    }
    if (port_ > 0 && model_id_.empty()) {
      auto r = client(60)->Get("/v1/models");
      const json models = r && r->status == 200 ? json::parse(r->body, nullptr, /*allow_exceptions=*/false) : json();
      if (models.is_object() && models.contains("data") && models["data"].is_array() && !models["data"].empty()) {
        model_id_ = models["data"][0].value("id", "");
      }
    }
  }
  ~ServeProcess() { kill9(); }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool ready() const { return port_ > 0; }
  std::string log() const { return read_text_file(log_path_); }

  bool alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
      return false;
    }
    return true;
  }
  // SIGTERM and wait for the exit (queued chunk writes are finished first). Returns the exit code.
  int stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
      // A failed stop is most often a sanitizer's finding in the child (ThreadSanitizer exits 66):
      // its report is in the log, which CI never keeps, so it goes to the test's own output.
      if (exit_code_ != 0) {
        std::fprintf(stderr, "kvstash serve exited %d on SIGTERM; its log (%s):\n%s\n", exit_code_,
                     log_path_.c_str(), read_text_file(log_path_).c_str());
      }
    }
    return exit_code_;
  }
  // Sends SIGTERM and returns at once (the test then watches what open requests get).
  void terminate() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
  }
  void kill9() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // Waits (bounded) for the process to exit by itself; its exit code, or -1 if it is still running.
  int wait_exit(int max_ms = 60000) {
    for (int i = 0; i < max_ms / 10 && alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return alive() ? -1 : exit_code_;
  }

  std::unique_ptr<httplib::Client> client(int timeout_s = 30) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(timeout_s, 0);
    c->set_connection_timeout(2, 0);
    return c;
  }

  // The id the server serves (its first --alias, or its GET /v1/models asked once it listens:
  // give a server with API keys an --alias), which generation requests must name; "" when the
  // server did not answer.
  const std::string& model_id() const { return model_id_; }

  // body as a generation request to this server sends it: naming its model (see naming_model).
  std::string named(const std::string& path, const std::string& body) const {
    return path.rfind("/v1/", 0) == 0 ? naming_model(body, model_id_) : body;
  }

  // A greedy /v1/completions over token ids; the parsed body, or null json on failure. The read
  // timeout is generous: a sanitizer build prefilling thousands of tokens on scalar kernels
  // (share_spot_check_e2e_test's node A) took over 30 s on a loaded 2-core machine.
  json complete(const std::vector<int>& prompt, int max_tokens, const std::string& salt = "") const {
    json body = {{"model", model_id()}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", 1}};
    if (!salt.empty()) body["cache_salt"] = salt;
    auto r = client(180)->Post("/v1/completions", body.dump(), "application/json");
    if (!r || r->status != 200) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      last_error_ = !r ? "http error " + httplib::to_string(r.error()) : "status " + std::to_string(r->status) + ": " + r->body;
      return json();
    }
    return json::parse(r->body);
  }
  // Why the last complete() returned null (complete() may run on several threads at once).
  std::string last_error() const {
    std::lock_guard<std::mutex> lock(error_mutex_);
    return last_error_;
  }

  std::string metrics() const {
    auto r = client()->Get("/metrics");
    return r && r->status == 200 ? r->body : std::string();
  }
  // The value of one sample line "NAME VALUE" (name with labels), or -1 if absent.
  double metric(const std::string& sample_name) const { return metric_in(metrics(), sample_name); }
  static double metric_in(const std::string& page, const std::string& sample_name) {
    const std::string needle = "\n" + sample_name + " ";
    const auto at = page.find(needle);
    if (at == std::string::npos) return -1;
    return std::atof(page.c_str() + at + needle.size());
  }
  // Polls (bounded: max_ms) until metric(sample_name) >= at_least; the last value seen.
  double wait_metric(const std::string& sample_name, double at_least, int max_ms = 60000) const {
    double v = -1;
    for (int i = 0; i < max_ms / 20; ++i) {
      v = metric(sample_name);
      if (v >= at_least) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return v;
  }
  // Polls until the write-behind queue is empty (bounded).
  bool wait_writes_done(int max_ms = 60000) const {
    for (int i = 0; i < max_ms / 20; ++i) {
      if (metric("kvstash_kv_store_queue_bytes") == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
  std::string model_id_;
  mutable std::mutex error_mutex_;
  mutable std::string last_error_;
};

// What a greedy completion produced, token by token (the tokens as the API spells them).
inline std::vector<std::string> tokens_of(const json& r) {
  std::vector<std::string> out;
  if (r.is_null()) return out;
  for (const auto& t : r["choices"][0]["logprobs"]["tokens"]) out.push_back(t.get<std::string>());
  return out;
}
inline std::string text_of(const json& r) { return r.is_null() ? "<no response>" : r["choices"][0]["text"].get<std::string>(); }
inline int cached_of(const json& r) {
  return r.is_null() ? -1 : r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
}

}  // namespace kvstash::server::testing
