// The speculative decoding flags shared by `kvstash run`, `kvstash serve` and `kvstash
// bench-engine` (engine/speculative.h). Speculation never changes an answer (greedy or seeded),
// so none of these enters the response cache's key.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/model.h"

namespace kvstash::cli {

// model_draft receives --model-draft's path (load_draft_model loads it after parsing).
inline void add_speculative_flags(CLI::App& app, SpeculativeOptions& o, std::string& model_draft) {
  static const std::map<std::string, DraftKind> kinds = {
      {"off", DraftKind::kNone}, {"ngram", DraftKind::kNgram}, {"model", DraftKind::kModel}};
  app.add_option("--spec", o.draft,
                 "speculative decoding: off (default), ngram (prompt lookup: drafts continue the sequence's last "
                 "n-gram where it occurred before in its prompt or output) or model (--model-draft drafts); the "
                 "target verifies the drafts in one step")
      ->transform(CLI::CheckedTransformer(kinds, CLI::ignore_case));
  app.add_option("--model-draft", model_draft,
                 "draft model GGUF for speculative decoding (--spec model, implied): same vocabulary as the target, "
                 "drafts greedily with its own KV");
  app.add_option("--draft-kv-tokens", o.draft_kv_tokens,
                 "the draft model's KV pool in tokens (0 = --spec-max-decoders x the context length)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  o.max_draft = 0;  // by drafter, set in load_draft_model unless given
  app.add_option("--spec-k", o.max_draft,
                 "tokens drafted per sequence and step at most (adapted down per sequence; default: 8 for ngram, 6 "
                 "for a draft model, whose every drafted token costs a pass of its own)")
      ->check(CLI::Range(1, 64));
  app.add_option("--spec-ngram-max", o.max_ngram, "longest n-gram the ngram drafter looks up")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--spec-ngram-min", o.min_ngram, "shortest n-gram the ngram drafter looks up (at most --spec-ngram-max)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--spec-max-decoders", o.max_decoders,
                 "speculate only in steps with at most this many decoding sequences (a larger batch already "
                 "shares each weight read among its rows)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// After parsing: with --model-draft, loads the draft model into `holder` (which must outlive the
// engine) and points the options at it, selecting the model drafter when --spec was left off.
// Refuses --model-draft with another drafter and --spec model without --model-draft. Sets
// --spec-k's default by drafter (bench-engine --draft model on qwen2.5-0.5b F16 with its Q4_0
// copy: k = 6 1.51x plain decode, k = 8 1.25x, k = 4 1.16x; prompt lookup's drafts cost nothing
// to make, so it keeps the longer 8: BENCHMARKS.md, issue 36).
inline Status load_draft_model(const std::string& model_draft, const ModelLoadOptions& load, SpeculativeOptions& o,
                               std::unique_ptr<Model>& holder) {
  if (o.max_draft == 0) o.max_draft = model_draft.empty() && o.draft != DraftKind::kModel ? 8 : 6;
  if (model_draft.empty()) {
    if (o.draft == DraftKind::kModel) return invalid_argument("--spec model needs --model-draft FILE.gguf");
    return Status::ok();
  }
  if (o.draft == DraftKind::kNone) o.draft = DraftKind::kModel;
  if (o.draft != DraftKind::kModel) return invalid_argument("--model-draft drafts with a model; it cannot go with --spec ngram");
  ModelLoadOptions draft_load = load;
  draft_load.defer_weights_cache_write = false;  // its prepared-weights file (named by its fingerprint) now
  auto loaded = Model::load(model_draft, draft_load);
  if (!loaded) return Status(loaded.status().code(), "draft model: " + loaded.status().message());
  holder = std::move(*loaded);
  o.draft_model = holder.get();
  return Status::ok();
}

}  // namespace kvstash::cli
