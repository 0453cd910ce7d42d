// `kvstash bench-engine --kv-budget N`: decode tokens/s at --decode-context tokens of context with
// the KV budget against full attention, both in this process over one shared prefill
// (engine/budget_bench.h). Prints a table, or one JSON object with --json.
//
// Thread safety: called once from bench_engine_main.
#pragma once

#include "common/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kvstash::cli {

// The process exit code: 0, or 1 with the error on stderr (a refused budget names its numbers).
int bench_engine_budget(const Model& model, const KvBudgetOptions& budget, int context, int decode_steps, bool json,
                        ThreadPool& threads);

}  // namespace kvstash::cli
