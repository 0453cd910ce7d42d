// The KV budget flags shared by `kvstash run` and `kvstash serve` (engine/kv_compactor.h).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "engine/engine.h"

namespace kvstash::cli {

inline void add_kv_budget_flags(CLI::App& app, KvBudgetOptions& o) {
  app.add_option("--kv-budget", o.budget,
                 "KV slots a sequence may hold (0 = full attention); past it, the least useful tokens are evicted "
                 "(TriAttention scoring) and the survivors compacted so whole blocks return to the pool")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--kv-compact-every", o.compact_every, "tokens evicted per compaction (a compaction runs at --kv-budget)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-sinks", o.sinks, "first tokens always kept (attention sinks)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--kv-recent", o.recent, "most recent tokens always kept")->check(CLI::NonNegativeNumber)->capture_default_str();
  static const std::map<std::string, EvictionPolicy> policies = {
      {"triattention", EvictionPolicy::kTriAttention}, {"window", EvictionPolicy::kWindow}, {"random", EvictionPolicy::kRandom}};
  app.add_option("--kv-eviction", o.policy, "which tokens go: triattention (default), window (sinks + recent), random")
      ->transform(CLI::CheckedTransformer(policies, CLI::ignore_case));
}

}  // namespace kvstash::cli
