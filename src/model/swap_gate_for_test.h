// For tests of ModelLoadOptions::prepare_in_background: a gate that holds the background copy's
// swap (ModelLoadOptions::before_weights_swap) until the test lets it go, so that passes run on
// both sides of it.
//
//   auto gate = std::make_shared<SwapGate>();
//   options.before_weights_swap = [gate] { gate->wait(); };
//   auto model = Model::load(path, options);
//   SwapGate::LetGoOnExit let_go_on_exit{gate};  // declared after the model: destroyed first
//
// LetGoOnExit lets it go on every way out of the test: ~Model joins the copy's thread, which would
// otherwise wait at a gate never opened.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

namespace kvstash::testing {

class SwapGate {
 public:
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void let_go() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  struct LetGoOnExit {
    std::shared_ptr<SwapGate> gate;
    ~LetGoOnExit() { gate->let_go(); }
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace kvstash::testing
