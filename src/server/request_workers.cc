#include "server/request_workers.h"

#include <algorithm>

namespace kvstash::server {

RequestWorkers::RequestWorkers(RequestWorkersOptions options) : options_(options) {
  const int n = std::max(1, options_.threads);
  threads_.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
}

RequestWorkers::~RequestWorkers() { stop(); }

bool RequestWorkers::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= options_.max_queued) return false;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void RequestWorkers::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void RequestWorkers::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

}  // namespace kvstash::server
