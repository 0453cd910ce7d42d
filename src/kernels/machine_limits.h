// The machine's own limits, measured: what OpenBLAS sgemm reaches with all cores and how fast all
// cores together can stream memory. Benchmarks divide the engine's figures by these, so a result
// reads as "fraction of what this machine can do" rather than a number tied to one CPU.
//
// Thread safety: each call uses the pool for its duration (one call at a time per pool) and sets
// OpenBLAS's thread count to the pool's size. Calls take about a second; not for hot paths.
#pragma once

#include <cstddef>

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

}  // namespace kvstash::kernels
