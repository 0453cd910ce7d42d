// Tier: the one interface every KV chunk store implements (memory, disk, redis; peers later).
//
// A tier maps a ChunkKey to the encoded chunk bytes (chunk_codec.h). It does not interpret them
// beyond what it needs to keep itself sound (the disk tier checks that a file is a whole chunk).
// Verifying a chunk against what the reader expects is the TieredStore's job.
//
// Errors: get() returns kNotFound for a miss; kUnavailable when the tier cannot be reached (redis
// down); kCorrupt when the tier found the stored bytes damaged (and has removed them). put() may
// return kResourceExhausted (chunk larger than the tier, disk writes disabled) or kUnavailable;
// callers on the request path treat every put failure as "not stored".
//
// Thread safety: every Tier implementation is safe to call from many threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/chunk_codec.h"
#include "cache/chunk_key.h"
#include "kvstash/status.h"

namespace kvstash::cache {

// A snapshot of a tier's counters. Counters only grow; entries/bytes_used are current levels.
struct TierStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t bytes_read = 0;      // chunk bytes returned by get()
  std::uint64_t bytes_written = 0;   // chunk bytes accepted by put()
  std::uint64_t entries = 0;         // chunks held now (0 where the tier cannot know cheaply: redis)
  std::uint64_t bytes_used = 0;      // bytes held now (same caveat)
  std::uint64_t capacity_bytes = 0;  // the bound; 0 = not bounded by this process
  std::uint64_t evictions = 0;
  std::uint64_t errors = 0;          // failed operations (i/o, unreachable, timeouts)
  std::uint64_t rejected_chunks = 0; // damaged or wrong chunks found and removed
  std::uint64_t loads = 0;           // successful get() calls timed below
  std::uint64_t load_latency_us_total = 0;
  std::uint64_t load_latency_us_max = 0;
  // Pins (pins.h; memory and disk tiers): chunks held and pinned now, their bytes, pins of chunks
  // not held yet, and the pins refused (past the pinned share) and expired so far.
  std::uint64_t pinned_entries = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t pin_intents = 0;
  std::uint64_t pins_refused = 0;
  std::uint64_t pins_expired = 0;
};

// Chunk bytes shared between a tier and its readers; immutable once shared.
using SharedBytes = std::shared_ptr<const Bytes>;

// Lock-free counters behind TierStats; each tier owns one.
class TierCounters {
 public:
  void hit(std::uint64_t bytes, std::chrono::steady_clock::duration latency);
  void miss() { misses_.fetch_add(1, std::memory_order_relaxed); }
  void written(std::uint64_t bytes) { bytes_written_.fetch_add(bytes, std::memory_order_relaxed); }
  void evicted() { evictions_.fetch_add(1, std::memory_order_relaxed); }
  void error() { errors_.fetch_add(1, std::memory_order_relaxed); }
  void rejected() { rejected_.fetch_add(1, std::memory_order_relaxed); }
  // Fills every counter field of `out`; the tier fills entries/bytes_used/capacity_bytes.
  void fill(TierStats& out) const;

 private:
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, bytes_read_{0}, bytes_written_{0};
  std::atomic<std::uint64_t> evictions_{0}, errors_{0}, rejected_{0};
  std::atomic<std::uint64_t> loads_{0}, latency_total_us_{0}, latency_max_us_{0};
};

class Tier {
 public:
  virtual ~Tier() = default;

  // "memory", "disk", "redis": the label used in logs and /metrics.
  virtual std::string name() const = 0;
  // How many of the leading keys this tier holds: keys[0..n) all present, keys[n] absent.
  virtual std::size_t contains(std::span<const ChunkKey> keys) = 0;
  // Which of `keys` this tier holds, one flag per key, in one round trip for all of them (memory
  // and disk: one lock; redis: one pipeline per node). A key the tier cannot answer for (redis
  // down) is reported absent. The default asks contains() key by key (tiers of tests).
  virtual std::vector<bool> holds(std::span<const ChunkKey> keys);
  // The chunk bytes stored under key (errors: see the file comment).
  virtual Expected<Bytes> get(const ChunkKey& key) = 0;
  // get() without a copy where the tier keeps chunks in this process: the memory tier hands out
  // the buffer it holds (immutable; the pointer keeps it alive after an eviction). Same errors as
  // get(). The default moves get()'s answer into a new shared buffer.
  virtual Expected<SharedBytes> get_shared(const ChunkKey& key);
  // Stores bytes under key, replacing any previous value; may evict others to stay in bounds.
  virtual Status put(const ChunkKey& key, std::span<const std::uint8_t> bytes) = 0;
  // put() of a buffer the caller shares: the memory tier keeps the pointer instead of a copy.
  // bytes must not be null. The default is put(key, *bytes).
  virtual Status put_shared(const ChunkKey& key, SharedBytes bytes);
  // Removes key; ok if it was absent.
  virtual Status erase(const ChunkKey& key) = 0;
  // Marks the keys this tier holds among `keys` as used just now, in order: the last one becomes
  // the most recently used. The TieredStore passes a prefix's keys tail first, so a prefix's head
  // outlives its tail and eviction never leaves a tail without its head. Tiers that do not choose
  // their own victims (redis evicts by its own policy) ignore it.
  virtual void touch(std::span<const ChunkKey> keys) {}
  // Pins `keys` for `ttl` (pins.h): a live pinned chunk is not evicted while the tier holds
  // unpinned ones it can evict instead; a key not held yet is pinned when it is put. Returns how
  // many of the keys are pinned now (held or intended); a pin past the tier's pinned share is
  // refused. Tiers that do not choose their own victims (redis evicts by its own policy) pin
  // nothing and return 0.
  virtual std::size_t pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl) { return 0; }
  virtual TierStats stats() const = 0;
  // True for a tier on other machines that strangers run (the peers tiers): the TieredStore runs
  // its gets on a bounded pool of their own and plans local-only loads without it, so a stalled
  // remote tier never delays the local ones (tiered_store.h).
  virtual bool remote() const { return false; }

  // Maintenance (the `kvstash cache` command), not the request path: every key held, and removal
  // of every kvstash chunk this tier holds.
  virtual Expected<std::vector<ChunkKey>> list_keys() = 0;
  virtual Status clear() = 0;

  // KV events (cache/kv_events.h): `observer` hears every key this tier starts (true) or stops
  // (false) holding, with the tier's lock held: it must be quick and must not call into the tier.
  // Set it before the tier is shared between threads. Tiers that cannot know (redis) never call it.
  using KeyObserver = std::function<void(bool held, const ChunkKey& key)>;
  void set_key_observer(KeyObserver observer) { key_observer_ = std::move(observer); }

 protected:
  void key_changed(bool held, const ChunkKey& key) const {
    if (key_observer_) key_observer_(held, key);
  }

 private:
  KeyObserver key_observer_;
};

}  // namespace kvstash::cache
