// The step cost model's calibration and its online refinement (step_cost.h).
#include "engine/step_cost.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/thread_pool.h"
#include "engine/block_pool.h"
#include "model/model.h"

namespace kvstash {
namespace {

using Clock = std::chrono::steady_clock;

// Floors for the measured coefficients: a noisy difference of two timings may come out at or below
// zero, and a zero cost would let the scheduler plan any chunk (1 ns per row, 0.1 ns per pair).
constexpr double kMinPerRow = 1e-9;
constexpr double kMinPerPair = 1e-10;

// One forward of `sequences` (each n_new tokens of token id 0 from pos_start, one logits row
// each), timed. The tokens' values do not change the time: the kernels do the same work for any.
Expected<double> timed_forward(const Model& model, const BlockPool& pool, ThreadPool& threads,
                               const std::vector<BatchSequence>& sequences, std::vector<float>& logits) {
  ForwardBatch batch;
  batch.sequences = sequences;
  for (const BatchSequence& s : sequences) batch.tokens.insert(batch.tokens.end(), static_cast<std::size_t>(s.n_new), 0);
  logits.resize(static_cast<std::size_t>(batch.logit_rows()) * static_cast<std::size_t>(model.config().n_vocab));
  const auto t0 = Clock::now();
  if (Status st = model.forward(batch, pool.view(), logits.data(), threads); !st) {
    return internal_error("step cost calibration: " + st.to_string());
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Expected<StepCostParams> StepCostModel::calibrate(const Model& model, BlockPool& pool, ThreadPool& threads,
                                                  const std::function<bool()>& interrupted) {
  const int bs = pool.block_size();
  // Enough blocks for the context row (its context plus the new slot), the prefill, and one block
  // for each row of the decode batch; a smaller pool (tests) calibrates on a shorter context and a
  // smaller batch (the engine's pool always has two blocks: n_ctx plus a block).
  const int available = static_cast<int>(std::min<std::int64_t>(pool.n_free(), (kCalibrationContext + bs) / bs + 1));
  if (available < 2) {
    return resource_exhausted("step cost calibration needs 2 free KV blocks; the pool has " + std::to_string(pool.n_free()));
  }
  const int decode_batch = std::min(4, available);
  std::vector<std::int32_t> table;
  for (int i = 0; i < available; ++i) table.push_back(*pool.allocate());
  struct Release {
    BlockPool& pool;
    std::vector<std::int32_t>& table;
    ~Release() { pool.release_table(table); }
  } release{pool, table};

  const int n_blocks = static_cast<int>(table.size());
  const int context = std::min(kCalibrationContext, n_blocks * bs - 1);
  const int prefill = std::min(kCalibrationPrefillTokens, n_blocks * bs);
  // The prefill chunk's context for per_pair_s: as long as the blocks hold beside the chunk.
  const int chunk_context = std::max(0, std::min(kCalibrationContext, n_blocks * bs - prefill));
  auto one = [&](int pos, int n_new, int block) {
    BatchSequence s;
    s.block_table = table.data() + block;
    s.n_blocks = block == 0 ? n_blocks : 1;
    s.pos_start = pos;
    s.n_new = n_new;
    return s;
  };
  std::vector<float> logits;
  // Every forward goes through here: it is where an interruption is noticed.
  auto timed = [&](const std::vector<BatchSequence>& sequences) -> Expected<double> {
    if (interrupted && interrupted()) return Status(StatusCode::kUnavailable, "step cost calibration: interrupted");
    return timed_forward(model, pool, threads, sequences, logits);
  };
  // The context's cost is a small difference of two decode times (a few ms on a 0.5B model) that
  // other load on the machine only ever adds to: the fastest of kRepeats of each, alternated. The
  // first forward also warms caches and page tables.
  constexpr int kRepeats = 3;
  double t1 = 1e300, t_context = 1e300;
  for (int i = 0; i < kRepeats; ++i) {
    auto base = timed({one(0, 1, 0)});
    if (!base) return base.status();
    auto with_context = timed({one(context, 1, 0)});
    if (!with_context) return with_context.status();
    t1 = std::min(t1, *base);
    t_context = std::min(t_context, *with_context);
  }
  std::vector<BatchSequence> rows;
  for (int i = 0; i < decode_batch; ++i) rows.push_back(one(0, 1, i));
  auto batch = timed(rows);
  if (!batch) return batch.status();
  // A pair's cost from a prefill chunk after chunk_context slots against the same chunk from 0:
  // prefill * chunk_context more pairs (16k at the defaults), a difference of tens of percent.
  // One decode row's 1,024 pairs are a few percent of its step, under the noise: on qwen2.5-0.5b
  // that measure gave about 0, and a 100-token tail after 3,200 loaded tokens then ran a step
  // 3.4x the streams' gap under a 2x budget (BENCHMARKS.md, issue 34).
  double chunk = 1e300, chunk_at_context = 1e300;
  for (int i = 0; i < kRepeats; ++i) {
    auto at_zero = timed({one(0, prefill, 0)});
    if (!at_zero) return at_zero.status();
    chunk = std::min(chunk, *at_zero);
    if (chunk_context > 0) {
      auto at_context = timed({one(chunk_context, prefill, 0)});
      if (!at_context) return at_context.status();
      chunk_at_context = std::min(chunk_at_context, *at_context);
    }
  }

  // t(1 row, 1 pair) = base + decode_row + pair; t(1 row, context + 1 pairs); t(b rows, b pairs);
  // t(prefill rows with one logits row, pairs(prefill)) = base + decode_row + (prefill - 1) * row + ...
  StepCostParams p;
  const double decode_pair_s = (t_context - t1) / context;
  const double prefill_pair_s =
      chunk_context > 0 ? (chunk_at_context - chunk) / (static_cast<double>(prefill) * chunk_context) : 0.0;
  p.per_pair_s = std::max({kMinPerPair, decode_pair_s, prefill_pair_s});
  p.per_decode_row_s = std::max(kMinPerRow, (*batch - t1 - p.per_pair_s * (decode_batch - 1)) / (decode_batch - 1));
  const double prefill_pairs = static_cast<double>(StepShape::prefill_pair_count(0, prefill));
  p.per_row_s = prefill > 1 ? std::max(kMinPerRow, (chunk - t1 - p.per_pair_s * (prefill_pairs - 1)) / (prefill - 1)) : p.per_decode_row_s;
  p.base_s = std::max(0.0, t1 - p.per_decode_row_s - p.per_pair_s);

  // Installing a loaded chunk is a copy of whole blocks into the pool (engine_store.cc). Timed the
  // second time: the first also faults the destination's pages in (once per pool, not per install).
  const int copies = n_blocks / 2;
  double copy_s = 1e300;
  for (int round = 0; round < 2; ++round) {
    const auto c0 = Clock::now();
    for (int i = 0; i < copies; ++i) {
      const auto from = pool.block_bytes(table[static_cast<std::size_t>(i)]);
      std::memcpy(pool.block_bytes(table[static_cast<std::size_t>(copies + i)]).data(), from.data(), from.size());
    }
    copy_s = std::min(copy_s, std::chrono::duration<double>(Clock::now() - c0).count());
  }
  p.per_block_install_s = copies > 0 ? copy_s / copies : 0.0;
  return p;
}

double StepCostModel::predict_decode_part(const StepShape& s) const {
  const double t = params_.base_s + params_.per_decode_row_s * s.decode_rows + params_.per_pair_s * static_cast<double>(s.decode_pairs) +
                   params_.per_block_install_s * s.installed_blocks;
  return decode_scale_ * t;
}

double StepCostModel::predict_prefill_part(const StepShape& s) const {
  return prefill_scale_ * (params_.per_row_s * s.prefill_tokens + params_.per_pair_s * static_cast<double>(s.prefill_pairs));
}

int StepCostModel::max_prefill_tokens(int slots_before, int max_n, double time_s) const {
  auto cost = [&](int n) {
    return prefill_scale_ * (params_.per_row_s * n + params_.per_pair_s * static_cast<double>(StepShape::prefill_pair_count(slots_before, n)));
  };
  if (max_n <= 0 || cost(1) > time_s) return 0;
  // cost() grows with n: the largest n that fits, by bisection (lo fits, hi does not).
  int lo = 1, hi = max_n + 1;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (cost(mid) <= time_s ? lo : hi) = mid;
  }
  return lo;
}

void StepCostModel::observe(const StepShape& s, double measured_s) {
  if (!online_ || measured_s <= 0) return;
  auto move = [](double& scale, double target) {
    target = std::clamp(target, scale / kMaxJump, scale * kMaxJump);
    scale += kAlpha * (target - scale);
  };
  const double decode_part = predict_decode_part(s);
  if (s.prefill_tokens == 0) {
    if (decode_part > 0) move(decode_scale_, decode_scale_ * measured_s / decode_part);
    return;
  }
  // A step with prefill moves both scales by its ratio: its error is split by the parts' shares.
  // (Giving it all to the prefill would turn a small drift of the decode part, which no
  // decode-only step corrects while a prompt prefills beside every step, into a large one of the
  // prefill: budgeted chunks are small next to the decode part. Decode-only steps then pull the
  // decode scale back, which leaves the prefill its own error.)
  const double predicted = decode_part + predict_prefill_part(s);
  if (predicted <= 0) return;
  const double ratio = measured_s / predicted;
  move(decode_scale_, decode_scale_ * ratio);
  move(prefill_scale_, prefill_scale_ * ratio);
}

}  // namespace kvstash
