// The machine's own limits, measured: what OpenBLAS sgemm reaches with all cores and how fast all
// cores together can stream memory. Benchmarks divide the engine's figures by these, so a result
// reads as "fraction of what this machine can do" rather than a number tied to one CPU.
//
// Thread safety: each call uses the pool for its duration (one call at a time per pool) and sets
// OpenBLAS's thread count to the pool's size. Calls take about a second; not for hot paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/huge_pages.h"
#include "common/thread_pool.h"

namespace kvstash::kernels {

// Large enough to dwarf any last-level cache (tens of MiB), so the read comes from DRAM.
inline constexpr std::size_t kStreamBufferBytes = std::size_t{1} << 30;

// GFLOP/s (2*m*n*k / seconds) of C[m x n] = A[m x k] * B[k x n] in f32 through OpenBLAS with
// pool.size() threads: best of a few repeats after a warm-up call. Returns 0 if m, n or k <= 0.
double measure_gemm_gflops(int m, int n, int k, ThreadPool& pool);

// The kind of memory the streaming read runs over: the same as the weights it is compared with.
enum class StreamMemory { kHugePages, kSmallPages };

// GB/s (1e9 bytes per second) of reading a buffer of buffer_bytes with every pool thread reading a
// disjoint part with the widest vector loads the CPU has; best of a few passes after a warm-up
// pass that also maps the pages. The buffer is anonymous memory advised for transparent huge
// pages (common/huge_pages.h, as the model's weights by default) or ordinary 4 KiB pages.
// Returns 0 if the buffer cannot be allocated.
double measure_stream_read_gbs(ThreadPool& pool, std::size_t buffer_bytes = kStreamBufferBytes,
                               StreamMemory memory = StreamMemory::kHugePages);

// One streaming read of [bytes, bytes + n) by every pool thread (a page-aligned part each): GB/s of
// that pass; 0 for nothing to read. For reading memory the caller owns, e.g. a model's weights.
double stream_read_pass_gbs(ThreadPool& pool, const std::uint8_t* bytes, std::size_t n);

// The same streaming read over a buffer of its own, one pass at a time, for interleaving with other
// work (bench-engine pairs each decode step with a pass, over the weights' own pages where it can,
// else over one of these of the step's size). The buffer is allocated, mapped and filled once, by
// the constructor.
class StreamReader {
 public:
  StreamReader(ThreadPool& pool, std::size_t buffer_bytes, StreamMemory memory = StreamMemory::kHugePages);
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  bool ok() const { return bytes_ != nullptr; }  // false: the buffer could not be allocated
  std::size_t size() const { return total_; }
  const std::uint8_t* data() const { return bytes_; }  // for a pass with another pool (stream_read_pass_gbs)
  // Reads the whole buffer once with every pool thread; GB/s of that pass (0 if !ok()).
  double pass_gbs();

 private:
  ThreadPool& pool_;
  HugePageBuffer huge_pages_;
  std::unique_ptr<void, void (*)(void*)> small_pages_{nullptr, std::free};
  std::uint8_t* bytes_ = nullptr;
  std::size_t total_ = 0;
};

}  // namespace kvstash::kernels
