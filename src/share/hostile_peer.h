// For the bounded-peer-I/O tests (test code, header only): the hostile peer of
// src/share/testdata/hostile_peer.py as a child process on 127.0.0.1. It answers every peer request
// by misbehaving on the wire in the mode set with mode(): "trickle-headers", "trickle-body",
// "endless" or "notfound"; stats() reports what it was asked and how many answers are open now
// (the stats request itself included).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace kvstash::share::testing {

// VmRSS of a process, in bytes (0 if it cannot be read).
inline std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmRSS:  1234 kB"
  }
  return 0;
}

class HostilePeer {
 public:
  HostilePeer() {
    std::filesystem::path here = std::filesystem::path(__FILE__).parent_path();
    if (here.is_relative()) here = std::filesystem::path(KVSTASH_BINARY_DIR) / here;  // ccache's relative paths
    const std::string script = (here / "testdata" / "hostile_peer.py").string();
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::execlp("python3", "python3", script.c_str(), "0", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    std::string line;
    for (int i = 0; i < 600 && line.find('\n') == std::string::npos; ++i) {  // 30 s at most: python starts slowly on a loaded machine
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[64];
        const ssize_t n = ::read(out[0], buf, sizeof buf);
        if (n <= 0) break;
        line.append(buf, static_cast<std::size_t>(n));
      }
    }
    ::close(out[0]);
    if (line.rfind("PORT ", 0) == 0) port_ = std::atoi(line.c_str() + 5);
  }
  ~HostilePeer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  HostilePeer(const HostilePeer&) = delete;
  HostilePeer& operator=(const HostilePeer&) = delete;

  bool ready() const { return port_ > 0; }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  bool mode(const std::string& m) const {
    auto r = client().Get("/__mode/" + m);
    return r && r->status == 200;
  }
  nlohmann::json stats() const {
    auto r = client().Get("/__stats");
    if (!r || r->status != 200) return nlohmann::json::object();
    return nlohmann::json::parse(r->body, nullptr, false);
  }
  // Polls (bounded: max_ms) until `key` of stats() is at least `at_least`; the last value seen.
  long wait_stat(const std::string& key, long at_least, int max_ms = 10000) const {
    long v = 0;
    for (int i = 0; i < max_ms / 20; ++i) {
      const auto s = stats();
      v = s.contains(key) ? s[key].get<long>() : 0;
      if (v >= at_least) break;
      ::usleep(20000);
    }
    return v;
  }

 private:
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(5, 0);
    return c;
  }
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace kvstash::share::testing
