// matmul(): the split between the memory-bound decode path (our SIMD row kernels, rows spread over
// the pool) and the compute-bound prefill path (weight panels converted to f32, OpenBLAS sgemm).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <limits>
#include <span>
#include <vector>

#include "kernels/kernels.h"
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
// opt-in (`--sgemm-prefill-min-tokens`) for f16/bf16/f32 models where it is faster at large batches.
// Measured with `kvstash bench-engine --prefill-context N --prefill-step S --prefill-min-tokens
// {0,100000}` (2 shared Zen 5 cores, qwen2.5-0.5b): at S = 64 the row kernels took 0.45-0.57x the
// time of the sgemm path for both f16 and q8_0; for f16 they won by 13-20% at 96-192 tokens and
// sgemm won at 512; q8_0 (VNNI) won at every size tried.
constexpr int kDefaultPrefillMinTokens = std::numeric_limits<int>::max();
std::atomic<int> g_prefill_min_tokens{kDefaultPrefillMinTokens};
// Rows of a decode task: a multiple of the row kernels' register block (4) and big enough that a
// task's weights (>= 64 rows) cost far more to stream than the task costs to hand out.
constexpr std::int64_t kDecodeRowGrain = 64;
// Decode tasks per thread: more than one so that a thread slowed by another process does not hold
// up the whole call (the pool hands tasks out dynamically).
constexpr std::int64_t kDecodeTasksPerThread = 4;
// f32 bytes of one converted weight panel in prefill: about the L2+L3 share that keeps the panel
// cached between its conversion and sgemm reading it.
constexpr std::int64_t kPanelBytes = 4 << 20;

void set_blas_threads(int n_threads) {
  static std::atomic<int> current{0};
  if (current.load(std::memory_order_relaxed) != n_threads) {
    openblas_set_num_threads(n_threads);
    current.store(n_threads, std::memory_order_relaxed);
  }
}

// One decode task: rows [begin, end) of weight `matrix`.
struct RowTask {
  int matrix;
  std::int64_t begin, end;
};

// The decode path of matmul_many: the rows of all matrices are cut into tasks of one size and
// handed out by one pool run, so Q, K and V (or gate and up) cost one fork-join, not three, and
// the small K/V projections no longer run as a pool call of their own with a short tail.
void matmul_decode(std::span<const WeightView> ws, const float* x, int n_tokens, std::span<float* const> ys,
                   ThreadPool& pool) {
  const KernelTable& k = active_kernels();
  QuantizedActivations xq;
  // Per calling thread: one matmul at a time per pool, but several pools may call at once.
  thread_local std::vector<float> scales;
  thread_local std::vector<std::int8_t> values;
  thread_local std::vector<RowTask> tasks;
  thread_local std::vector<float> lane_sums, group_sums;
  std::int64_t total_rows = 0;
  bool any_quantized = false, any_slice_form = false;
  for (const WeightView& w : ws) {
    total_rows += w.rows;
    any_quantized = any_quantized || is_quantized(w.type);
    any_slice_form = any_slice_form || (is_quantized(w.type) && w.type != WeightType::kQ8_0);
  }
  if (any_quantized) {
    const std::int64_t n = static_cast<std::int64_t>(n_tokens) * ws[0].cols;
    scales.resize(static_cast<std::size_t>(n / kQ8_0BlockElems));
    values.resize(static_cast<std::size_t>(n));
    k.quantize_activations(x, n, scales.data(), values.data());
    xq.scales = scales.data();
    xq.values = values.data();
    if (any_slice_form) {
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
  }
  const std::int64_t max_tasks = static_cast<std::int64_t>(pool.size()) * kDecodeTasksPerThread;
  std::int64_t chunk = std::max(kDecodeRowGrain, (total_rows + max_tasks - 1) / max_tasks);
  chunk = (chunk + 3) / 4 * 4;
  tasks.clear();
  for (std::size_t i = 0; i < ws.size(); ++i) {
    for (std::int64_t begin = 0; begin < ws[i].rows; begin += chunk) {
      tasks.push_back({static_cast<int>(i), begin, std::min(ws[i].rows, begin + chunk)});
    }
  }
  // A plain pointer: inside the pool's lambda the name of a thread_local would mean the worker's.
  const RowTask* task_list = tasks.data();
  if (tasks.empty()) return;
  pool.run(static_cast<int>(tasks.size()), [&](int task) {
    const RowTask& t = task_list[task];
    const WeightView& w = ws[static_cast<std::size_t>(t.matrix)];
    k.matmul_rows(w, x, xq, n_tokens, t.begin, t.end, ys[static_cast<std::size_t>(t.matrix)], w.rows);
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
  const KernelTable& k = active_kernels();
  std::int64_t panel_rows = std::max<std::int64_t>(64, kPanelBytes / (w.cols * 4)) / 16 * 16;
  panel_rows = std::min(panel_rows, w.rows);
  thread_local std::vector<float> panel_buffer;
  panel_buffer.resize(static_cast<std::size_t>(panel_rows * w.cols));
  // A plain pointer: inside the pool's lambda the name of a thread_local would mean the worker's.
  float* panel = panel_buffer.data();
  for (std::int64_t begin = 0; begin < w.rows; begin += panel_rows) {
    const std::int64_t rows = std::min(panel_rows, w.rows - begin);
    pool.parallel_for(static_cast<std::size_t>(rows), 16, [&](std::size_t lo, std::size_t hi) {
      k.dequantize_rows(w, begin + static_cast<std::int64_t>(lo), begin + static_cast<std::int64_t>(hi),
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
  if (n_tokens >= g_prefill_min_tokens.load(std::memory_order_relaxed)) {
    // sgemm is compute bound and already parallel inside one call: nothing to gain from merging.
    for (std::size_t i = 0; i < ws.size(); ++i) {
      if (ws[i].rows > 0) matmul_prefill(ws[i], x, n_tokens, ys[i], pool);
    }
  } else {
    matmul_decode(ws, x, n_tokens, ys, pool);
  }
}

}  // namespace kvstash::kernels
