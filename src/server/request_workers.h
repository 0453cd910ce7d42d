// The threads that turn request bodies into work for the engine: JSON parsing, chat-template
// rendering and tokenization of bodies up to --max-body-mib run here, never on the HTTP layer's
// I/O threads, so that /health and every other connection stay responsive while a client posts
// an 8 MiB body (issue 31). A job answers through Exchange::post(), back on its strand.
//
// The queue is bounded: submit() refuses a job beyond max_queued (the caller answers 503), so a
// flood of large bodies cannot grow memory without bound.
//
// Thread safety: submit() from any thread; stop() from one controlling thread (idempotent; jobs
// still queued run before the threads join, so every exchange gets its answer).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvstash::server {

struct RequestWorkersOptions {
  int threads = 2;                // worker threads (at least 1)
  std::size_t max_queued = 256;   // jobs waiting beyond the running ones; one more is refused
};

class RequestWorkers {
 public:
  explicit RequestWorkers(RequestWorkersOptions options = {});
  ~RequestWorkers();  // stop()
  RequestWorkers(const RequestWorkers&) = delete;
  RequestWorkers& operator=(const RequestWorkers&) = delete;

  // Queues `job`; false when the queue is full or the workers are stopping (the job is dropped).
  bool submit(std::function<void()> job);
  void stop();

 private:
  void loop();

  const RequestWorkersOptions options_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                      // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace kvstash::server
