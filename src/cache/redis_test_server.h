// A real redis-server for tests: started on a free loopback port, killed at the end (header only,
// test code). Tests fail when redis-server is not installed: a test that cannot run never passes.
#pragma once

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace kvstash::cache::testing {

inline bool redis_installed() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }
inline bool redis_cli_installed() { return std::system("command -v redis-cli >/dev/null 2>&1") == 0; }

// A port the kernel just handed out on 127.0.0.1; free unless someone races for it.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline bool port_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A free port P whose cluster bus port P + 10000 is free too (kernel ephemeral ports are often
// above 55535, where P + 10000 does not exist and a cluster node cannot start).
inline int free_cluster_port() {
  for (int attempt = 0; attempt < 2000; ++attempt) {
    const int p = 20000 + (::getpid() * 7919 + attempt * 104729) % 30000;
    if (port_free(p) && port_free(p + 10000)) return p;
  }
  return free_port();
}

// One reply's text from a fresh connection, "" if none (for readiness checks and admin steps).
inline std::string redis_query(int port, const std::string& command) {
  timeval tv{0, 200000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return "";
  }
  redisSetTimeout(c, timeval{2, 0});
  auto* r = static_cast<redisReply*>(redisCommand(c, command.c_str()));
  std::string out;
  if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)) {
    out.assign(r->str, r->len);
  } else if (r && r->type == REDIS_REPLY_INTEGER) {
    out = std::to_string(r->integer);
  }
  if (r) freeReplyObject(r);
  redisFree(c);
  return out;
}

class RedisTestServer {
 public:
  // extra: more redis-server arguments (cluster mode). Waits up to 30 s for PONG.
  explicit RedisTestServer(int port, std::vector<std::string> extra = {}) : port_(port), extra_(std::move(extra)) {
    start();
  }
  ~RedisTestServer() { kill(); }
  int port() const { return port_; }
  bool ready() const { return ready_; }

  void start() {
    std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no", "--loglevel", "warning"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    ready_ = false;
    for (int i = 0; i < 1500 && !ready_; ++i) {  // 1500 x 20 ms: a bounded wait, not a timing test
      const std::string pong = redis_query(port_, "PING");
      ready_ = pong == "PONG" || pong.starts_with("NOAUTH");  // up, and wanting a password
      if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  int port_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace kvstash::cache::testing
