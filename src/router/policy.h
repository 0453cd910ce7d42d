// Routing policies: which worker gets a request (docs/router.md).
//
// cache-aware: for every worker that takes requests,
//
//     score = w_pool·pool_tokens + w_memory·memory_tokens + w_disk·disk_tokens − w_load·load_tokens
//
//   pool/memory/disk_tokens: the prompt tokens the worker holds for this request's prefix, each
//   counted once at the fastest place that holds it (router/prefix_index.h); load_tokens: the work
//   the router has in flight at that worker, Σ (prompt tokens not predicted cached + max_tokens)
//   over its open requests. The highest score wins; a tie (scores within 0.5 token) goes to the
//   lower load_tokens, then the fewer open requests, then the next in round-robin order.
// round-robin: the next worker in turn. least-loaded: the lowest load_tokens (ties as above).
// prefix-hash: rendezvous hashing of the prompt's block key at hash_prefix_tokens (default 256:
//   the key names the first 256 tokens and the cache salt; a shorter prompt's last full block; the
//   whole prompt when it has no full block) over the workers' URLs: one prefix, one worker, while
//   it is up; when it is not, the next in that prefix's order. Hashing 256 tokens rather than the
//   first block keeps conversations that share a system prompt apart.
//
// Thread safety: choose_worker is a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "router/prefix_index.h"

namespace kvstash::router {

enum class Policy { kCacheAware, kRoundRobin, kLeastLoaded, kPrefixHash };

const char* policy_name(Policy p);  // "cache-aware", ...
std::optional<Policy> policy_from_name(const std::string& name);

struct ScoreWeights {
  double pool = 1.0;    // per prompt token held in the engine pool (no load at all)
  double memory = 0.9;  // per token in the memory tier (a copy into the pool)
  double disk = 0.7;    // per token on disk (a read, then a copy)
  // Per token of work in flight at the worker. 0.1: a held prefix wins unless its holder has 10x
  // its tokens queued. 0.5 moved conversations off busy holders so often that the multi-turn
  // benchmark's cached-token ratio fell to 92% of one worker's (BENCHMARKS.md, issue 12).
  double load = 0.1;
};

// One worker that may take the request, as the chooser sees it.
struct Candidate {
  std::string url;
  PrefixMatch match;             // cache-aware: what it holds of this prompt
  std::int64_t load_tokens = 0;  // see the file comment
  int in_flight = 0;             // open requests the router sent it
};

struct Choice {
  std::size_t index = 0;      // into the candidates
  double score = 0;           // cache-aware: the winner's score
  const char* decision = "";  // why: "cache_hit", "least_loaded", "round_robin", "prefix_hash"
};

double score(const ScoreWeights& w, const Candidate& c);

// Chooses among `candidates` (non-empty). `turn` is a counter the caller advances per request
// (round-robin order and the last tie-break). `prefix_hash` is the request's hash (prefix-hash).
Choice choose_worker(Policy policy, const ScoreWeights& weights, const std::vector<Candidate>& candidates,
                     std::uint64_t turn, std::uint64_t prefix_hash);

// The prefix-hash policy's hash of a request: FNV-1a over its block key at hash_prefix_tokens (see
// the file comment), or over its tokens and salt when it has no full block.
// The hash a request's prompt_cache_key routes by (with its tenant's salt: two tenants' equal keys
// are different keys).
std::uint64_t cache_key_hash(const std::string& key, const std::string& salt);

std::uint64_t prefix_hash_of(const RequestKeys& keys, const std::vector<std::int32_t>& tokens, const std::string& salt,
                             int hash_prefix_tokens = 256, int block_size = 16);

}  // namespace kvstash::router
