// What the router knows of one worker's KV: the keys its engine pool and its local tiers hold,
// kept exactly by applying the worker's KV events (server/kv_events_api.h, docs/kv-events.md),
// and how many of a request's prompt tokens they cover.
//
// A request's keys (RequestKeys) are computed once per distinct KV layout (WorkerKvInfo): block
// keys (the 16-token chain the pool registers) and chunk keys (the chunk_tokens chain the tiers
// store; a stored tail is keyed by its last block's key). The match mirrors what the engine does
// at admission (engine_store.cc): the pool's leading run of blocks first, then the tiers' leading
// run of full chunks and at most one tail where it ends (a stored tail, or a prefix alias of a
// stored chunk's leading blocks: both are block keys in the tiers' events); the last prompt token
// is always computed.
//
// Thread safety: PrefixIndex is safe from any thread (one mutex); compute_request_keys and
// WorkerKvInfo are plain values and pure functions.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/chunk_key.h"
#include "cache/kv_events.h"

namespace kvstash::router {

// A worker's KV layout, from its GET /v1/kv/info.
struct WorkerKvInfo {
  cache::ModelFingerprint fingerprint{};
  std::string kv_format;
  int block_size = 16;
  int chunk_tokens = 0;  // 0: no tiers
  bool operator==(const WorkerKvInfo&) const = default;
};

struct RequestKeys {
  int prompt_tokens = 0;
  int max_blocks = 0;  // full blocks the engine may reuse: (prompt_tokens - 1) / block_size
  std::vector<cache::ChunkKey> block_keys;  // max_blocks keys
  std::vector<cache::ChunkKey> chunk_keys;  // full chunks within max_blocks
};

RequestKeys compute_request_keys(const WorkerKvInfo& info, std::span<const std::int32_t> tokens,
                                 const std::string& cache_salt);

// Prompt tokens a worker holds for a request, by where: each token counted once, at the fastest
// place that holds it.
struct PrefixMatch {
  int pool_tokens = 0;
  int memory_tokens = 0;
  int disk_tokens = 0;
  int total() const { return pool_tokens + memory_tokens + disk_tokens; }
};

class PrefixIndex {
 public:
  // Forgets everything (a new snapshot follows).
  void clear();
  void apply(const cache::KvChange& change);
  void apply(std::span<const cache::KvChange> changes);
  PrefixMatch match(const WorkerKvInfo& info, const RequestKeys& keys) const;
  std::size_t size(cache::KvSource source) const;

 private:
  mutable std::mutex mu_;
  std::unordered_set<cache::ChunkKey> held_[cache::kKvSourceCount];  // guarded by mu_
};

}  // namespace kvstash::router
