#include "model/attention.h"

#include <algorithm>
#include <cmath>

namespace kvstash::attention {

std::vector<TokenTile> token_tiles(const std::vector<TokenSlot>& slots, int max_tokens, int heads_per_task) {
  constexpr std::size_t kScoreBytes = std::size_t{2} << 20;  // a tile's scores stay in L2
  std::vector<TokenTile> tiles;
  const int T = static_cast<int>(slots.size());
  for (int t = 0; t < T;) {
    int end = t + 1;
    while (end < T && slots[static_cast<std::size_t>(end)].seq == slots[static_cast<std::size_t>(t)].seq) ++end;
    // Tokens [t, end) are one sequence's, their slots rising: the last sees the most context.
    const std::size_t ctx = static_cast<std::size_t>(slots[static_cast<std::size_t>(end - 1)].slot) + 1;
    const int fit = static_cast<int>(std::max<std::size_t>(1, kScoreBytes / (ctx * heads_per_task * sizeof(float))));
    const int per_tile = std::min(max_tokens, fit);
    for (; t < end; t += per_tile) tiles.push_back({t, std::min(per_tile, end - t)});
    t = end;
  }
  return tiles;
}

namespace {

// softmax over x[0, n) with one more logit, `sink`, in the denominator only.
void softmax_with_sink(float* x, int n, float sink) {
  const float m = std::max(*std::max_element(x, x + n), sink);
  double sum = 0.0;
  for (int j = 0; j < n; ++j) sum += x[j] = std::exp(x[j] - m);
  sum += std::exp(sink - m);
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = 0; j < n; ++j) x[j] *= inv;
}

}  // namespace

void attend(const AttentionInput& in, const AttentionPlan& plan, ThreadPool& pool) {
  const int hd = in.head_dim, group = in.n_heads / in.n_kv_heads;
  const std::size_t q_dim = static_cast<std::size_t>(in.n_heads) * hd;
  const KvPoolView& kv = in.kv;
  pool.run(static_cast<int>(plan.tiles.size()) * plan.tasks_per_tile, [&](int task) {
    const TokenTile tile = plan.tiles[static_cast<std::size_t>(task / plan.tasks_per_tile)];
    const int kvh = task % plan.tasks_per_tile / plan.tasks_per_group;
    const int h0 = kvh * group + task % plan.tasks_per_group * plan.heads_per_task;  // the task's first head
    const int n_heads = std::min(plan.heads_per_task, (kvh + 1) * group - h0);
    const std::int32_t* table =
        in.batch.sequences[static_cast<std::size_t>(in.slots[static_cast<std::size_t>(tile.first)].seq)].block_table;
    // Token i of the tile sees the kept slots [lo(i), n_ctx(i)): before it and itself, within the window.
    const auto n_ctx = [&](int i) { return in.slots[static_cast<std::size_t>(tile.first + i)].slot + 1; };
    const auto lo = [&](int i) { return in.window > 0 ? std::max(0, n_ctx(i) - in.window) : 0; };
    const int ctx_max = n_ctx(tile.count - 1);
    thread_local std::vector<float> scores_buffer;
    const std::size_t n_scores = static_cast<std::size_t>(tile.count) * n_heads * ctx_max;
    if (scores_buffer.size() < n_scores) scores_buffer.resize(n_scores);
    // [token in tile][head in task][position], rows ctx_max apart.
    const auto scores = [&](int i) { return scores_buffer.data() + static_cast<std::size_t>(i) * n_heads * ctx_max; };
    const auto q_at = [&](int i) { return in.q + (tile.first + i) * q_dim + h0 * hd; };
    const auto out_at = [&](int i) { return in.out + (tile.first + i) * q_dim + h0 * hd; };
    const std::size_t row_stride = static_cast<std::size_t>(hd);
    // One kernel call per KV block and token: the KV head's K (and V) rows of a block and layer
    // are contiguous, head_dim apart.
    // Rows [first, end) of block j that token i sees: its context's part of the block, cut at its
    // window's start (first = j and end = min(j + block, n_ctx) without a window).
    const auto rows = [&](int i, int j, int* first) {
      *first = std::max(j, lo(i));
      return std::min(j + kv.block_size, n_ctx(i)) - *first;
    };
    const int block_min = in.window > 0 ? lo(0) / kv.block_size * kv.block_size : 0;  // lo rises with i
    for (int j = block_min; j < ctx_max; j += kv.block_size) {
      const std::uint16_t* k_rows = kv.k_head(table[j / kv.block_size], in.layer, kvh);
      for (int i = 0; i < tile.count; ++i) {
        int first;
        const int n_rows = rows(i, j, &first);
        if (n_rows <= 0) continue;  // its context ends before this block, or its window starts after it
        kernels::dot_f32_f16_rows(q_at(i), n_heads, k_rows + static_cast<std::size_t>(first - j) * row_stride, row_stride,
                                  n_rows, hd, in.scale, scores(i) + first, static_cast<std::size_t>(ctx_max));
      }
    }
    for (int i = 0; i < tile.count; ++i) {
      for (int h = 0; h < n_heads; ++h) {
        float* row = scores(i) + h * ctx_max + lo(i);
        if (in.sinks != nullptr) {
          softmax_with_sink(row, n_ctx(i) - lo(i), in.sinks[h0 + h]);
        } else {
          kernels::softmax_inplace(row, n_ctx(i) - lo(i));
        }
      }
      std::fill(out_at(i), out_at(i) + n_heads * hd, 0.0f);
    }
    for (int j = block_min; j < ctx_max; j += kv.block_size) {
      const std::uint16_t* v_rows = kv.v_head(table[j / kv.block_size], in.layer, kvh);
      for (int i = 0; i < tile.count; ++i) {
        int first;
        const int n_rows = rows(i, j, &first);
        if (n_rows <= 0) continue;
        kernels::axpy_f16_rows(scores(i) + first, static_cast<std::size_t>(ctx_max), n_heads,
                               v_rows + static_cast<std::size_t>(first - j) * row_stride, row_stride, n_rows, hd,
                               out_at(i));
      }
    }
  });
}

}  // namespace kvstash::attention
