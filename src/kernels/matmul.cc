// matmul(): the split between the memory-bound decode path (our SIMD row kernels, rows spread over
// the pool) and the compute-bound prefill path (weight panels converted to f32, OpenBLAS sgemm).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/matmul_jobs.h"
#include "kernels/mxfp4.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {
namespace {

// From n_tokens on, matmul converts weights to f32 and calls sgemm; below, the row kernels run.
// The two paths round differently (sgemm sums in its own blocked order over f32 activations; the
// quantized row kernels quantize the activations), so with a threshold a token's result depends on
// how many tokens its step held: the same prompt prefilled in one step, in chunks, after a cache hit
// or beside other requests gives last-bit differences, and greedy decoding can pick another token
// at a near tie (seen: 1 of 6 prompts of a qwen2.5-0.5b q8_0 model after a disk-tier hit, issue 10's
// restart bench). The row kernels give each token the same result whatever the batch, so they are
// the default at every size: a cache hit is token-for-token the uncached output. sgemm stays as an
// opt-in (`--sgemm-prefill-min-tokens`) for bf16/f32 models (and f16 ones off the AVX-512 path, which
// does not interleave them) where it is faster at large batches.
// Measured with `kvstash bench-engine --prefill-context N --prefill-step S --prefill-min-tokens
// {0,100000}` (2 shared Zen 5 cores, qwen2.5-0.5b): at S = 64 the row kernels took 0.45-0.57x the
// time of the sgemm path for both f16 and q8_0; for f16 they won by 13-20% at 96-192 tokens and
// sgemm won at 512; q8_0 (VNNI) won at every size tried.
constexpr int kDefaultPrefillMinTokens = std::numeric_limits<int>::max();
std::atomic<int> g_prefill_min_tokens{kDefaultPrefillMinTokens};
// Weight bytes of one decode chunk: the unit a thread takes at a time. Small, so that the threads
// of a call finish within one chunk of each other (the join waits for the last one), and large
// enough that taking one (an uncontended compare-exchange) is noise against streaming it.
constexpr std::int64_t kDecodeChunkBytes = 32 << 10;
// Rows of a chunk are a multiple of this: an interleaved group of 16 rows (interleaved16.h), also a
// multiple of the widest one-token register tile of the other types (8 rows, AVX-512).
constexpr std::int64_t kChunkRowMultiple = 16;
// f32 bytes of one converted weight panel in prefill: about the L2+L3 share that keeps the panel
// cached between its conversion and sgemm reading it.
constexpr std::int64_t kPanelBytes = 4 << 20;

// out[g] = the sum of values [g * group, (g + 1) * group), for the n / group groups.
void sum_groups(const std::int8_t* values, std::int64_t n, int group, std::int32_t* out) {
  for (std::int64_t g = 0; g < n / group; ++g) {
    std::int32_t sum = 0;
    for (int i = 0; i < group; ++i) sum += values[g * group + i];
    out[g] = sum;
  }
}

void set_blas_threads(int n_threads) {
  static std::atomic<int> current{0};
  if (current.load(std::memory_order_relaxed) != n_threads) {
    openblas_set_num_threads(n_threads);
    current.store(n_threads, std::memory_order_relaxed);
  }
}

// The decode split. The rows of all matrices of a call are numbered as one list of chunks
// (matrix 0's chunks, then matrix 1's, ...), and the list is cut into one contiguous range per
// thread, balanced by bytes. Each thread streams its own range front to back, so its reads are one
// long run that the row kernels' prefetch follows across chunk boundaries (a task handed out
// round-robin restarts the prefetch on every task and leaves up to a task's worth of imbalance at
// the join); a thread that is done steals the back half of the range with the most left and streams
// it the same way, so threads finish within about one chunk of each other even when one was
// descheduled.
// Which thread computes a row never changes its result: each row's dot product is the same code
// whatever rows share its tile.
struct ChunkLayout {
  // Matrices per pool run: a MoE token's 8 experts' gate and up matrices (16) in one run, and a
  // batch's experts 16 at a time (model/moe.cc).
  static constexpr int kMaxMatrices = kMatmulJobsPerRun;
  int n_matrices = 0;
  std::int64_t chunk_rows[kMaxMatrices] = {};
  std::int64_t chunk_bytes[kMaxMatrices] = {};
  std::int64_t first_chunk[kMaxMatrices + 1] = {};  // prefix sums; first_chunk[n_matrices] = all
  std::int64_t first_byte[kMaxMatrices + 1] = {};

  // The matrix that chunk `chunk` belongs to.
  int matrix_of(std::int64_t chunk) const {
    return static_cast<int>(std::upper_bound(first_chunk + 1, first_chunk + n_matrices + 1, chunk) - (first_chunk + 1));
  }
  // The first chunk that starts at or after byte `target` of the concatenated matrices.
  std::int64_t chunk_at_byte(std::int64_t target) const {
    for (int i = 0; i < n_matrices; ++i) {
      if (target < first_byte[i + 1]) {
        const std::int64_t n = first_chunk[i + 1] - first_chunk[i];
        return first_chunk[i] + std::min(n, (target - first_byte[i] + chunk_bytes[i] - 1) / chunk_bytes[i]);
      }
    }
    return first_chunk[n_matrices];
  }
};

// One thread's range of chunks, [front, back) packed in one word: the owner takes from the front,
// others from the back, each with one compare-exchange. Relaxed order is enough: the atomic only
// hands out indices (each exactly once); the results are published by the pool's join.
struct alignas(64) ChunkRange {
  std::atomic<std::uint64_t> bounds{0};

  static std::uint64_t pack(std::uint32_t front, std::uint32_t back) { return std::uint64_t{back} << 32 | front; }
  void set(std::int64_t front, std::int64_t back) {
    bounds.store(pack(static_cast<std::uint32_t>(front), static_cast<std::uint32_t>(back)), std::memory_order_relaxed);
  }
  std::int64_t left() const {
    const std::uint64_t v = bounds.load(std::memory_order_relaxed);
    return static_cast<std::int64_t>(v >> 32) - static_cast<std::int64_t>(v & 0xffffffffu);
  }
  // The owner's next chunk, into `chunk`; false when the range is empty.
  bool take_front(std::int64_t& chunk) {
    std::uint64_t v = bounds.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<std::uint32_t>(v), back = static_cast<std::uint32_t>(v >> 32);
      if (front >= back) return false;
      if (bounds.compare_exchange_weak(v, pack(front + 1, back), std::memory_order_relaxed)) {
        chunk = front;
        return true;
      }
    }
  }
  // A thief's take: the back half (at least one chunk) as [begin, end); false when empty.
  bool steal_half(std::int64_t& begin, std::int64_t& end) {
    std::uint64_t v = bounds.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<std::uint32_t>(v), back = static_cast<std::uint32_t>(v >> 32);
      if (front >= back) return false;
      const std::uint32_t n = std::max<std::uint32_t>(1, (back - front) / 2);
      if (bounds.compare_exchange_weak(v, pack(front, back - n), std::memory_order_relaxed)) {
        begin = back - n;
        end = back;
        return true;
      }
    }
  }
};

// What the matrices that read one input need of it (simd_dispatch.h, QuantizedActivations).
struct InputNeeds {
  // quantized: some weight reads the activations quantized per 32 (every quantized type but the
  // interleaved K types, which read them per 256).
  bool quantized = false, slice_form = false, interleaved = false, k_interleaved = false;
  void add(const WeightView& w) {
    const bool k_inter = is_k_interleaved(w.type);
    quantized = quantized || (is_quantized(w.type) && !k_inter);
    interleaved = interleaved || (is_interleaved(w.type) && is_quantized(w.type) && !k_inter);
    k_interleaved = k_interleaved || k_inter;
    slice_form = slice_form || (is_quantized(w.type) && w.type != WeightType::kQ8_0 && w.type != WeightType::kMxfp4 &&
                                !is_interleaved(w.type));
  }
};

// One input of a decode run, quantized once for every matrix that reads it. The buffers are reused
// from call to call.
struct PreparedInput {
  std::vector<float> scales, lane_sums, group_sums, k_scales;
  std::vector<std::int8_t> values, k_values;
  std::vector<std::int32_t> block_sums, k_sums16;
  std::vector<std::int16_t> k_sums32;
  QuantizedActivations xq;

  // The n values of x (n_tokens rows) in the forms `needs` asks for, into xq.
  void prepare(const KernelTable& k, const float* x, std::int64_t n, const InputNeeds& needs) {
    xq = {};
    if (needs.quantized) {
      scales.resize(static_cast<std::size_t>(n / kQ8_0BlockElems));
      values.resize(static_cast<std::size_t>(n));
      k.quantize_activations(x, n, kQ8_0BlockElems, scales.data(), values.data());
      xq.scales = scales.data();
      xq.values = values.data();
      if (needs.slice_form) {
        // n / 4 sums: a few percent of one weight row's work per token, so plain C++ is enough.
        lane_sums.resize(static_cast<std::size_t>(n / 4));
        for (std::int64_t i = 0; i < n / 4; ++i) {
          const std::int8_t* q = values.data() + i * 4;
          lane_sums[static_cast<std::size_t>(i)] =
              scales[static_cast<std::size_t>(i / 8)] * static_cast<float>(q[0] + q[1] + q[2] + q[3]);
        }
        xq.lane_sums = lane_sums.data();
        group_sums.resize(static_cast<std::size_t>(n / 16));
        for (std::int64_t i = 0; i < n / 16; ++i) {
          const float* l = lane_sums.data() + i * 4;
          group_sums[static_cast<std::size_t>(i)] = l[0] + l[1] + l[2] + l[3];
        }
        xq.group_sums = group_sums.data();
      }
      if (needs.interleaved) {
        block_sums.resize(static_cast<std::size_t>(n / kQ8_0BlockElems));
        sum_groups(values.data(), n, kQ8_0BlockElems, block_sums.data());
        xq.block_sums = block_sums.data();
      }
    }
    if (needs.k_interleaved) {
      k_scales.resize(static_cast<std::size_t>(n / 256));
      k_values.resize(static_cast<std::size_t>(n));
      k_sums32.resize(static_cast<std::size_t>(n / 32));
      k_sums16.resize(static_cast<std::size_t>(n / 16));
      k.quantize_activations(x, n, 256, k_scales.data(), k_values.data());
      sum_groups(k_values.data(), n, 16, k_sums16.data());
      for (std::int64_t b = 0; b < n / 32; ++b) {
        k_sums32[static_cast<std::size_t>(b)] = static_cast<std::int16_t>(k_sums16[static_cast<std::size_t>(2 * b)] + k_sums16[static_cast<std::size_t>(2 * b + 1)]);
      }
      xq.k_scales = k_scales.data();
      xq.k_values = k_values.data();
      xq.k_sums32 = k_sums32.data();
      xq.k_sums16 = k_sums16.data();
    }
  }
};

// The decode path for up to ChunkLayout::kMaxMatrices jobs: each distinct input (the same x,
// token count and width) quantized once, then the rows of all matrices split as above in one pool
// run, so Q, K and V (or gate and up, or a MoE token's experts) cost one fork-join, not one each,
// and the small matrices no longer run as a pool call of their own with a short tail.
void matmul_decode(std::span<const MatmulJob> jobs, ThreadPool& pool) {
  const KernelTable& k = active_kernels();
  assert(jobs.size() <= ChunkLayout::kMaxMatrices);
  // Per calling thread: one matmul at a time per pool, but several pools may call at once.
  thread_local std::vector<PreparedInput> input_buffers;
  // reads[i]: the input job i reads, numbered in order of first use; first_reader[j]: the first
  // job reading input j.
  int reads[ChunkLayout::kMaxMatrices], first_reader[ChunkLayout::kMaxMatrices];
  InputNeeds needs[ChunkLayout::kMaxMatrices];
  int n_inputs = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    int j = 0;
    for (; j < n_inputs; ++j) {
      const MatmulJob& other = jobs[static_cast<std::size_t>(first_reader[j])];
      if (other.x == jobs[i].x && other.n_tokens == jobs[i].n_tokens && other.w.cols == jobs[i].w.cols) break;
    }
    if (j == n_inputs) first_reader[n_inputs++] = static_cast<int>(i);
    reads[i] = j;
    needs[j].add(jobs[i].w);
  }
  if (static_cast<int>(input_buffers.size()) < n_inputs) input_buffers.resize(static_cast<std::size_t>(n_inputs));
  // A plain pointer: inside the pool's lambda the name of a thread_local would mean the worker's.
  PreparedInput* inputs = input_buffers.data();
  for (int j = 0; j < n_inputs; ++j) {
    const MatmulJob& first = jobs[static_cast<std::size_t>(first_reader[j])];
    inputs[j].prepare(k, first.x, static_cast<std::int64_t>(first.n_tokens) * first.w.cols, needs[j]);
  }
  ChunkLayout layout;
  layout.n_matrices = static_cast<int>(jobs.size());
  for (int i = 0; i < layout.n_matrices; ++i) {
    const WeightView& w = jobs[static_cast<std::size_t>(i)].w;
    const std::int64_t rows = kDecodeChunkBytes / std::max<std::int64_t>(1, static_cast<std::int64_t>(w.row_bytes));
    layout.chunk_rows[i] = std::max<std::int64_t>(kChunkRowMultiple, rows / kChunkRowMultiple * kChunkRowMultiple);
    layout.chunk_bytes[i] = std::max<std::int64_t>(1, layout.chunk_rows[i] * static_cast<std::int64_t>(w.row_bytes));
    layout.first_chunk[i + 1] = layout.first_chunk[i] + (w.rows + layout.chunk_rows[i] - 1) / layout.chunk_rows[i];
    layout.first_byte[i + 1] = layout.first_byte[i] + w.rows * static_cast<std::int64_t>(w.row_bytes);
  }
  const std::int64_t n_chunks = layout.first_chunk[layout.n_matrices];
  if (n_chunks == 0) return;
  assert(n_chunks < (std::int64_t{1} << 32));
  const int n_ranges = static_cast<int>(std::min<std::int64_t>(pool.size(), n_chunks));
  // Per calling thread (see above); a plain pointer for the lambda.
  thread_local std::unique_ptr<ChunkRange[]> range_buffer;
  thread_local int range_capacity = 0;
  if (range_capacity < n_ranges) {
    range_buffer = std::make_unique<ChunkRange[]>(static_cast<std::size_t>(n_ranges));
    range_capacity = n_ranges;
  }
  ChunkRange* ranges = range_buffer.get();
  const std::int64_t total_bytes = layout.first_byte[layout.n_matrices];
  std::int64_t front = 0;
  for (int p = 0; p < n_ranges; ++p) {
    const std::int64_t back =
        p + 1 == n_ranges ? n_chunks : std::max(front, layout.chunk_at_byte(total_bytes / n_ranges * (p + 1)));
    ranges[p].set(front, back);
    front = back;
  }
  auto compute = [&](std::int64_t chunk) {
    const int i = layout.matrix_of(chunk);
    const MatmulJob& job = jobs[static_cast<std::size_t>(i)];
    const WeightView& w = job.w;
    const QuantizedActivations& xq = inputs[reads[i]].xq;
    const int n_tokens = job.n_tokens;
    const std::int64_t begin = (chunk - layout.first_chunk[i]) * layout.chunk_rows[i];
    const std::int64_t end = std::min(w.rows, begin + layout.chunk_rows[i]);
    if (w.type == WeightType::kMxfp4) {
      // MXFP4 in its GGUF layout: its own kernels (mxfp4.h; the tables' matmul_rows do not take it).
      const auto rows = k.path == SimdPath::kAvx512 ? mxfp4_matmul_rows_avx512
                        : k.path == SimdPath::kAvx2 ? mxfp4_matmul_rows_avx2
                                                    : mxfp4_matmul_rows;
      rows(w, xq, n_tokens, begin, end, job.y, w.rows);
    } else {
      k.matmul_rows(w, job.x, xq, n_tokens, begin, end, job.y, w.rows);
    }
  };
  pool.run(n_ranges, [&](int own) {
    std::int64_t chunk;
    for (;;) {
      while (ranges[own].take_front(chunk)) compute(chunk);
      // Own range empty: steal the back half of the fullest range and make it this range, so it is
      // streamed front to back like the rest (and can be stolen from in turn). Storing into an
      // empty range cannot lose a chunk: nobody takes from an empty range.
      int victim = -1;
      std::int64_t most = 0;
      for (int p = 0; p < n_ranges; ++p) {
        const std::int64_t left = ranges[p].left();
        if (left > most) most = left, victim = p;
      }
      if (victim < 0) return;
      std::int64_t begin, end;
      if (ranges[victim].steal_half(begin, end)) ranges[own].set(begin, end);
    }
  });
}

void matmul_prefill(const WeightView& w, const float* x, int n_tokens, float* y, ThreadPool& pool) {
  set_blas_threads(pool.size());
  const auto m = n_tokens;
  const auto k_dim = static_cast<int>(w.cols);
  const auto ldc = static_cast<int>(w.rows);
  if (w.type == WeightType::kF32) {
    // y = x * w^T straight from the mapped rows.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(w.rows), k_dim, 1.0f, x, k_dim,
                static_cast<const float*>(w.data), static_cast<int>(w.row_bytes / 4), 0.0f, y, ldc);
    return;
  }
  std::int64_t panel_rows = std::max<std::int64_t>(64, kPanelBytes / (w.cols * 4)) / 16 * 16;
  panel_rows = std::min(panel_rows, w.rows);
  thread_local std::vector<float> panel_buffer;
  panel_buffer.resize(static_cast<std::size_t>(panel_rows * w.cols));
  // A plain pointer: inside the pool's lambda the name of a thread_local would mean the worker's.
  float* panel = panel_buffer.data();
  for (std::int64_t begin = 0; begin < w.rows; begin += panel_rows) {
    const std::int64_t rows = std::min(panel_rows, w.rows - begin);
    pool.parallel_for(static_cast<std::size_t>(rows), 16, [&](std::size_t lo, std::size_t hi) {
      kernels::dequantize_rows(w, begin + static_cast<std::int64_t>(lo), begin + static_cast<std::int64_t>(hi),
                               panel + lo * w.cols);
    });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(rows), k_dim, 1.0f, x, k_dim,
                panel, k_dim, 0.0f, y + begin, ldc);
  }
}

}  // namespace

int prefill_min_tokens() { return g_prefill_min_tokens.load(std::memory_order_relaxed); }
void set_prefill_min_tokens_for_testing(int n_tokens) {
  g_prefill_min_tokens.store(n_tokens < 1 ? kDefaultPrefillMinTokens : n_tokens, std::memory_order_relaxed);
}
void set_sgemm_prefill_min_tokens(int n_tokens) { set_prefill_min_tokens_for_testing(n_tokens); }

void matmul(const WeightView& w, const float* x, int n_tokens, float* y, ThreadPool& pool) {
  matmul_many(std::span<const WeightView>(&w, 1), x, n_tokens, std::span<float* const>(&y, 1), pool);
}

void matmul_many(std::span<const WeightView> ws, const float* x, int n_tokens, std::span<float* const> ys,
                 ThreadPool& pool) {
  assert(ws.size() == ys.size());
  if (n_tokens <= 0 || ws.empty()) return;
  for (const WeightView& w : ws) {
    assert(w.cols == ws[0].cols);
    assert(w.cols % weight_block_elems(w.type) == 0);
    (void)w;
  }
  // Interleaved weights never take the sgemm path: their own kernels out-run dequantize + sgemm
  // at every batch size (F16's blocked kernel, conversion included, 1.13-1.18x sgemm's own rate at
  // 512 tokens on Zen 4; BENCHMARKS.md, issue 14), and their rows dequantize one value at a time
  // (interleaved16.h).
  const bool sgemm = n_tokens >= g_prefill_min_tokens.load(std::memory_order_relaxed) &&
                     std::none_of(ws.begin(), ws.end(), [](const WeightView& w) { return is_interleaved(w.type); });
  if (sgemm) {
    // sgemm is compute bound and already parallel inside one call: nothing to gain from merging.
    for (std::size_t i = 0; i < ws.size(); ++i) {
      if (ws[i].rows > 0) matmul_prefill(ws[i], x, n_tokens, ys[i], pool);
    }
  } else {
    MatmulJob jobs[ChunkLayout::kMaxMatrices];
    for (std::size_t i = 0; i < ws.size(); i += ChunkLayout::kMaxMatrices) {
      const std::size_t n = std::min<std::size_t>(ChunkLayout::kMaxMatrices, ws.size() - i);
      for (std::size_t j = 0; j < n; ++j) jobs[j] = {ws[i + j], x, n_tokens, ys[i + j]};
      matmul_decode(std::span<const MatmulJob>(jobs, n), pool);
    }
  }
}

void matmul_jobs(std::span<const MatmulJob> jobs, ThreadPool& pool) {
  // The decode runs, each of up to kMaxMatrices jobs; a job on the sgemm path runs as matmul() would.
  MatmulJob run[ChunkLayout::kMaxMatrices];
  std::size_t n_run = 0;
  const int sgemm_from = g_prefill_min_tokens.load(std::memory_order_relaxed);
  for (const MatmulJob& job : jobs) {
    assert(job.w.cols % weight_block_elems(job.w.type) == 0);
    if (job.n_tokens <= 0 || job.w.rows <= 0) continue;
    if (job.n_tokens >= sgemm_from && !is_interleaved(job.w.type)) {
      matmul_prefill(job.w, job.x, job.n_tokens, job.y, pool);
      continue;
    }
    run[n_run++] = job;
    if (n_run == ChunkLayout::kMaxMatrices) {
      matmul_decode(std::span<const MatmulJob>(run, n_run), pool);
      n_run = 0;
    }
  }
  if (n_run > 0) matmul_decode(std::span<const MatmulJob>(run, n_run), pool);
}

}  // namespace kvstash::kernels
