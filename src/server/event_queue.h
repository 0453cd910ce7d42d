// Hands one request's engine events from the engine thread to the HTTP thread that serves it.
//
// Thread safety: push() from the engine thread (inside the TokenCallback), wait_pop() from the
// HTTP thread; both lock `mutex_`. Held through a shared_ptr by both sides, so an event that
// arrives after the HTTP side gave up (a cancelled request's final event) lands safely.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "engine/engine.h"

namespace kvstash::server {

class EventQueue {
 public:
  void push(const TokenEvent& event) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(event);
    }
    ready_.notify_one();
  }

  // Waits up to `timeout` for at least one event, then moves all queued events into `out`
  // (appending). Returns false when none arrived in time.
  bool wait_pop(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    for (TokenEvent& e : events_) out.push_back(std::move(e));
    events_.clear();
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<TokenEvent> events_;  // guarded by mutex_
};

}  // namespace kvstash::server
