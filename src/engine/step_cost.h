// The step cost model: a step's predicted time from its shape (decode rows and their contexts,
// prefill tokens and theirs, KV blocks installed from the store), so the scheduler can keep a step
// that carries decoding sequences within a time budget (EngineOptions::itl_slo_ms, issue 34).
//
//   predicted = decode_scale  * (base + per_row * decode_rows + per_pair * decode_pairs
//                                + per_block_install * installed_blocks)
//             + prefill_scale * (per_row * prefill_tokens + per_pair * prefill_pairs)
//
// A row is one new token's pass through the weights (a decode token or a prefill token cost the
// same matmul work: the kernels compute every row alike, kernels/matmul.cc); a pair is one
// (query, key) of attention; base is what any forward costs (reading the weights once). The
// coefficients come from a few short forwards on the engine's own model, pool and threads at
// start-up (calibrate), and the two scales follow each step's measured time (observe: an
// exponential moving average per phase), so the model tracks the machine's load as it changes.
//
// Thread safety: none; the engine thread alone owns it.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/engine.h"
#include "kvstash/status.h"

namespace kvstash {

class BlockPool;
class Model;
class ThreadPool;

// What a step computes, in the model's terms.
struct StepShape {
  int decode_rows = 0;
  std::int64_t decode_pairs = 0;   // attention pairs of the decode rows (their contexts, new slot included)
  int prefill_tokens = 0;
  std::int64_t prefill_pairs = 0;  // attention pairs of the prefill chunks
  int installed_blocks = 0;        // KV blocks copied from loaded store chunks into the pool

  void add_decode(int slots_before) {
    ++decode_rows;
    decode_pairs += slots_before + 1;
  }
  void add_prefill(int slots_before, int n) {
    prefill_tokens += n;
    prefill_pairs += prefill_pair_count(slots_before, n);
  }
  // A chunk of n tokens after `slots_before` slots: token j attends to slots_before + j + 1 slots.
  static std::int64_t prefill_pair_count(int slots_before, int n) {
    return std::int64_t{n} * slots_before + std::int64_t{n} * (n + 1) / 2;
  }
};

class StepCostModel {
 public:
  explicit StepCostModel(const StepCostParams& params = {}, bool online = true) : params_(params), online_(online) {}

  // Measures the coefficients with a handful of forwards on `model` (seven decode-sized ones and
  // one prefill of kCalibrationPrefillTokens tokens: about a second for a 0.5B model on two loaded
  // cores, under half on a quiet machine). It borrows free blocks of `pool` (never cached ones: an
  // engine that calibrates when idle keeps its prefix cache) and gives them back unregistered (the
  // pool's counts and its prefix cache are as before). `interrupted`, when given, is asked between
  // forwards; true stops the calibration (kUnavailable, "interrupted"). Errors: a forward's
  // (kInternal), or a pool with fewer than two free blocks (kResourceExhausted).
  static Expected<StepCostParams> calibrate(const Model& model, BlockPool& pool, ThreadPool& threads,
                                            const std::function<bool()>& interrupted = {});

  double predict(const StepShape& shape) const { return predict_decode_part(shape) + predict_prefill_part(shape); }
  // The part the step costs without its prefill: base, decode rows, installs.
  double predict_decode_part(const StepShape& shape) const;
  double predict_prefill_part(const StepShape& shape) const;
  // The largest n in [0, max_n] whose chunk after `slots_before` slots adds at most `time_s`.
  int max_prefill_tokens(int slots_before, int max_n, double time_s) const;
  // Predicted seconds to install `blocks` KV blocks from loaded chunks.
  double predict_install(int blocks) const { return decode_scale_ * params_.per_block_install_s * blocks; }

  // Refines the scales from a step's measured time (no-op when not online): a step without
  // prefill moves decode_scale, one with prefill both scales by its measured/predicted ratio (its
  // error split by the parts' shares; decode-only steps then leave the prefill its own). Each
  // observation moves a scale by kAlpha of the way, bounded to a factor of kMaxJump per step so
  // one outlier (a page fault, a compaction) cannot swing it.
  void observe(const StepShape& shape, double measured_s);

  const StepCostParams& params() const { return params_; }
  double decode_scale() const { return decode_scale_; }
  double prefill_scale() const { return prefill_scale_; }

  static constexpr int kCalibrationPrefillTokens = 16;
  static constexpr int kCalibrationContext = 1024;  // the decode row's context for per_pair_s
  static constexpr double kAlpha = 0.2;           // about the last ten steps of each kind
  static constexpr double kMaxJump = 2.0;

 private:
  StepCostParams params_;
  bool online_;
  double decode_scale_ = 1.0;
  double prefill_scale_ = 1.0;
};

}  // namespace kvstash
