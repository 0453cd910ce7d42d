// Prefaulter: faults in a memory range ahead of its use, on a background thread.
//
// Anonymous memory is only backed at its first write, and that first write pays the fault: the
// kernel clears the page (2 MiB at once for a huge page), and in a VM the host may have to back
// it too. On the 2-vCPU VMs this project runs on, the first write into fresh KV-pool memory ran at
// about 0.45 GB/s: installing 200 blocks (39 MB) loaded from Redis took 87 ms of the engine
// thread's time against 6 ms into memory it had written before, and that step held every stream
// (issue 34). The prefaulter moves those faults to a thread of its own, ahead of the first use:
// `want(bytes)` asks for [0, bytes) to be backed, and the thread backs it in 2 MiB steps with
// madvise(MADV_POPULATE_WRITE), which faults pages in writable without changing a byte, so it is
// safe beside threads that already write into the range. The thread runs in the idle scheduling
// class (SCHED_IDLE; nice 19 where that is refused): it takes the cores when they idle, not from
// the compute threads. Measured on the Redis install above: nice 19 still cost a step 50 ms (the
// compute threads yield while they wait for each other, and a runnable nice-19 thread took those
// turns); the idle class did not.
//
// Where the kernel lacks MADV_POPULATE_WRITE (Linux < 5.14) the thread stops at its first try;
// the memory is then faulted by its first writer, as without it.
//
// Thread safety: want() and populated() may be called from any thread; the destructor stops and
// joins the thread (a populate in flight finishes its 2 MiB first).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace kvstash {

class Prefaulter {
 public:
  // The range [base, base + size); base should be page aligned (a HugePageBuffer's is). No thread
  // starts until the first want().
  Prefaulter(std::uint8_t* base, std::size_t size);
  ~Prefaulter();
  Prefaulter(const Prefaulter&) = delete;
  Prefaulter& operator=(const Prefaulter&) = delete;

  // Asks for the range's first `bytes` (clamped to its size) to be backed; returns at once.
  void want(std::size_t bytes);
  // Bytes from the start that the thread has backed so far.
  std::size_t populated() const { return populated_.load(std::memory_order_acquire); }
  // False once the kernel refused MADV_POPULATE_WRITE (the thread then does nothing more).
  bool supported() const { return supported_.load(std::memory_order_acquire); }

 private:
  void run();

  std::uint8_t* const base_;
  const std::size_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t wanted_ = 0;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::atomic<std::size_t> populated_{0};
  std::atomic<bool> supported_{true};
  std::thread thread_;      // started by the first want()
};

}  // namespace kvstash
