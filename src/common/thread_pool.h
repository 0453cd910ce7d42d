// A fork-join pool of worker threads for data-parallel kernels.
//
// run(n, fn) calls fn(i) for every i in [0, n) spread over the workers and the calling thread,
// and returns when all calls have finished. One run at a time: run() is not reentrant and must
// be called from one thread at a time (the engine's step thread). fn must not throw.
//
// Decode calls run() a few hundred times per token, back to back, with microseconds between calls.
// So a worker that finishes a job spins (yielding) for a short while (kSpinNanos in thread_pool.cc)
// watching for the next one before it sleeps on the condition variable, and run() spins as briefly
// for the workers to finish before it sleeps: a futex wake-up costs about 5 us here, tens of us on
// a loaded machine. An idle pool sleeps; it holds no core once kSpinNanos has passed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvstash {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 0 means one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  void run(int n_tasks, const std::function<void(int task)>& fn);
  // Splits [0, n) into about size() contiguous ranges (multiples of `grain`) and calls
  // fn(begin, end) once per range.
  void parallel_for(std::size_t n, std::size_t grain,
                    const std::function<void(std::size_t begin, std::size_t end)>& fn);

 private:
  void worker_loop(int worker_index);
  void work_on_current_job();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // Written under mu_ (so that a sleeper's predicate check cannot miss a change), read without it
  // by spinning threads.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  // Workers still in the current job; the last one to leave notifies done_ under mu_.
  std::atomic<int> active_workers_{0};
  // Set before generation_ advances, read by workers of that generation.
  const std::function<void(int)>* job_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_task_{0};
};

// The process-wide pool used by kernels unless a caller brings its own.
ThreadPool& default_thread_pool();
// Sets the size of the default pool; must be called before its first use. 0 = all cores.
void set_default_thread_count(int n_threads);

}  // namespace kvstash
