// The response cache in the request path: in front of the engine, behind validation. A
// deterministic request (temperature 0, or an explicit seed) whose signed record is in the store
// is answered from it; otherwise the engine answers and the whole answer is signed and stored.
//
// Key (docs/response-record.md): SHA-256 over "kvstash-response-key-v1", the model fingerprint,
// the cache salt, the engine's answer-changing settings (engine_config) and the canonical request:
// endpoint, prompt token ids after templating, temperature, top_k, top_p, the seed (only when
// temperature > 0: greedy answers do not depend on it), max_tokens, end-of-generation stop, stop
// token ids, stop strings, logprobs and top_logprobs, kv_budget, and the sampling knobs and the
// grammar when a request sets any (server/sampling_key.h). Not in the key: stream and
// stream_options, since a record renders every shape (a streamed miss serves a JSON hit and back).
//
// A record found is served only if it decodes, its output hash and signature verify, its producer
// is trusted and it is younger than the TTL; each rejection is counted by reason, and a damaged or
// forged record is erased from every tier. Records live in a TieredStore of their own (memory →
// disk → redis, its own bounds and TTL) so the KV chunk store is unchanged by them.
//
// Lookups run on the cache's own worker threads (a redis round trip never blocks an HTTP thread);
// stores are the TieredStore's write-behind. With peers in the store (a remote tier, share/
// response_peers_tier.h), a worker looks in the local tiers only (memory, disk, redis); a local
// miss goes to the store's remote lane (TieredStore::run_remote), which asks the peers and waits
// for them at most options.peer_timeout, then hands the request back to the workers (semantic
// fallback) on a miss. When that lane is full the peer lookup is a miss at once. So a local hit
// never waits on a peer, and a lookup never waits on peers past peer_timeout.
//
// Semantic hits (opt-in, server/semantic_cache.h, docs/semantic-cache.md): with
// options.semantic.threshold > 0, a lookup that misses exactly embeds the request's text and asks
// the per-namespace index for a near-duplicate whose record passes every gate and every check above;
// a stored answer also stores a signed semantic entry next to its record. The index is rebuilt from
// the entries in the store's tiers at construction.
//
// Thread safety: every method is safe from any thread. stop() before the HTTP layer goes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/response_record.h"
#include "cache/tiered_store.h"
#include "http/http_server.h"
#include "identity/identity.h"
#include "server/generation.h"
#include "server/request_parser.h"
#include "server/semantic_cache.h"

namespace kvstash::server {

struct ResponseCacheOptions {
  std::chrono::seconds ttl{0};  // --response-cache-ttl; records older than this are misses; 0 = none
  // Engine settings that change answers and are not in the request (the server's KV budget and
  // eviction policy), as text; hashed into every key.
  std::string engine_config;
  int lookup_threads = 2;  // workers running lookups (each may wait on redis)
  // Longest wait on peers for one record (plan and fetch), when the store has a peers tier.
  std::chrono::milliseconds peer_timeout{2000};
  // The semantic cache (--semantic-cache THRESHOLD); threshold 0 = off. `embed` computes the
  // embedding of a request's text (GenerationBackend::embed); required when on.
  SemanticCacheOptions semantic;
  std::function<Expected<std::vector<float>>(std::span<const TokenId>)> embed;
};

// What a lookup found: an exact hit, a semantic hit (record of a near-duplicate request), or a
// miss; `query` carries the semantic query with its embedding, for store_semantic() after a miss.
struct LookupResult {
  std::optional<cache::ResponseRecord> record;
  bool semantic = false;
  std::optional<SemanticQuery> query;
};

// Why a request is not looked up ("" = it is).
struct CachePlan {
  std::string bypass_reason;  // "no-cache header", "opted out", "sampled without seed", "n > 1"
  cache::ChunkKey key;
  bool cacheable() const { return bypass_reason.empty(); }
};

class ResponseCache {
 public:
  // `store` holds the records; `self` signs new ones; `trust` names the producers served.
  ResponseCache(std::unique_ptr<cache::TieredStore> store, const cache::ModelFingerprint& fingerprint,
                ResponseCacheOptions options, std::shared_ptr<const identity::NodeIdentity> self,
                std::shared_ptr<const identity::TrustList> trust);
  ~ResponseCache();  // stop()

  // Decides whether the request takes part and computes its key. `request` is the built
  // GenerationRequest (prompt after templating, max_tokens resolved).
  CachePlan plan(const ParsedRequest& parsed, const GenerationRequest& request, const http::Request& http) const;

  // Looks `key` up on a worker; `done` runs there with a verified record or nullopt (a miss, or
  // stopped). Counts the hit or miss.
  void lookup(const cache::ChunkKey& key, std::function<void(std::optional<cache::ResponseRecord>)> done);
  // The lookup itself, on the calling thread (what the workers run).
  std::optional<cache::ResponseRecord> lookup_now(const cache::ChunkKey& key);
  void count_bypass() { bypasses_.fetch_add(1, std::memory_order_relaxed); }

  // Semantic lookups: on when options.semantic.threshold > 0.
  bool semantic_enabled() const { return semantic_ != nullptr; }
  // The request's semantic query, or nullopt when the semantic cache is off or a gate rules the
  // request out (counted by reason).
  std::optional<SemanticQuery> semantic_query(const ParsedRequest& parsed, const GenerationRequest& request,
                                              const Tokenizer& tokenizer) const;
  // lookup() with a semantic fallback: on an exact miss and a query, embeds the text and serves
  // the nearest near-duplicate's record that passes every gate. `done` runs on a worker.
  void lookup(const cache::ChunkKey& key, std::optional<SemanticQuery> query, std::function<void(LookupResult)> done);
  // After store(key, ...): signs and stores the semantic entry of the answer, and indexes it.
  void store_semantic(const cache::ChunkKey& key, const SemanticQuery& query);
  // The index's entries (tests, logs).
  std::size_t semantic_entries() const { return semantic_ ? semantic_->size() : 0; }

  // Signs and queues the record of a finished answer (its applied events, outcome and text); an
  // answer computed on unchecked KV (Generation::computed_on_unchecked) is never stored.
  // `salted`: the request had a cache salt; the envelope says so, and peer sharing keeps such
  // records on this node unless --share-salted.
  void store(const cache::ChunkKey& key, const Generation& gen, const std::string& text, bool logprobs,
             bool salted = false);

  // The token events a record replays (Generation::replay), cached_tokens = prompt_tokens.
  static std::vector<TokenEvent> replay_events(const cache::ResponseRecord& record);

  // Prometheus text of the response cache's counters (appended to /metrics).
  std::string render_metrics() const;
  // Ends the workers; lookups queued and not started get nullopt. Idempotent.
  void stop();
  cache::TieredStore& records() { return *store_; }

 private:
  enum Rejection { kBadRecord, kBadSignature, kUntrusted, kRejectionKinds };
  void reject(const cache::ChunkKey& key, Rejection why, bool erase);
  void worker_loop();
  // A verified, trusted, unexpired record of `key`, or nullopt (rejections counted, not the miss).
  // `payload_bytes` (optional) gets the record's size when one is returned.
  // scope kLocal: the local tiers only; kAll: peers too, waited for until `deadline`.
  std::optional<cache::ResponseRecord> fetch(const cache::ChunkKey& key, std::size_t* payload_bytes = nullptr,
                                             cache::PlanScope scope = cache::PlanScope::kAll,
                                             std::chrono::steady_clock::time_point deadline =
                                                 std::chrono::steady_clock::time_point::max());
  // exact_done: the exact key was looked up already (a miss): only the semantic fallback is left.
  LookupResult run_lookup(const cache::ChunkKey& key, std::optional<SemanticQuery> query, bool exact_done = false);
  struct Job;
  // The exact lookup of `job` with the peers, on the store's remote lane; false when the lane is full.
  bool look_up_remotely(Job&& job);
  // Reads every semantic entry the tiers hold into the index (construction).
  void rebuild_semantic_index();
  std::string render_semantic_metrics() const;  // part of render_metrics() when on

  std::unique_ptr<cache::TieredStore> store_;
  const cache::ModelFingerprint fingerprint_;
  const ResponseCacheOptions options_;
  std::shared_ptr<const identity::NodeIdentity> self_;
  std::shared_ptr<const identity::TrustList> trust_;

  std::atomic<std::uint64_t> hits_{0}, misses_{0}, bypasses_{0}, expired_{0}, stores_{0}, store_errors_{0};
  std::atomic<std::uint64_t> bytes_served_{0}, bytes_stored_{0};
  std::atomic<std::uint64_t> not_stored_unchecked_{0};  // answers computed on unchecked KV
  std::atomic<std::uint64_t> rejected_[kRejectionKinds] = {};
  std::unique_ptr<SemanticIndex> semantic_;  // null: semantic cache off
  std::atomic<std::uint64_t> semantic_hits_{0}, semantic_refused_literals_{0}, semantic_not_indexed_{0};
  mutable std::atomic<std::uint64_t> semantic_skipped_{0};
  std::atomic<std::uint64_t> semantic_embed_errors_{0}, semantic_rebuilt_{0}, semantic_entries_rejected_{0};

  std::mutex mu_;
  std::condition_variable wake_;
  struct Job {
    cache::ChunkKey key;
    std::optional<SemanticQuery> query;
    std::function<void(LookupResult)> done;
    bool exact_done = false;  // the exact key missed locally and with the peers
  };
  std::deque<Job> jobs_;                    // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  int remote_in_flight_ = 0;                // jobs on the store's remote lane; guarded by mu_
  std::condition_variable remote_idle_;     // stop() waits for remote_in_flight_ == 0
  std::vector<std::thread> workers_;
};

}  // namespace kvstash::server
