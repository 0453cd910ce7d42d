#include "engine/budget_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/kv_compactor.h"

namespace kvstash {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// One sequence's KV: its block table, its occupied slots and its next logical position (equal
// until the budgeted side compacts).
struct Side {
  std::vector<std::int32_t> table;
  int slots = 0;
  int position = 0;
  std::vector<float> logits;
  std::vector<double> steps;
  int blocks_max = 0;
};

// The synthetic token at a logical position: the same on both sides.
TokenId token_at(int position, int n_vocab) { return static_cast<TokenId>((static_cast<std::int64_t>(position) * 7919 + 13) % n_vocab); }

// Gives `side` the blocks for n_new more slots, then checks that every block the pass writes is
// this side's alone: a write into a block the other side holds would change its KV.
Status make_room(BlockPool& pool, Side& side, int n_new) {
  const int bs = pool.block_size();
  while (static_cast<int>(side.table.size()) * bs < side.slots + n_new) {
    auto b = pool.allocate();
    if (!b) return internal_error("bench pool too small for " + std::to_string(side.slots + n_new) + " slots");
    side.table.push_back(*b);
  }
  for (int b = side.slots / bs; b < ceil_div(side.slots + n_new, bs); ++b) {
    if (pool.ref_count(side.table[static_cast<std::size_t>(b)]) != 1) {
      return internal_error("bench: block " + std::to_string(b) + " is written while shared");
    }
  }
  return Status::ok();
}

// One forward of n_new tokens at the side's next position and slot; positions recorded in
// `state` when given (the budgeted side).
Status forward(const Model& model, BlockPool& pool, Side& side, int n_new, bool want_logits, KvCompactionState* state,
               ThreadPool& threads) {
  if (Status st = make_room(pool, side, n_new); !st) return st;
  const int nv = model.config().n_vocab;
  ForwardBatch batch;
  for (int i = 0; i < n_new; ++i) batch.tokens.push_back(token_at(side.position + i, nv));
  BatchSequence s;
  s.block_table = side.table.data();
  s.n_blocks = static_cast<int>(side.table.size());
  s.pos_start = side.position;
  s.slot_start = side.slots;
  s.n_new = n_new;
  s.want_logits = want_logits;
  batch.sequences.push_back(s);
  side.logits.resize(want_logits ? static_cast<std::size_t>(nv) : 0);
  if (Status st = model.forward(batch, pool.view(), want_logits ? side.logits.data() : nullptr, threads); !st) return st;
  if (state) {
    for (int i = 0; i < n_new; ++i) state->slot_positions.push_back(side.position + i);
  }
  side.slots += n_new;
  side.position += n_new;
  side.blocks_max = std::max(side.blocks_max, static_cast<int>(side.table.size()));
  return Status::ok();
}

// Copies the side's last, partly filled block when another side holds it too, so the side's next
// token is written into a block of its own.
Status own_tail_block(BlockPool& pool, Side& side) {
  const int bs = pool.block_size();
  if (side.slots % bs == 0) return Status::ok();
  std::int32_t& tail = side.table[static_cast<std::size_t>(side.slots / bs)];
  if (pool.ref_count(tail) == 1) return Status::ok();
  auto fresh = pool.allocate();
  if (!fresh) return internal_error("bench pool too small for a copy of the tail block");
  std::memcpy(pool.block_bytes(*fresh).data(), pool.block_bytes(tail).data(), pool.view().block_bytes());
  pool.release(tail);
  tail = *fresh;
  return Status::ok();
}

// Compacts the budgeted side to budget - compact_every slots, as Engine::Impl::compact does.
Expected<double> compact(const Model& model, BlockPool& pool, Side& side, KvCompactionState& state, const KvBudgetOptions& o,
                         BudgetBenchResult& result) {
  const auto t0 = Clock::now();
  const auto kept = choose_survivors(o, model, pool.view(), side.table, state, o.budget - o.compact_every);
  const CompactionResult r = compact_slots(pool, side.table, state, kept);
  if (!r.done) return internal_error("bench pool too small for a compaction's copies");
  const double s = seconds_since(t0);
  side.slots = static_cast<int>(state.slot_positions.size());
  ++result.compactions;
  result.tokens_evicted += r.evicted;
  result.blocks_freed += r.blocks_freed;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Expected<BudgetBenchResult> measure_budget_decode(const Model& model, const BudgetBenchOptions& options, ThreadPool& threads) {
  const KvBudgetOptions& o = options.budget;
  if (o.budget <= 0) return invalid_argument("the budget comparison needs a KV budget above 0 (got " + std::to_string(o.budget) + ")");
  if (Status st = validate_budget(o, options.block_size); !st) return st;
  if (options.context < 1 || options.decode_steps < 1 || options.prefill_chunk < 1) {
    return invalid_argument("context (" + std::to_string(options.context) + "), decode steps (" + std::to_string(options.decode_steps) +
                            ") and prefill chunk (" + std::to_string(options.prefill_chunk) + ") must be at least 1");
  }
  auto progress = [&](const char* what) {
    if (options.progress) options.progress(what);
  };
  const int bs = options.block_size;
  // The full side's blocks, and the budgeted side's at most: its budget, plus the copies a
  // compaction allocates before it releases the shared originals, plus a tail copy.
  const int full_blocks = ceil_div(options.context + options.decode_steps, bs);
  BlockPool pool(model.config(), bs, full_blocks + 2 * ceil_div(o.budget + 1, bs) + 2);
  BudgetBenchResult result;

  progress("prefill of the shared context");
  Side full, budget;
  auto t0 = Clock::now();
  for (int done = 0; done < options.context;) {
    const int n = std::min(options.prefill_chunk, options.context - done);
    if (Status st = forward(model, pool, full, n, false, nullptr, threads); !st) return st;
    done += n;
  }
  result.prefill_s = seconds_since(t0);

  // The budgeted side holds the same KV (as the engine's sequence does after prefilling a prompt
  // longer than its budget) and compacts it; the compaction copies what it writes.
  KvCompactionState state;
  state.rng.seed(o.seed);
  budget.table = full.table;
  for (std::int32_t b : budget.table) pool.retain(b);
  budget.slots = full.slots;
  budget.position = full.position;
  for (int p = 0; p < options.context; ++p) state.slot_positions.push_back(p);
  if (o.policy == EvictionPolicy::kTriAttention) {
    progress("query statistics for TriAttention scoring");
    t0 = Clock::now();
    auto calibrated = calibrate_queries(model, 256);  // as Engine::Impl::compact: once per model
    if (!calibrated) return calibrated.status();
    state.queries = std::make_shared<const QueryStats>(std::move(*calibrated));
    result.calibrate_s = seconds_since(t0);
  }
  if (budget.slots >= o.budget) {
    progress("first compaction");
    auto s = compact(model, pool, budget, state, o, result);
    if (!s) return s.status();
    result.first_compaction_s = *s;
  }
  if (Status st = own_tail_block(pool, budget); !st) return st;
  budget.blocks_max = static_cast<int>(budget.table.size());

  // Interleaved decode: the same token at the same position on both sides, either one first.
  progress("decode steps, full attention and budget interleaved");
  int agree = 0;
  for (int i = 0; i < options.decode_steps; ++i) {
    for (int k = 0; k < 2; ++k) {
      const bool is_full = (i % 2 == 0) == (k == 0);
      Side& side = is_full ? full : budget;
      t0 = Clock::now();
      if (Status st = forward(model, pool, side, 1, true, is_full ? nullptr : &state, threads); !st) return st;
      side.steps.push_back(seconds_since(t0));
    }
    const auto argmax = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    agree += argmax(full.logits) == argmax(budget.logits) ? 1 : 0;
    for (std::size_t j = 0; j < full.logits.size(); ++j) {
      result.max_abs_logit_diff = std::max(result.max_abs_logit_diff, std::fabs(full.logits[j] - budget.logits[j]));
    }
    if (budget.slots >= o.budget) {  // as the engine does after the token
      auto s = compact(model, pool, budget, state, o, result);
      if (!s) return s.status();
    }
  }
  result.top1_agreement = static_cast<double>(agree) / options.decode_steps;
  for (auto [side, out] : {std::pair{&full, &result.full}, std::pair{&budget, &result.budget}}) {
    out->median_step_s = median(side->steps);
    out->best_step_s = *std::min_element(side->steps.begin(), side->steps.end());
    out->kv_slots = side->slots;
    out->kv_blocks_max = side->blocks_max;
  }

  // The steady compaction (budget -> budget - compact_every) the budgeted side pays once per
  // compact_every tokens: fill to the budget in one pass, then compact.
  progress("one steady-state compaction");
  if (budget.slots < o.budget) {
    if (Status st = forward(model, pool, budget, o.budget - budget.slots, false, &state, threads); !st) return st;
  }
  result.budget.kv_blocks_max = std::max(result.budget.kv_blocks_max, budget.blocks_max);
  auto s = compact(model, pool, budget, state, o, result);
  if (!s) return s.status();
  result.steady_compaction_s = *s;
  return result;
}

}  // namespace kvstash
