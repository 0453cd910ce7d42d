// The speculative decoding flags shared by `kvstash run`, `kvstash serve` and `kvstash
// bench-engine` (engine/speculative.h). Speculation never changes an answer (greedy or seeded),
// so none of these enters the response cache's key.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "engine/engine.h"

namespace kvstash::cli {

inline void add_speculative_flags(CLI::App& app, SpeculativeOptions& o) {
  static const std::map<std::string, DraftKind> kinds = {{"off", DraftKind::kNone}, {"ngram", DraftKind::kNgram}};
  app.add_option("--spec", o.draft,
                 "speculative decoding: off (default) or ngram (prompt lookup: drafts continue the sequence's last "
                 "n-gram where it occurred before in its prompt or output; the target verifies them in one step)")
      ->transform(CLI::CheckedTransformer(kinds, CLI::ignore_case));
  app.add_option("--spec-k", o.max_draft, "tokens drafted per sequence and step at most (adapted down per sequence)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
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

}  // namespace kvstash::cli
