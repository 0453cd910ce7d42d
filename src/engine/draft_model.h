// Speculative decoding's second drafter: a draft model (DraftKind::kModel, engine/speculative.h).
//
// A smaller (or more coarsely quantized) model with the target's vocabulary proposes each
// drafting sequence's next k tokens greedily; the target verifies them in its step exactly as it
// verifies prompt-lookup drafts (engine.cc, verify_draft), so the output is the one plain decoding
// gives, greedy or seeded, whatever the draft model proposes.
//
// The draft model keeps its own paged KV in a second BlockPool, with a prefix cache of its own:
// full blocks of a sequence's real tokens (never of drafted ones) are registered under the
// target's block keys for the same tokens (the same prefix and tenant salt give the same draft
// KV, the draft model being fixed), and a sequence whose draft KV starts empty first takes every
// whole block of its prefix the pool still holds, so a repeated prompt's draft prefill is not
// computed again. Registered blocks are only ever read: a sequence writes past them, and a
// rollback never cuts below its real tokens. A sequence's DraftKv covers the first n_computed tokens of
// seq.tokens, always fewer than all of them: the last token is the input of the next draft. A
// draft of k tokens runs k forward passes of the draft model, each batched across the drafting
// sequences: the first also catches up on the tokens the draft KV lacks (the prompt, when it was
// not prefilled alongside the target's prefill; the accepted tokens and the bonus token after each
// verified draft), the others feed the
// token drafted before. After verification, rollback() cuts the draft KV back to the accepted
// tokens: the KV of drafted tokens that the target rejected (and of the run's last drafted token,
// never fed) is dropped and the blocks that held only such KV go back to the draft pool.
//
// Thread safety: owned and used by the engine thread only, like the target's BlockPool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/block_pool.h"
#include "kvstash/status.h"
#include "model/model.h"

namespace kvstash {

class ThreadPool;

// kInvalidArgument naming what differs when `draft` cannot draft for `target`: a different token
// count (embedding rows or tokenizer vocabulary), or a token id whose text differs.
Status check_same_vocabulary(const Model& target, const Model& draft);

// One sequence's KV in the draft pool. Releases its blocks when destroyed (a sequence that ends,
// is cancelled or dropped at shutdown gives them back with no call to make).
class DraftKv {
 public:
  DraftKv() = default;
  DraftKv(const DraftKv&) = delete;
  DraftKv& operator=(const DraftKv&) = delete;
  ~DraftKv() { release(); }
  // Frees every block; the next draft catches up from the first token.
  void release();
  int n_computed() const { return n_computed_; }
  int n_blocks() const { return static_cast<int>(blocks_.size()); }

 private:
  friend class DraftModelDrafter;
  BlockPool* pool_ = nullptr;  // the pool its blocks came from; null while it holds none
  std::vector<std::int32_t> blocks_;
  int n_computed_ = 0;  // leading tokens of the sequence whose draft KV is computed
};

class DraftModelDrafter {
 public:
  // kv_tokens: the draft pool's capacity in tokens. max_catch_up: tokens a sequence feeds the
  // draft model in one step at most; one further behind catches up this many tokens and drafts
  // nothing in that step.
  DraftModelDrafter(const Model& draft, int block_size, std::int64_t kv_tokens, int max_catch_up);

  // One drafting sequence: its tokens (prompt and output so far), its draft KV, the draft length
  // wanted and the vector the drafted tokens are appended to. k = 0: catch up on the tokens only
  // (no logits; `tokens` is then a prefix of the sequence's that leaves its last token out): the
  // draft model prefills a prompt alongside the target instead of in the first decode steps.
  // block_keys: the target's keys of the sequence's whole blocks, at least the blocks `tokens`
  // fills (empty: no prefix cache for this job).
  struct Job {
    std::span<const TokenId> tokens;
    DraftKv* kv = nullptr;
    int k = 0;
    std::vector<TokenId>* out = nullptr;
    std::span<const cache::ChunkKey> block_keys = {};
  };
  // Drafts every job's k tokens (or none, for a job still catching up or that the draft pool
  // cannot hold: its KV is released and it retries later). Errors: the draft model's forward.
  Status draft(std::span<Job> jobs, ThreadPool& threads);
  // Keeps the draft KV of the first n tokens at most (after verification: tokens.size() - 1, all
  // real tokens: its whole blocks are registered under block_keys where those cover them).
  void rollback(DraftKv& kv, int n, std::span<const cache::ChunkKey> block_keys = {});
  // Prompt tokens whose draft KV came from the draft pool's prefix cache.
  std::int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

  const BlockPool& pool() const { return pool_; }
  void start_prefault() { pool_.start_prefault(); }  // with the target's (Engine::Impl::settle)

 private:
  // Gives kv blocks for n_tokens tokens; false (and kv released) when the pool has none left.
  bool reserve(DraftKv& kv, int n_tokens);
  // An empty draft KV takes the prefix's whole blocks the pool holds, up to max_blocks.
  void take_prefix(DraftKv& kv, std::span<const cache::ChunkKey> block_keys, int max_blocks);
  // Registers the whole blocks of the first n tokens (real ones) under their keys.
  void register_full(DraftKv& kv, int n, std::span<const cache::ChunkKey> block_keys);

  const Model& model_;
  BlockPool pool_;
  int max_catch_up_;
  std::vector<float> logits_;
  std::int64_t prefix_hit_tokens_ = 0;
};

}  // namespace kvstash
