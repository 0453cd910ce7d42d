// KV compaction: long generations in a fixed KV budget (TriAttention-style eviction that frees
// whole blocks).
//
// A sequence with a budget B compacts when its occupied KV slots reach B: it keeps
// B - compact_every slots — the attention sinks (its first tokens), the recent window (its last
// tokens), and the best-scored of the rest — and slides them forward in token order, so every
// block past the kept slots empties and returns to the pool. Memory stays within B slots (and the
// one partly filled block), and a compaction happens once per compact_every decoded tokens.
//
// Scoring (TriAttention, arXiv 2604.04921): pre-RoPE queries of a head sit close to a centre μ
// (per rotated pair f, a complex number). With RoPE, the logit of a future query at position p
// against a key stored (already rotated) as k_f is Re Σ_f q_f e^{iω_f p} conj(k_f); with q ≈ μ it
// is a trigonometric series in p. Its mean over the future positions the kept keys must serve
// (p = P+1, P+2, P+4, ... up to the budget) is Re Σ_f c_f conj(k_f) with c_f = μ_f · mean_p e^{iω_f p},
// linear in k: one pass over the kept K rows. The spread of queries around μ adds the norm signal
// Σ_f (E|q_f| - |μ_f|)·|k_f| (a query off-centre still meets a long key). μ and E|q_f| are
// calibrated once per model (calibrate_queries; BatchSequence::q_stats). Scores are normalised per head
// (z-score over the candidates), maximised over the heads of a layer and averaged over layers:
// every head and layer keeps the same tokens, so that a block empties only when all of them are
// done with its tokens — per-head sets would free no block until every head's tokens left it.
//
// Thread safety: plain functions over the caller's data; the engine calls them on its thread.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kvstash {

// kInvalidArgument naming the numbers when the budget cannot hold the protected sets, a block and
// the compaction step; ok for budget 0.
Status validate_budget(const KvBudgetOptions& o, int block_size);

// Pre-RoPE query statistics of a model: the centres that TriAttention scoring needs.
struct QueryStats {
  std::vector<float> sums;  // BatchSequence::q_stats layout
  int count = 0;            // tokens accumulated
};

// Calibrates `model`'s query statistics with one prefill of `n_tokens` pseudo-random tokens from a
// fixed seed (the same on every machine). Per model, not per prompt: a sequence's eviction must
// not depend on how much of its prompt came from a cache (its output would then depend on it),
// and queries cluster around centres that depend little on the input (the paper's observation).
Expected<QueryStats> calibrate_queries(const Model& model, int n_tokens);

// A sequence's compaction state.
struct KvCompactionState {
  std::vector<int> slot_positions;            // logical position of each occupied slot, ascending
  std::shared_ptr<const QueryStats> queries;  // kTriAttention: the model's query statistics
  bool compacted = false;                     // its KV is no longer that of its prefix
  std::mt19937_64 rng;                        // kRandom only
};

struct CompactionResult {
  int evicted = 0;      // slots dropped
  int blocks_freed = 0;
  bool done = false;    // false: the pool had no block for a copy-on-write; nothing changed
};

// The slots to keep, ascending: `keep` of the state's slots.
std::vector<int> choose_survivors(const KvBudgetOptions& o, const Model& model, const KvPoolView& kv,
                                  const std::vector<std::int32_t>& table, KvCompactionState& state, int keep);

// Moves the kept slots forward in order and releases the emptied blocks. A block shared with
// another sequence or registered under a prefix key is copied before it is written
// (copy-on-write): the KV of a prefix is never changed in place.
CompactionResult compact_slots(BlockPool& pool, std::vector<std::int32_t>& table, KvCompactionState& state,
                               const std::vector<int>& kept);

}  // namespace kvstash
