#include "grammar/grammar_cache.h"

#include <chrono>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"

namespace kvstash::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary, GrammarCacheOptions options)
    : vocabulary_(std::move(vocabulary)), options_(options) {}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCache::json_schema(const std::string& schema_text) {
  return get("json_schema:" + schema_text, [&schema_text] { return compile_json_schema_text(schema_text); });
}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCache::json_object() {
  return get("json_object", [] { return Expected<Grammar>(json_object_grammar()); });
}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCache::gbnf(const std::string& text) {
  return get("gbnf:" + text, [&text] { return parse_gbnf(text); });
}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCache::framed_json_schema(const std::string& schema_text,
                                                                                const std::string& prefix,
                                                                                const std::string& suffix,
                                                                                const std::string& separator, bool many) {
  // Lengths first: the key names each part unambiguously.
  const std::string key = "framed:" + std::to_string(prefix.size()) + ":" + prefix + std::to_string(suffix.size()) + ":" +
                          suffix + std::to_string(separator.size()) + ":" + separator + (many ? "+" : "1") + schema_text;
  return get(key, [&]() -> Expected<Grammar> {
    Expected<Grammar> inner = compile_json_schema_text(schema_text);
    if (!inner) return inner.status();
    return framed(std::move(*inner), prefix, suffix, separator, many);
  });
}

Expected<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(const std::string& key,
                                                                   const std::function<Expected<Grammar>()>& compile) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    // A grammar whose state table is three quarters full is replaced for new requests (those in
    // flight keep the old one and its last quarter), so a long-lived schema whose states grow with
    // its outputs (recursion) never runs its requests into the bound.
    if (it->second->second->stats().states * 4 < options_.compiled.max_states * 3) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
    lru_.erase(it->second);
    index_.erase(it);
    ++stats_.renewed;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Expected<Grammar> grammar = compile();
  if (!grammar) {
    ++stats_.errors;
    return grammar.status();
  }
  auto compiled = CompiledGrammar::create(std::move(*grammar), vocabulary_, key, options_.compiled);
  if (!compiled) {
    ++stats_.errors;
    return compiled.status();
  }
  ++stats_.compiles;
  stats_.compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::shared_ptr<const CompiledGrammar> g = std::move(*compiled);
  lru_.emplace_front(key, g);
  index_[key] = lru_.begin();
  while (lru_.size() > options_.max_grammars) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return g;
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace kvstash::grammar
