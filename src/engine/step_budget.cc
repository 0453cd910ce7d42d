// The step-time budget's side of the scheduler (issue 34, docs/step-budget.md): the budget of a
// step, the deferral of KV installs that would not fit in it, and each step's accounting. The
// chunk sizing itself is in plan_step (engine.cc).
#include <algorithm>

#include "engine/engine_impl.h"

namespace kvstash {
namespace {
// A prediction counts as over the budget past this relative slack: the planner adds chunk costs
// one by one, the record sums them at once, and the two roundings may differ in the last bits.
constexpr double kRoundingSlack = 1e-9;
}  // namespace

double Engine::Impl::step_time_budget(const StepShape& decode_shape) const {
  if (options.itl_slo_ms == 0 || decode_shape.decode_rows == 0 || calibration_pending) return 0;
  if (options.itl_slo_ms > 0) return options.itl_slo_ms / 1000.0;
  // A factor of what the decode part alone costs (installs aside): the streams' gap grows by at
  // most that factor while a prompt prefills beside them.
  StepShape decode_only = decode_shape;
  decode_only.installed_blocks = 0;
  return options.itl_slo_factor * step_cost.predict_decode_part(decode_only);
}

bool Engine::Impl::defer_install(const Sequence& next) const {
  // The first install of a step always goes (a load makes progress); later ones only while the
  // step's decode part (the running sequences that decode) and its installs fit in the budget.
  if (options.itl_slo_ms == 0 || step_installed_blocks == 0 || calibration_pending) return false;
  const int blocks = prefetched_blocks(next);
  if (blocks == 0) return false;
  StepShape decode_shape;
  for (const auto& s : running) {
    if (s->pending() == 1) decode_shape.add_decode(s->num_slots);
  }
  const double budget = step_time_budget(decode_shape);
  if (budget == 0) return false;
  decode_shape.installed_blocks = step_installed_blocks + blocks;
  return step_cost.predict(decode_shape) > budget;
}

StepShape Engine::Impl::shape_of(const std::vector<Planned>& plan) const {
  StepShape shape;
  shape.installed_blocks = step_installed_blocks;
  for (const Planned& p : plan) {
    if (p.seq->pending() == 1) {  // a decoding sequence: its own token, then its drafted ones
      for (int j = 0; j < p.n_new; ++j) shape.add_decode(p.seq->num_slots + j);
    } else {
      shape.add_prefill(p.seq->num_slots, p.n_new);
    }
  }
  return shape;
}

void Engine::Impl::account_step(const StepShape& shape, double measured_s) {
  StepRecord r;
  r.step = step_number - 1;
  r.decode_rows = shape.decode_rows;
  r.prefill_tokens = shape.prefill_tokens;
  r.installed_blocks = shape.installed_blocks;
  r.budget_s = shape.decode_rows > 0 ? step_budget_s : 0;
  r.predicted_s = step_cost.predict(shape);  // the prediction the plan was made with
  r.measured_s = measured_s;
  r.install_s = step_install_s;
  r.forced_progress = step_forced_progress;
  r.prefill_cut = step_prefill_cut;
  step_cost.observe(shape, measured_s);
  {
    std::lock_guard<std::mutex> lock(mu);
    stats.last_step_predicted_s = r.predicted_s;
    stats.last_step_measured_s = r.measured_s;
    if (r.decode_rows > 0) {
      ++stats.decoding_steps;
      stats.step_budget_s = r.budget_s;
      if (r.budget_s > 0 && r.measured_s > r.budget_s) ++stats.steps_over_budget;
      if (r.budget_s > 0 && r.predicted_s > r.budget_s * (1 + kRoundingSlack)) ++stats.steps_predicted_over_budget;
    }
  }
  if (options.on_step_record) options.on_step_record(r);
}

}  // namespace kvstash
