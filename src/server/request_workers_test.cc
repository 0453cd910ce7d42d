#include "server/request_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace kvstash::server {
namespace {

// Jobs run off the submitting thread; beyond max_queued waiting jobs, submit() refuses (the
// server answers 503) instead of growing without bound; stop() runs what was queued, then joins.
TEST(RequestWorkers, RunsJobsOffTheCallerAndBoundsTheQueue) {
  RequestWorkers workers(RequestWorkersOptions{.threads = 1, .max_queued = 2});
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<std::thread::id> started;
  ASSERT_TRUE(workers.submit([&, gate] {
    started.set_value(std::this_thread::get_id());
    gate.wait();
  }));
  // The one worker is busy: two jobs may wait, a third is refused.
  EXPECT_NE(started.get_future().get(), std::this_thread::get_id());
  std::atomic<int> ran{0};
  EXPECT_TRUE(workers.submit([&] { ran.fetch_add(1); }));
  EXPECT_TRUE(workers.submit([&] { ran.fetch_add(1); }));
  EXPECT_FALSE(workers.submit([&] { ran.fetch_add(100); }));
  release.set_value();
  workers.stop();  // the queued two run before the threads join
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(workers.submit([&] { ran.fetch_add(1000); }));  // stopped: refused
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
}  // namespace kvstash::server
