#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

namespace kvstash {
namespace {

// Every task index runs exactly once per run(), whether the workers are caught spinning (calls
// back to back) or asleep (a pause far beyond the pool's spin time before the call).
void check_runs(ThreadPool& pool, int n_runs, std::chrono::microseconds pause) {
  for (int r = 0; r < n_runs; ++r) {
    const int n_tasks = 1 + r % 13;
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n_tasks));
    pool.run(n_tasks, [&](int task) { hits[static_cast<std::size_t>(task)].fetch_add(1); });
    for (int t = 0; t < n_tasks; ++t) ASSERT_EQ(hits[static_cast<std::size_t>(t)].load(), 1) << "run " << r << " task " << t;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

TEST(ThreadPool, BackToBackRunsRunEachTaskOnce) {
  ThreadPool pool(3);
  check_runs(pool, 2000, std::chrono::microseconds(0));
}

TEST(ThreadPool, RunsAfterWorkersFellAsleep) {
  ThreadPool pool(3);
  check_runs(pool, 20, std::chrono::microseconds(2000));
}

TEST(ThreadPool, RunWaitsForSlowWorkers) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.run(4, [&](int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 4);
}

TEST(ThreadPool, ParallelForCoversTheRangeInGrains) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1001);
  pool.parallel_for(hits.size(), 16, [&](std::size_t begin, std::size_t end) {
    EXPECT_EQ(begin % 16, 0u);
    for (std::size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

TEST(ThreadPool, DestroyedWhileWorkersSpinOrSleep) {
  for (int pause_us : {0, 2000}) {
    ThreadPool pool(4);
    pool.run(8, [](int) {});
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }  // the destructor must wake and join every worker
  SUCCEED();
}

TEST(ThreadPool, SingleThreadPoolRunsInline) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.size(), 1);
  int sum = 0;  // no synchronisation: everything runs on this thread
  pool.run(5, [&](int t) { sum += t; });
  EXPECT_EQ(sum, 10);
}

}  // namespace
}  // namespace kvstash
