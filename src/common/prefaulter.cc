#include "common/prefaulter.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace kvstash {

namespace {
constexpr std::size_t kStep = std::size_t{2} << 20;  // one huge page a call: a stop waits at most that long
}  // namespace

Prefaulter::Prefaulter(std::uint8_t* base, std::size_t size) : base_(base), size_(base == nullptr ? 0 : size) {}

Prefaulter::~Prefaulter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prefaulter::want(std::size_t bytes) {
  bytes = std::min(bytes, size_);
  if (bytes <= populated() || !supported()) return;
  {
    std::lock_guard lock(mu_);
    if (bytes <= wanted_) return;
    wanted_ = bytes;
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

void Prefaulter::run() {
  // The idle class: this thread runs only where no ordinary thread wants the core (Linux; where
  // the class is refused, the lowest nice value instead: a thread's nice value is its own).
  sched_param param{};
  if (::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &param) != 0) {
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
  }
  std::size_t done = 0;
  for (;;) {
    std::size_t target;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || wanted_ > done; });
      if (stop_) return;
      target = wanted_;
    }
    while (done < target) {
      const std::size_t n = std::min(kStep, target - done);
#ifdef MADV_POPULATE_WRITE
      const int rc = ::madvise(base_ + done, n, MADV_POPULATE_WRITE);
#else
      const int rc = -1;
#endif
      if (rc != 0) {  // not supported here (or the range is gone): the first writer faults, as without us
        supported_.store(false, std::memory_order_release);
        return;
      }
      done += n;
      populated_.store(done, std::memory_order_release);
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
  }
}

}  // namespace kvstash
