#include "cli/bench_engine_budget.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "engine/budget_bench.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::cli {

int bench_engine_budget(const Model& model, const KvBudgetOptions& budget, int context, int decode_steps, bool json,
                        ThreadPool& threads) {
  BudgetBenchOptions o;
  o.context = context;
  o.decode_steps = decode_steps;
  o.budget = budget;
  if (!json) o.progress = [](const char* what) { std::fprintf(stderr, "… %s\n", what); };
  auto measured = measure_budget_decode(model, o, threads);
  if (!measured) {
    std::fprintf(stderr, "kvstash bench-engine: %s\n", measured.status().to_string().c_str());
    return 1;
  }
  const BudgetBenchResult& r = *measured;
  const ModelConfig& c = model.config();
  const double full_tps = 1.0 / r.full.median_step_s, budget_tps = 1.0 / r.budget.median_step_s;
  // Compaction amortised: one steady compaction per compact_every decoded tokens.
  const double amortised_tps = 1.0 / (r.budget.median_step_s + r.steady_compaction_s / budget.compact_every);
  nlohmann::json out = {
      {"model", c.name},
      {"simd", kernels::simd_path()},
      {"threads", threads.size()},
      {"context", context},
      {"decode_steps", decode_steps},
      {"kv_budget", budget.budget},
      {"kv_compact_every", budget.compact_every},
      {"kv_sinks", budget.sinks},
      {"kv_recent", budget.recent},
      {"prefill_s", r.prefill_s},
      {"full_decode_tokens_per_s", full_tps},
      {"budget_decode_tokens_per_s", budget_tps},
      {"budget_vs_full", budget_tps / full_tps},
      {"budget_decode_tokens_per_s_with_compaction", amortised_tps},
      {"budget_with_compaction_vs_full", amortised_tps / full_tps},
      {"full_best_step_s", r.full.best_step_s},
      {"budget_best_step_s", r.budget.best_step_s},
      {"full_kv_slots", r.full.kv_slots},
      {"full_kv_blocks", r.full.kv_blocks_max},
      {"budget_kv_slots", r.budget.kv_slots},
      {"budget_kv_blocks_max", r.budget.kv_blocks_max},
      {"calibrate_s", r.calibrate_s},
      {"first_compaction_s", r.first_compaction_s},
      {"steady_compaction_s", r.steady_compaction_s},
      {"compactions", r.compactions},
      {"tokens_evicted", r.tokens_evicted},
      {"blocks_freed", r.blocks_freed},
      {"top1_agreement", r.top1_agreement},
      {"max_abs_logit_diff", r.max_abs_logit_diff},
  };
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("model %s, %s, %d threads; %d tokens of context (one shared prefill, %.1f s), median of %d steps each\n",
              c.name.c_str(), kernels::simd_path(), threads.size(), context, r.prefill_s, decode_steps);
  std::printf("  full attention     %9.2f tokens/s   KV %d slots in %d blocks\n", full_tps, r.full.kv_slots, r.full.kv_blocks_max);
  std::printf("  --kv-budget %-6d %9.2f tokens/s   KV %d slots, at most %d blocks   = %.2fx full\n", budget.budget, budget_tps,
              r.budget.kv_slots, r.budget.kv_blocks_max, budget_tps / full_tps);
  std::printf("  with compaction    %9.2f tokens/s   (%.1f ms per %d tokens)   = %.2fx full\n", amortised_tps,
              1e3 * r.steady_compaction_s, budget.compact_every, amortised_tps / full_tps);
  std::printf("  compactions %d (first %.1f ms), %d tokens evicted, %d blocks freed; top-1 agreement %.2f\n", r.compactions,
              1e3 * r.first_compaction_s, r.tokens_evicted, r.blocks_freed, r.top1_agreement);
  if (context < budget.budget) std::printf("  (the context fits in the budget: nothing was evicted before the timed steps)\n");
  return 0;
}

}  // namespace kvstash::cli
