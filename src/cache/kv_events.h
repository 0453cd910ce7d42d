// KvEventLog: which KV keys a node holds, as a numbered stream of `stored` / `removed` events and
// a snapshot of the current state, so that a router can keep an exact copy of each node's index
// (docs/kv-events.md, the wire form served at GET /v1/kv/events).
//
// Sources: the engine's pool (block keys: the 16-token block chain of ARCHITECTURE.md) and each
// local tier (memory, disk: full chunk keys and stored tails, which are keyed by their last
// block's key). Redis and peers are shared between nodes and not reported.
//
// Every event gets the next sequence number (1, 2, ...). The log keeps the last `retained` events
// in a ring; a subscriber that asks for events after a sequence number older than the ring gets a
// gap (kNotFound) and must start again from a snapshot. The log also keeps the set of keys held
// per source, so that a snapshot is the state after exactly snapshot.seq events. Events are
// deduplicated against that set: `stored` for a key already held, or `removed` for one not held,
// is dropped, so the stream replays into the snapshot exactly.
//
// Cost on the publisher's side: one short mutex hold per publish() call (a hash-set update and a
// ring slot per event) and a notify; no allocation once the ring is full, no I/O, no waiting on
// subscribers. The engine publishes its pool's events once per step, in one try_publish() call
// that never waits (when a subscriber holds the lock, the engine keeps them for its next step).
//
// Thread safety: every method is safe from any thread. Lock order: the log's mutex is a leaf
// (tiers call publish() with their own lock held; the log calls nothing outside itself).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "cache/chunk_key.h"
#include "kvstash/status.h"

namespace kvstash::cache {

enum class KvSource : std::uint8_t { kPool = 0, kMemory = 1, kDisk = 2 };
inline constexpr int kKvSourceCount = 3;

const char* kv_source_name(KvSource source);  // "pool", "memory", "disk"
// The source named `name`, or kInvalidArgument.
Expected<KvSource> kv_source_from_name(std::string_view name);

// One change, as published (seq is set by the log).
struct KvChange {
  bool stored = true;  // false: removed
  KvSource source = KvSource::kPool;
  ChunkKey key;
};

struct KvEvent {
  std::uint64_t seq = 0;
  KvChange change;
};

struct KvSnapshot {
  std::uint64_t seq = 0;  // the state after events 1..seq
  std::vector<ChunkKey> keys[kKvSourceCount];  // indexed by KvSource
};

struct KvEventLogOptions {
  std::size_t retained = 1 << 16;  // events kept for resuming subscribers (65,536: ~3 MB)
};

class KvEventLog {
 public:
  explicit KvEventLog(KvEventLogOptions options = {});

  // A random id of this log (16 hex digits), new at every start: sequence numbers are only
  // comparable within one epoch, so a subscriber resumes only when the epoch it saw is this one.
  const std::string& epoch() const { return epoch_; }

  void publish(const KvChange& change) { publish(std::span<const KvChange>(&change, 1)); }
  // Publishes the changes in order (one lock hold for all of them).
  void publish(std::span<const KvChange> changes);
  // publish() if the log's lock is free right now; false (nothing published) when a subscriber
  // holds it. For the engine thread, which never waits: it keeps the changes for its next step.
  bool try_publish(std::span<const KvChange> changes);

  // The number of the last event published (0 before any).
  std::uint64_t last_seq() const;
  KvSnapshot snapshot() const;
  // The events after `since`, at most `max`, oldest first. kNotFound (a gap: the subscriber starts
  // again from a snapshot) when events after `since` have already left the ring, or `since` is
  // beyond last_seq() (the node restarted and numbers from 1 again).
  Expected<std::vector<KvEvent>> events_after(std::uint64_t since, std::size_t max) const;
  // Waits until an event after `since` exists, the timeout passes, or close(). True if one exists.
  bool wait_after(std::uint64_t since, std::chrono::milliseconds timeout) const;
  // Wakes every waiter for good (shutdown); later waits return at once.
  void close();

 private:
  bool publish_locked(std::span<const KvChange> changes);  // true if any event was made

  const KvEventLogOptions options_;
  const std::string epoch_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<KvEvent> ring_;     // guarded by mu_; slot = (seq - 1) % retained
  std::uint64_t last_seq_ = 0;    // guarded by mu_
  bool closed_ = false;           // guarded by mu_
  std::unordered_set<ChunkKey> held_[kKvSourceCount];  // guarded by mu_
};

class TieredStore;
// Reports the keys of the store's memory and disk tiers to `log`: those held now as `stored`, then
// every change (Tier::set_key_observer). Call before the store is shared between threads; `log`
// must outlive the store's use. Other tiers (redis) are not reported.
void attach_tier_events(TieredStore& store, KvEventLog& log);

}  // namespace kvstash::cache
