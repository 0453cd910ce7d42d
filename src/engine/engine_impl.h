// The engine's private state and the scheduler's phases, shared by engine.cc (queue, thread,
// admission, steps) and engine_store.cc (loads from and stores into the tiered KV store).
//
// Ownership: the engine thread alone touches everything under "engine thread only"; everything
// under "guarded by mu" may be touched from any thread with mu held. Lock order: mu only; the
// engine thread never holds mu while calling callbacks, the model or the store.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "cache/tiered_store.h"
#include "common/thread_pool.h"
#include "engine/block_pool.h"
#include "engine/draft_model.h"
#include "engine/engine.h"
#include "engine/prefetcher.h"
#include "engine/sequence.h"
#include "engine/step_cost.h"
#include "model/model.h"

namespace kvstash {

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

struct Engine::Impl {
  Impl(const Model& m, const EngineOptions& o, std::int64_t n_blocks);

  const Model& model;
  EngineOptions options;
  BlockPool pool;
  ThreadPool threads;
  // DraftKind::kModel only (null otherwise). Before the sequence lists: their DraftKv blocks go
  // back to its pool as they are destroyed, so it must outlive them.
  std::unique_ptr<DraftModelDrafter> drafter;
  const std::string kv_format;
  std::thread thread;

  mutable std::mutex mu;
  std::condition_variable wake;
  // Guarded by mu:
  std::deque<std::unique_ptr<Sequence>> incoming;
  std::vector<std::uint64_t> cancels;
  std::vector<cache::ProducerKey> forget;  // banned producers whose blocks the pool must drop
  bool stopping = false;
  bool load_finished = false;  // a prefetch job completed since the engine last looked
  std::uint64_t next_id = 1;
  int n_waiting_total = 0;  // incoming + loading + waiting, for the queue bound
  EngineStats stats;

  // Engine thread only:
  std::vector<std::unique_ptr<Sequence>> loading;  // waiting for their store prefetch
  std::deque<std::unique_ptr<Sequence>> waiting;   // ready for admission, oldest first
  std::vector<std::unique_ptr<Sequence>> running;
  std::vector<float> logits;
  std::int64_t step_number = 0;
  double draft_seconds = 0;  // drafting time not yet in stats (plan_step to run_batch)
  std::vector<DraftModelDrafter::Job> draft_jobs;  // this step's draft model jobs (plan_step)
  std::int64_t blocks_forgotten = 0;  // pool blocks dropped for a banned producer (log only)
  std::vector<cache::ProducerKey> banned_producers;  // forget_producer()'s, so far
  // A sequence whose KV derives from a banned producer (admitted before the ban): its blocks are
  // never registered nor stored again.
  bool derives_from_banned(const Sequence& seq) const;
  std::shared_ptr<const QueryStats> query_stats;  // calibrated at the first compaction
  std::vector<cache::KvChange> unpublished_changes;  // pool key changes the event log has not taken yet
  // The step-time budget (EngineOptions::itl_slo_ms; engine/step_cost.h, docs/step-budget.md).
  StepCostModel step_cost;
  // EngineOptions::calibrate_when_idle: the coefficients are still to be measured, at the first
  // idle moment from calibrate_at on (pushed back by every step).
  bool calibration_pending = false;
  std::chrono::steady_clock::time_point calibrate_at{};
  // EngineOptions::on_settled: once idle for kSettleIdle (settle_at, pushed back by every step),
  // or kSettleLatest after creation if never: the pool's prefault starts then (block_pool.h), so
  // that a cold start's first request does not share the cores with it.
  static constexpr std::chrono::milliseconds kSettleIdle{500};
  static constexpr std::chrono::seconds kSettleLatest{2};
  std::chrono::steady_clock::time_point created_at{}, settle_at{};
  bool settled = false;
  int step_installed_blocks = 0;    // this step's KV blocks installed from the store, at admission
  double step_install_s = 0;        // and the time they took
  double step_budget_s = 0;         // this step's budget; 0 = none (off, or nothing decoding)
  bool step_forced_progress = false;  // the oldest prefill got its minimum though it did not fit
  bool step_prefill_cut = false;      // the budget shortened (or left out) a prefill chunk

  // A sequence's share of one step: n_new tokens from its num_computed_tokens on (for a decoding
  // sequence with a draft: its last token, then the seq.draft.size() drafted ones).
  struct Planned {
    Sequence* seq;
    int n_new;
  };

  // engine.cc
  void loop();
  // The engine is idle: settles and runs the deferred calibration when due.
  void idle_work();
  void settle();  // once: the pool's prefault, then EngineOptions::on_settled
  // Runs the deferred calibration (the engine is idle); a request that arrives stops it.
  void calibrate_now();
  void step();
  void take_new_work();
  void admit_waiting();
  std::vector<Planned> plan_step(int& prefill_tokens);
  // The step's time budget for a step of this decode part: 0 when none applies.
  double step_time_budget(const StepShape& decode_shape) const;
  // Whether admitting the next waiting sequence now would install more KV than this step's budget
  // leaves room for (it is admitted at the next step instead). engine_store.cc has the count.
  bool defer_install(const Sequence& next) const;
  StepShape shape_of(const std::vector<Planned>& plan) const;
  // Records a step that ran a forward: stats, the on_step_record hook, the cost model's refinement.
  void account_step(const StepShape& shape, double measured_s);
  void reserve_blocks(std::vector<Planned>& plan, int& prefill_tokens);
  void run_batch(const std::vector<Planned>& plan, int prefill_tokens);
  FinishReason stop_reason(const Sequence& s, TokenId token) const;
  void compact(Sequence& s);
  bool admit(Sequence& seq);
  bool ensure_blocks(Sequence& seq, int n_new);
  void preempt(std::unique_ptr<Sequence> seq);
  void register_full_blocks(Sequence& seq);
  // Releases the sequence's block table (window holders only for blocks it still needed).
  void release_blocks(Sequence& seq);
  // Window layers (block_pool.h): gives up the window part of the sequence's blocks that lie wholly
  // before its next token's window (before num_computed_tokens - max window), when free_window_kv.
  void drop_window_blocks(Sequence& seq);
  // Extends seq.block_keys to cover its first n_blocks full blocks.
  void extend_block_keys(Sequence& seq, int n_blocks) const;
  int count_pool_hits(Sequence& seq);  // leading full blocks the pool holds (no references taken)
  void finish(Sequence& seq, FinishReason reason, const std::string& error = "");
  void emit(Sequence& seq, const SampleResult& r, FinishReason reason);
  void publish_stats(double prefill_s, double decode_s);
  // Counts a finished sequence in the stats (a request once: by its choice 0).
  void count_finished(const Sequence& seq);
  // Samples the sequence's next token from its logits row, reports it and marks it finished when
  // it ends (engine.cc).
  void sample_and_emit(Sequence& seq, const float* row, int n_vocab);
  // Counts n more tokens' KV as computed (positions, slots, the budget's slot positions), then
  // registers and stores the blocks they filled.
  void advance_computed(Sequence& seq, int n);

  // Speculative decoding (engine/speculative.h), engine.cc.
  // Fills seq.draft for this step with at most max_tokens tokens (fewer where the request's
  // max_tokens, the context or the KV budget leave less room); returns its length. With a draft
  // model it queues a job in draft_jobs instead and returns the length asked for: plan_step runs
  // the jobs together (draft_with_model), which may draft fewer.
  int plan_draft(Sequence& seq, int max_tokens);
  // A draft model behind by more than kMaxCheapCatchUp tokens catches up only for a sequence
  // with at least 1/kCatchUpPerRemainingToken of that many tokens still to generate.
  static constexpr int kMaxCheapCatchUp = 64;
  static constexpr int kCatchUpPerRemainingToken = 4;
  // Sequences that may decode in the coming steps: running, waiting and loading.
  int sequences_in_sight() const { return static_cast<int>(running.size() + waiting.size() + loading.size()); }
  // The target's keys of the sequence's whole blocks in its first n_tokens tokens (extended as
  // needed), which the draft pool's prefix cache is keyed by; empty without a prefix cache.
  std::span<const cache::ChunkKey> draft_block_keys(Sequence& seq, int n_tokens);
  // Runs draft_jobs on the draft model (one batched pass per drafted position); a failed pass
  // leaves every job without a draft (the step decodes plainly).
  void draft_with_model();
  // After the forward pass of a drafting sequence (rows: its 1 + draft.size() logit rows): emits
  // the sampled tokens while they match the draft, rolls back the KV of the rejected ones. Returns
  // the tokens emitted.
  int verify_draft(Sequence& seq, const float* rows, int n_vocab);

  // fork.cc
  // The n - 1 other choices of a request whose prompt's KV is complete: each shares the parent's
  // blocks (one more reference each), copies its counters and gets its own sampler and seed.
  std::vector<std::unique_ptr<Sequence>> fork_choices(Sequence& parent);
  // Copy-on-write before a step writes the sequence's KV: a block it is about to write that
  // another sequence also holds (a forked prompt's last partial block) is replaced by a private
  // copy. False when the pool has no block for the copy (the caller preempts, as for ensure_blocks).
  bool unshare_write_block(Sequence& seq);
  void publish_key_changes();

  // engine_store.cc
  // A sequence about to wait for admission: starts its store prefetch (then it waits in `loading`)
  // or queues it in `waiting` (at the front for a preempted sequence).
  void enqueue_for_admission(std::unique_ptr<Sequence> seq, bool front);
  // Moves sequences whose prefetch finished (or passed its deadline) from loading to waiting.
  void poll_loads();
  // Copies a finished prefetch's chunks into fresh pool blocks after the first `hits` blocks,
  // registering each; returns the new hit count in blocks.
  int install_prefetched(Sequence& seq, int hits);
  // The KV blocks a sequence's finished prefetch would install at most (0 without one).
  int prefetched_blocks(const Sequence& seq) const;
  void store_full_chunks(Sequence& seq);
  // Stores the computed full blocks past the last full chunk as one partial chunk keyed by its last
  // block's prefix key, so at most one block of a stored prefix is ever recomputed.
  void store_tail(Sequence& seq);
  // Copies n_blocks of the sequence's blocks from first_block into one record and hands it to the
  // store, with its first n_predecessors chunk keys; true if queued.
  bool store_blocks(const Sequence& seq, const cache::ChunkMeta& meta, int first_block, int n_blocks, int n_predecessors);
  void extend_chunk_keys(Sequence& seq, int n_chunks) const;
  // Pins the store keys of each of the request's pin points (GenerationRequest::pins): the full
  // chunks before it, the block-chain keys (tails, prefix aliases) of the chunk it falls in up to
  // its last whole block, and that chunk itself when the prompt holds it whole (an alias names it).
  void pin_prefixes(Sequence& seq);
  cache::ChunkMeta chunk_meta(const Sequence& seq, int chunk) const;
  // The partial chunk of n_blocks blocks starting at full chunk `chunk` (a stored tail).
  cache::ChunkMeta tail_meta(const Sequence& seq, int chunk, int n_blocks) const;

  // Last: destroyed first, so its threads (which lock mu to wake the loop) stop before mu goes.
  std::unique_ptr<Prefetcher> prefetcher;  // null without a store or without the prefix cache
};

}  // namespace kvstash
