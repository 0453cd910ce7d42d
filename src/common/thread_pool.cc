#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace kvstash {
namespace {

// How long a thread spins for the next event before sleeping. Longer than the gaps between a
// decode step's kernel calls (norms, RoPE, attention set-up: a few us) so that workers stay awake
// through a step, short enough that an idle engine gives its cores back at once.
constexpr std::int64_t kSpinNanos = 50'000;

// Spins until done() or kSpinNanos pass; returns done()'s last value. Each turn yields rather than
// pauses: on a machine with more runnable threads than cores (2 shared cores here), a thread that
// pauses holds its core for the whole spin while the thread it waits for sits in the run queue;
// measured with run() of trivial tasks: pause-spin 55-110 us per call, sleeping at once 4-8 us,
// yield-spin 2.7 us.
template <typename Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kSpinNanos);
  for (int i = 0;; ++i) {
    if (done()) return true;
    std::this_thread::yield();
    if ((i & 7) == 7 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current_job() {
  for (;;) {
    int task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    (*job_)(task);
  }
}

void ThreadPool::worker_loop(int /*worker_index*/) {
  std::uint64_t seen = 0;
  for (;;) {
    auto woken = [&] {
      return stopping_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(woken)) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, woken);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    // Acquire on generation_ makes job_ and n_tasks_ of this generation visible.
    seen = generation_.load(std::memory_order_acquire);
    work_on_current_job();
    if (active_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(int n_tasks, const std::function<void(int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || workers_.empty()) {
    for (int i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    active_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_current_job();
  auto finished = [&] { return active_workers_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(finished)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, finished);
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(std::size_t n, std::size_t grain,
                              const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  std::size_t n_grains = (n + grain - 1) / grain;
  std::size_t n_parts = std::min<std::size_t>(n_grains, static_cast<std::size_t>(n_threads_));
  std::size_t grains_per_part = (n_grains + n_parts - 1) / n_parts;
  std::size_t part_len = grains_per_part * grain;
  int n_tasks = static_cast<int>((n + part_len - 1) / part_len);
  run(n_tasks, [&](int t) {
    std::size_t begin = static_cast<std::size_t>(t) * part_len;
    std::size_t end = std::min(n, begin + part_len);
    fn(begin, end);
  });
}

namespace {
int g_default_threads = 0;
}

void set_default_thread_count(int n_threads) { g_default_threads = n_threads; }

ThreadPool& default_thread_pool() {
  static ThreadPool pool(g_default_threads);
  return pool;
}

}  // namespace kvstash
