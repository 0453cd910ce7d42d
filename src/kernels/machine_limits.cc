#include "kernels/machine_limits.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/huge_pages.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {
namespace {

constexpr int kGemmRepeats = 3;
constexpr int kStreamRepeats = 5;
// Each thread's part starts on its own page-aligned boundary: no two threads share a cache line.
constexpr std::size_t kAlignment = 4096;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double measure_gemm_gflops(int m, int n, int k, ThreadPool& pool) {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  openblas_set_num_threads(pool.size());
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n),
      c(static_cast<std::size_t>(m) * n);
  // Values do not change sgemm's speed; small ones keep the sums finite.
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.01f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.01f;
  double best = 0.0;
  for (int rep = 0; rep <= kGemmRepeats; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                c.data(), n);
    const double s = seconds_since(start);
    if (rep > 0) best = std::max(best, 2.0 * m * n * static_cast<double>(k) / s / 1e9);  // rep 0 warms up
  }
  return best;
}

// The checksums of every pass, kept so that no read can be dropped.
std::atomic<std::uint64_t> g_read_checksum{0};

double stream_read_pass_gbs(ThreadPool& pool, const std::uint8_t* bytes, std::size_t n) {
  if (bytes == nullptr || n == 0) return 0.0;
  const auto n_threads = static_cast<std::size_t>(pool.size());
  const std::size_t part = (n / n_threads + kAlignment - 1) / kAlignment * kAlignment;
  const KernelTable& k = active_kernels();
  const auto start = std::chrono::steady_clock::now();
  pool.run(static_cast<int>(n_threads), [&](int t) {
    const std::size_t begin = std::min(n, static_cast<std::size_t>(t) * part), end = std::min(n, begin + part);
    if (end > begin) g_read_checksum.fetch_add(k.read_sum(bytes + begin, end - begin), std::memory_order_relaxed);
  });
  return static_cast<double>(n) / seconds_since(start) / 1e9;
}

StreamReader::StreamReader(ThreadPool& pool, std::size_t buffer_bytes, StreamMemory memory) : pool_(pool) {
  const auto n_threads = static_cast<std::size_t>(pool.size());
  const std::size_t part = std::max(kAlignment, buffer_bytes / n_threads / kAlignment * kAlignment);
  total_ = part * n_threads;
  if (memory == StreamMemory::kHugePages) {
    huge_pages_ = HugePageBuffer::allocate(total_);
    bytes_ = huge_pages_.data();
  } else {
    small_pages_.reset(std::aligned_alloc(kAlignment, total_));
    bytes_ = static_cast<std::uint8_t*>(small_pages_.get());
  }
  if (bytes_ == nullptr) return;
  // Each thread first touches its own part (the part it reads), so pages land on its memory node.
  pool.run(static_cast<int>(n_threads), [&](int t) { std::memset(bytes_ + t * part, t + 1, part); });
}

double StreamReader::pass_gbs() { return stream_read_pass_gbs(pool_, bytes_, total_); }

double measure_stream_read_gbs(ThreadPool& pool, std::size_t buffer_bytes, StreamMemory memory) {
  StreamReader reader(pool, buffer_bytes, memory);
  double best = 0.0;
  for (int rep = 0; rep <= kStreamRepeats; ++rep) {
    const double gbs = reader.pass_gbs();
    if (rep > 0) best = std::max(best, gbs);  // rep 0 warms up
  }
  return best;
}

}  // namespace kvstash::kernels
