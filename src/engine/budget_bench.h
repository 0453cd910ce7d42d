// Decode speed at a long context with a KV budget against full attention, measured side by side
// (`kvstash bench-engine --kv-budget N`; issue 16's "decode tokens/s at 16k context with the budget
// vs full attention").
//
// One prefill of `context` tokens is shared by both sides, so a 16k context costs one prefill, not
// two. The budgeted side then does what the engine does with a prompt longer than its budget (the
// engine prefills the whole prompt and compacts after the first token): it holds the same blocks
// (refcounted), compacts them to budget − compact_every slots — the compaction copies every block
// it writes (copy-on-write), so the full side's KV is never touched — and decodes at the same
// logical positions as the full side, whose KV keeps every token. Decode steps of the two sides
// alternate (which goes first alternates too), so a noisy machine slows both alike. The budgeted
// side compacts again whenever it reaches the budget, as the engine does; compaction time is
// reported apart from the step times and amortised over the compact_every tokens it serves.
//
// The tokens are synthetic (a fixed arithmetic sequence, the same on both sides): the figure is
// speed, not quality (kv_compactor_test measures quality against full attention).
//
// Thread safety: a plain function; `threads` must not be used by anyone else during the call.
#pragma once

#include <functional>

#include "common/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kvstash {

struct BudgetBenchOptions {
  int context = 16384;       // logical tokens before the timed decode (one shared prefill)
  int decode_steps = 32;     // timed decode steps per side (interleaved)
  int prefill_chunk = 512;   // tokens per prefill forward: the engine's default prefill_chunk
  int block_size = 16;       // tokens per KV block: the engine's default
  KvBudgetOptions budget;    // budget.budget must be > 0 and pass validate_budget
  std::function<void(const char*)> progress;  // called before each phase; may be empty
};

struct BudgetBenchSide {
  double median_step_s = 0;  // median forward time of one decode step
  double best_step_s = 0;    // fastest step
  int kv_slots = 0;          // KV slots held after the last timed step
  // KV blocks held at most from the timed steps on (for the budgeted side: after its first
  // compaction, including the fill to the budget before the steady compaction)
  int kv_blocks_max = 0;
};

struct BudgetBenchResult {
  double prefill_s = 0;            // the shared prefill of `context` tokens
  double calibrate_s = 0;          // the query statistics TriAttention scoring needs (once per model)
  double first_compaction_s = 0;   // context slots -> budget - compact_every (0 when context < budget)
  double steady_compaction_s = 0;  // budget slots -> budget - compact_every, the per-compact_every cost
  int compactions = 0;             // all compactions of the budgeted side
  int tokens_evicted = 0;
  int blocks_freed = 0;
  BudgetBenchSide full, budget;
  double top1_agreement = 0;       // steps whose argmax agrees between the sides (same input tokens)
  float max_abs_logit_diff = 0;    // largest |logit difference| over the timed steps
};

// Runs the comparison. kInvalidArgument (naming the numbers) for a budget the engine would refuse
// (validate_budget), a budget of 0, or context / decode_steps / prefill_chunk below 1; errors of
// the model's forward pass as they come.
Expected<BudgetBenchResult> measure_budget_decode(const Model& model, const BudgetBenchOptions& options, ThreadPool& threads);

}  // namespace kvstash
