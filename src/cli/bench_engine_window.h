// `kvstash bench-engine --window-kv`: the KV a conversation holds on a model with sliding-window
// layers (engine/block_pool.h), with the window layers' KV freed as it grows against kept (the
// all-global accounting: every layer's KV for every token). The conversation: --window-turns
// turns, each adding (--prompt-tokens / turns) new tokens to everything before it (earlier turns'
// prompts and answers: a prefix-cache hit) and generating --decode-tokens greedily. Reports, for
// each run, the peak of the KV blocks held in one layer's blocks (EngineStats::kv_layer_blocks_peak),
// the all-global figure (kv_blocks_used_peak x n_layers) and their ratio; fails (exit 1) when the
// two runs' outputs differ, which would be a bug. Prints a table, or one JSON object with --json.
//
// Thread safety: called once from bench_engine_main.
#pragma once

#include "model/model.h"

namespace kvstash::cli {

// The process exit code: 0, or 1 with the error on stderr.
int bench_engine_window(const Model& model, int prompt_tokens, int turns, int decode_tokens, int n_threads, bool json);

}  // namespace kvstash::cli
