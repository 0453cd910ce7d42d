// The semantic part of the response cache (docs/semantic-cache.md): a request that is not an exact
// hit may be answered with the cached answer of a near-duplicate request, under hard gates.
//
// Gates, each structural or checked on every candidate:
//  - Namespace (structural: one index per namespace). The namespace is SHA-256 over the model
//    fingerprint, the cache salt, the server's engine_config, the endpoint, the whole context
//    before the embedded text (every earlier chat message, role and content: the system prompt
//    included) and every sampling parameter as sent (temperature, top_k, top_p, max_tokens as sent,
//    ignore_eos, stop strings, kv_budget). Two requests that differ in any of them never meet.
//  - Eligibility (semantic_query()): greedy only (temperature 0), no seed, no logprobs or
//    top_logprobs, the last chat message is the user's, a text prompt (not token ids).
//  - Literals (SemanticIndex::find()): the numbers and quoted strings of the embedded text
//    (extract_literals()), in order, must equal the candidate's. "What is 2+3?" never gets the
//    answer of "What is 2+4?", however close their embeddings.
//  - Similarity: cosine (inner product of normalised embeddings) >= the threshold.
//
// The embedded text is the last user message (chat) or the prompt (completions); its embedding is
// the served model's (engine/embedder.h).
//
// Thread safety: SemanticIndex is safe from any thread (one mutex); the free functions are pure.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/chunk_key.h"
#include "engine/engine.h"
#include "server/request_parser.h"

namespace kvstash::server {

struct SemanticCacheOptions {
  float threshold = 0.0f;  // --semantic-cache: cosine at least this is near; 0 = semantic cache off
  std::size_t max_entries_per_namespace = 100000;  // beyond it new answers are not indexed (counted)
  std::size_t max_namespaces = 10000;              // beyond it the least recently used namespace is dropped
  // The index's memory (embeddings and graph links, counted by each namespace's capacity) at most;
  // beyond it the least recently used namespaces are dropped whole (their records stay in the
  // tiers and still answer exact hits). Default 256 MiB.
  std::size_t max_bytes = std::size_t{256} << 20;
  int candidates = 8;                              // nearest entries checked against the gates
};

// What a semantic lookup needs of one request; `embedding` is filled by the lookup.
struct SemanticQuery {
  cache::ChunkKey ns;
  std::vector<TokenId> text_tokens;  // the embedded text, tokenized without BOS or special tokens
  std::vector<std::string> literals;
  std::vector<float> embedding;
};

// The numbers (with the arithmetic between them: "2+3", "-4.5", "1,000") and quoted strings
// ("…", “…”, `…`, '…' not used as an apostrophe) of `text`, in order. Spaces inside a number run
// are dropped ("2 + 3" == "2+3"); quoted strings are kept byte for byte.
std::vector<std::string> extract_literals(std::string_view text);

// The request's semantic query, or nullopt with `why` set when a gate rules it out.
std::optional<SemanticQuery> semantic_query(const ParsedRequest& parsed, const GenerationRequest& request,
                                            const Tokenizer& tokenizer, const cache::ModelFingerprint& fingerprint,
                                            const std::string& engine_config, std::string* why);

class SemanticIndex {
 public:
  explicit SemanticIndex(SemanticCacheOptions options);
  ~SemanticIndex();

  // Indexes record_key under ns (a no-op if already there). False when it was not indexed (the
  // namespace or the index is full, or the dimensions differ from the namespace's).
  bool add(const cache::ChunkKey& ns, const cache::ChunkKey& record_key, std::span<const float> embedding,
           std::vector<std::string> literals);

  struct Candidate {
    cache::ChunkKey record_key;
    float cosine = 0.0f;
  };
  // The entries of ns with cosine >= threshold and equal literals, nearest first.
  // `refused_by_literals` counts the entries over the threshold that the literals gate refused.
  std::vector<Candidate> find(const cache::ChunkKey& ns, std::span<const float> embedding,
                              const std::vector<std::string>& literals, int* refused_by_literals) const;

  std::size_t size() const;
  std::size_t bytes() const;           // the index's estimated memory (see max_bytes)
  std::uint64_t evicted() const;       // namespaces dropped to stay within the bounds
  const SemanticCacheOptions& options() const { return options_; }

 private:
  struct Namespace;
  // Drops the least recently used namespace other than `keep`; false when there is none.
  bool evict_one_locked(const Namespace* keep);
  const SemanticCacheOptions options_;
  mutable std::mutex mu_;
  std::map<cache::ChunkKey, std::unique_ptr<Namespace>> namespaces_;  // guarded by mu_
  std::size_t entries_ = 0;                                           // guarded by mu_
  std::size_t bytes_ = 0;                                             // guarded by mu_
  std::uint64_t evicted_ = 0;                                         // guarded by mu_
  mutable std::uint64_t clock_ = 0;  // guarded by mu_: advances on each add and find (recency)
};

}  // namespace kvstash::server
