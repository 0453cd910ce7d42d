#include "cli/bench_engine_window.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "engine/engine.h"

namespace kvstash::cli {
namespace {

struct Run {
  std::vector<std::vector<TokenId>> answers;  // per turn
  EngineStats stats;
  int cached_tokens = 0;  // prompt tokens reused over all turns
  double seconds = 0;
};

Expected<Run> converse(const Model& model, const std::vector<std::vector<TokenId>>& messages, int decode_tokens,
                       int n_threads, bool free_window_kv) {
  int total = 0;
  for (const auto& m : messages) total += static_cast<int>(m.size()) + decode_tokens;
  EngineOptions o;
  o.n_ctx = total + 16;
  o.max_running = 1;
  o.n_threads = n_threads;
  o.kv_pool_tokens = o.n_ctx;
  o.free_window_kv = free_window_kv;
  auto engine = Engine::create(model, o);
  if (!engine) return engine.status();
  Run run;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<TokenId> conversation;
  for (const auto& m : messages) {
    conversation.insert(conversation.end(), m.begin(), m.end());
    GenerationRequest r;
    r.prompt = conversation;
    r.max_tokens = decode_tokens;
    r.stop_at_end_of_generation = false;  // generated weights: every turn runs its full length
    auto result = generate(**engine, r);
    if (!result) return result.status();
    if (result->finish == FinishReason::kError) return internal_error(result->error);
    run.answers.push_back(result->tokens);
    run.cached_tokens += result->cached_tokens;
    conversation.insert(conversation.end(), result->tokens.begin(), result->tokens.end());
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.stats = (*engine)->stats();
  return run;
}

}  // namespace

int bench_engine_window(const Model& model, int prompt_tokens, int turns, int decode_tokens, int n_threads, bool json) {
  const ModelConfig& c = model.config();
  int n_window = 0, window = 0;
  for (const LayerSpec& l : c.layers) {
    if (l.attention.kind == AttentionKind::kSlidingWindow) {
      ++n_window;
      window = std::max(window, l.attention.window);
    }
  }
  if (n_window == 0) {
    std::fprintf(stderr, "kvstash bench-engine: --window-kv needs a model with sliding-window layers; %s has none\n",
                 c.architecture.c_str());
    return 1;
  }
  if (turns < 1 || prompt_tokens < turns) {
    std::fprintf(stderr, "kvstash bench-engine: --window-turns must be at least 1 and at most --prompt-tokens\n");
    return 1;
  }
  // Random tokens (a fixed seed): the KV held does not depend on what the tokens say.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> token(0, c.n_vocab - 1);
  std::vector<std::vector<TokenId>> messages(static_cast<std::size_t>(turns));
  for (int t = 0; t < turns; ++t) {
    const int n = prompt_tokens / turns + (t < prompt_tokens % turns ? 1 : 0);
    for (int i = 0; i < n; ++i) messages[static_cast<std::size_t>(t)].push_back(static_cast<TokenId>(token(rng)));
  }
  if (!json) std::fprintf(stderr, "… conversation with the window layers' KV freed\n");
  auto freed = converse(model, messages, decode_tokens, n_threads, true);
  if (!freed) {
    std::fprintf(stderr, "kvstash bench-engine: %s\n", freed.status().to_string().c_str());
    return 1;
  }
  if (!json) std::fprintf(stderr, "… the same conversation with every layer's KV kept\n");
  auto kept = converse(model, messages, decode_tokens, n_threads, false);
  if (!kept) {
    std::fprintf(stderr, "kvstash bench-engine: %s\n", kept.status().to_string().c_str());
    return 1;
  }
  const bool same = freed->answers == kept->answers;
  const auto all_global = [&](const EngineStats& s) { return s.kv_blocks_used_peak * c.n_layers; };
  const double ratio = static_cast<double>(freed->stats.kv_layer_blocks_peak) / static_cast<double>(all_global(kept->stats));
  const int total_tokens = prompt_tokens + turns * decode_tokens;
  if (json) {
    nlohmann::json j;
    j["layers"] = c.n_layers;
    j["window_layers"] = n_window;
    j["window"] = window;
    j["conversation_tokens"] = total_tokens;
    j["turns"] = turns;
    j["freed"] = {{"layer_blocks_peak", freed->stats.kv_layer_blocks_peak},
                  {"blocks_peak", freed->stats.kv_blocks_used_peak},
                  {"window_blocks_peak", freed->stats.kv_window_blocks_peak},
                  {"cached_tokens", freed->cached_tokens},
                  {"seconds", freed->seconds}};
    j["kept"] = {{"layer_blocks_peak", kept->stats.kv_layer_blocks_peak},
                 {"all_global_layer_blocks", all_global(kept->stats)},
                 {"cached_tokens", kept->cached_tokens},
                 {"seconds", kept->seconds}};
    j["ratio"] = ratio;
    j["same_output"] = same;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%d layers, %d of them window layers (window %d); a conversation of %d tokens in %d turns\n", c.n_layers,
                n_window, window, total_tokens, turns);
    std::printf("%-28s %14s %12s %14s %14s %9s\n", "", "layer-blocks", "blocks", "window blocks", "cached tokens", "seconds");
    std::printf("%-28s %14lld %12lld %14lld %14d %9.1f\n", "window KV freed",
                static_cast<long long>(freed->stats.kv_layer_blocks_peak), static_cast<long long>(freed->stats.kv_blocks_used_peak),
                static_cast<long long>(freed->stats.kv_window_blocks_peak), freed->cached_tokens, freed->seconds);
    std::printf("%-28s %14lld %12lld %14lld %14d %9.1f\n", "every layer's KV kept",
                static_cast<long long>(kept->stats.kv_layer_blocks_peak), static_cast<long long>(kept->stats.kv_blocks_used_peak),
                static_cast<long long>(kept->stats.kv_window_blocks_peak), kept->cached_tokens, kept->seconds);
    std::printf("peak KV held, freed / all-global: %.1f%%; greedy output %s\n", 100.0 * ratio,
                same ? "identical" : "DIFFERENT");
  }
  if (!same) {
    std::fprintf(stderr, "kvstash bench-engine: the outputs with and without freeing differ (a bug)\n");
    return 1;
  }
  return 0;
}

}  // namespace kvstash::cli
