// Compiled grammars per constraint, shared across requests: the first request of a schema
// compiles it and binds it to the vocabulary; later ones get the same CompiledGrammar, whose DFA
// and masks are already warm (token_matcher.h). Bounded by count, least recently used first out
// (a request holding one keeps it alive). A grammar whose DFA nears its bound is compiled afresh
// for the requests that follow.
//
// Thread safety: all methods are safe from any thread (one mutex; compilation runs under it, a
// few milliseconds for the schemas of the tests, BENCHMARKS.md).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/token_matcher.h"

namespace kvstash::grammar {

// Memory: each grammar holds at most max_states DFA states (about 1 KiB each) and max_mask_bytes
// of masks, so the cache holds at most max_grammars times that (defaults: 16 x (32 MiB + 32 MiB)).
struct GrammarCacheOptions {
  std::size_t max_grammars = 16;      // compiled grammars kept; default 16
  CompiledGrammarOptions compiled{};  // bounds of each one's DFA and masks
};

struct GrammarCacheStats {
  std::int64_t hits = 0;
  std::int64_t compiles = 0;
  std::int64_t errors = 0;  // schemas refused
  std::int64_t renewed = 0;  // grammars recompiled for new requests as their state table filled
  double compile_seconds = 0;
};

class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, GrammarCacheOptions options = {});

  // The grammar of a JSON Schema, given as its canonical text (the key: one schema, one text).
  // Errors: compile_json_schema's (kUnsupported naming the keyword, kInvalidArgument).
  Expected<std::shared_ptr<const CompiledGrammar>> json_schema(const std::string& schema_text);
  // Any JSON object.
  Expected<std::shared_ptr<const CompiledGrammar>> json_object();
  // A GBNF grammar (llama-server's `grammar` field, gbnf.h). Errors: parse_gbnf's.
  Expected<std::shared_ptr<const CompiledGrammar>> gbnf(const std::string& text);
  // A JSON Schema's language framed by literal text (grammar.h: framed()): tool calls in a model's
  // syntax. Errors: compile_json_schema's.
  Expected<std::shared_ptr<const CompiledGrammar>> framed_json_schema(const std::string& schema_text, const std::string& prefix,
                                                                      const std::string& suffix, const std::string& separator,
                                                                      bool many);

  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  GrammarCacheStats stats() const;

 private:
  Expected<std::shared_ptr<const CompiledGrammar>> get(const std::string& key, const std::function<Expected<Grammar>()>& compile);

  std::shared_ptr<const TokenVocabulary> vocabulary_;
  GrammarCacheOptions options_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  GrammarCacheStats stats_;
};

}  // namespace kvstash::grammar
