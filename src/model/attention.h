// Causal attention of a forward pass over the paged f16 KV pool (model/forward.cc's attention
// step): every new token's query heads against the K and V of its sequence's kept slots, its own
// included, or the last `window` of them for a sliding-window layer; with a per-head sink logit in
// the softmax's denominator where the layer has one. Internal to the model module.
//
// Thread safety: attend() uses `pool` for the duration of the call and writes only `out`.
#pragma once

#include <algorithm>
#include <vector>

#include "common/thread_pool.h"
#include "model/model.h"

namespace kvstash::attention {

// Per new token: its position (RoPE), its KV slot, and which sequence it belongs to.
struct TokenSlot {
  int pos;
  int slot;
  int seq;
};

// The query tokens one attention task takes: consecutive tokens of one sequence, so that each K
// and V block the task reads from the pool serves them all while it is in L1 (a long prefill would
// otherwise stream the sequence's whole KV from L3 once per token).
struct TokenTile {
  int first;
  int count;
};

// Tiles of up to max_tokens tokens, fewer where the scores of a tile (tokens x heads per task x
// context) would pass 2 MiB.
std::vector<TokenTile> token_tiles(const std::vector<TokenSlot>& slots, int max_tokens, int heads_per_task);

// One layer's causal attention for every new token, over the K and V already in the pool (the
// tokens' own included).
struct AttentionInput {
  const std::vector<TokenSlot>& slots;
  const ForwardBatch& batch;
  const KvPoolView& kv;
  int layer;
  const float* q;  // [token][head][head_dim]
  float* out;      // the same shape
  int n_heads, n_kv_heads, head_dim;
  float scale;
  int window;      // > 0: a token sees only the last `window` slots, itself included (slots = positions)
  // When set, one logit per query head that joins the softmax's denominator only (gpt-oss's
  // attention sinks): weights exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)), m the larger of
  // the scores' maximum and the sink, as llama.cpp's soft_max with sinks.
  const float* sinks = nullptr;
};

// How the work is cut into pool tasks. With GQA, `group` query heads read the same KV head, and one
// kernel call takes several of them, so that each K/V row is read and converted once for them all.
// A task takes a tile of tokens (prefill) and the heads of one KV head's group, or a part of the
// group where whole groups leave too few tasks to keep the pool busy (decode: one token, n_kv_heads
// groups). A token's scores and output do not depend on the plan (the kernels' contract). The
// same for every layer: made once per forward pass.
struct AttentionPlan {
  static constexpr int kTasksPerThread = 4;  // token tiles, for balance: tiles of a causal prompt differ
  // A group is split only until there is about one task per thread: every task of a group converts
  // the group's K and V rows again. qwen2.5-0.5b q4_k_m (2 KV heads of 7), decode on 2 threads, at
  // 4 tasks per thread (a group in 4 parts): 3164-3200 us of attention per step at 2048 tokens of
  // context, 892 at 512; at 1 (a task per group): 2409-2429 and 659 (BENCHMARKS.md, issue 14).
  static constexpr int kSplitTasksPerThread = 1;
  static constexpr int kMaxTileTokens = 16;
  int heads_per_task = 1, tasks_per_group = 1, tasks_per_tile = 1;
  std::vector<TokenTile> tiles;

  AttentionPlan(const std::vector<TokenSlot>& slots, int n_kv_heads, int group, int threads) {
    const int T = static_cast<int>(slots.size());
    const int splits = std::clamp((kSplitTasksPerThread * threads + T * n_kv_heads - 1) / (T * n_kv_heads), 1, group);
    heads_per_task = (group + splits - 1) / splits;
    tasks_per_group = (group + heads_per_task - 1) / heads_per_task;
    tasks_per_tile = n_kv_heads * tasks_per_group;
    tiles = token_tiles(slots, std::clamp(T * tasks_per_tile / (kTasksPerThread * threads), 1, kMaxTileTokens),
                        heads_per_task);
  }
};

// Writes in.out for every new token: softmax(q K^T * scale) V per query head, over the plan's tasks.
void attend(const AttentionInput& in, const AttentionPlan& plan, ThreadPool& pool);

}  // namespace kvstash::attention
