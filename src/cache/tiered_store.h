// TieredStore: the KV chunk store the engine talks to; tiers ordered fastest first.
//
// A load is planned once, then run. plan_load() asks every tier once which of a prefix's keys it
// holds (Tier::holds: one lock for memory and disk, one pipelined round trip per node for redis;
// a slower tier is only asked about the keys no faster tier holds) and credits each leading chunk
// to the fastest tier holding it; the plan ends at the first chunk no tier holds. Given tail
// candidates (the block-chain keys of a prompt's partial chunks at each block boundary), it also
// finds, in the same round trips, the longest stored tail that continues the run where it ends: a
// tail stored as such, or a prefix alias (prefix_alias.h) naming the leading blocks of a stored
// chunk, which load() follows to that chunk. load(expected, plan) then gets each chunk from its
// planned tier, in order, with up to load_depth gets in flight on a small pool of I/O threads
// owned by the store (a disk tier sees several reads at once; a redis tier uses several pooled
// connections). Every chunk is decoded against the meta the caller expects before it is returned:
// a chunk that fails is erased from the tier that served it and counted (that tier's
// rejected_chunks). A chunk its planned tier no longer has (evicted since the plan), or serves
// damaged, is asked of the other tiers fastest first before the run ends. A tier that errors (redis
// down) or answers slower than tier_timeout is skipped for the rest of that load. The run stops at
// the first chunk no tier supplies, and at the deadline: what returns is always the longest
// contiguous run of verified leading chunks.
//
// Writes never run on the caller's thread. Every tier, tier 0 included, has its own write-behind
// queue, bounded in bytes and served by its own writer thread (a slow redis never delays memory
// writes). When a queue is full, its writes are dropped and counted (writes_dropped), never waited
// for. store() queues, per tier, the put of the new chunk followed by a touch of its predecessors
// (put, then touch, in the same queue), so a prefix's head outlives its tail. load() queues the
// promotion of what it found below the fastest tier (into every faster tier) and then a touch of
// the run's keys tail first in every tier involved, so the run's head is its most recently used
// chunk everywhere. Until tier 0's writer has put a stored or promoted chunk, plan_load() and
// load() find it in tier 0's queue (read-your-writes: a prefix stored, or loaded from a slower
// tier, is found by the next request at once and never fetched from that slower tier again).
//
// Remote tiers (Tier::remote(): the peers tiers, machines strangers run) never delay the local
// ones: their gets run on a pool of their own (remote_threads), at most remote_queue of them
// waiting; a get that finds that queue full is a miss at once (remote_dropped), never a wait, and a
// load's walk waits on a remote get only until the load's deadline. plan_load(..., kLocal) plans
// without asking remote tiers at all (no DHT lookup), and run_remote() runs a caller's job that
// plans and loads with them on a small lane of its own (bounded too; refused when full), so the
// threads that serve local hits (the engine's prefetcher, the response cache's workers) never
// wait on a peer: they plan locally first and hand what the local tiers lack to that lane.
//
// Thread safety: every public method is safe from many threads (the engine thread and prefetch
// threads alike). The tiers are owned by the store. Lock order: no two of the store's locks (each
// queue's mutex, pending_mu_, the I/O pool's) are ever held together; tiers lock themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "cache/prefix_alias.h"
#include "cache/tier.h"

namespace kvstash::cache {

struct TieredStoreOptions {
  std::uint64_t write_queue_bytes = std::uint64_t{256} << 20;  // write-behind bound per tier, 256 MiB
  std::chrono::milliseconds tier_timeout{500};  // a get slower than this skips the tier after it
  EncodeOptions encode;                         // compression of stored chunks (off by default)
  // With every stored chunk of n blocks, also write the n-1 prefix aliases of its leading blocks
  // (store()'s leading_block_keys), so a prompt that diverges inside the chunk can use its head.
  bool prefix_aliases = true;
  // Threads that run load()'s gets ahead of its walk; 0 = one get at a time on the caller's thread.
  // 4: reading the 63 files of a 4,032-token prefix from 4 threads took the disk tier from 0.52 to
  // 0.70-0.88 GB/s on the dev VM (BENCHMARKS.md, issue 4).
  std::size_t load_threads = 4;
  std::size_t load_depth = 8;  // gets in flight per load() call (bounds the memory read ahead)
  // Remote tiers (Tier::remote()): threads running their gets, and gets waiting at most (one
  // more is a miss at once, counted in remote_dropped).
  std::size_t remote_threads = 4;
  std::size_t remote_queue = 32;
  // run_remote(): jobs running at once, and jobs waiting for a thread at most (one more is
  // refused). 0 waiting: a job that would wait behind stalled ones is refused at once instead.
  std::size_t remote_lane_threads = 4;
  std::size_t remote_lane_queue = 0;
  // The longest pin a client may ask for (--pin-max-ttl): longer ones are cut to it. 1 h:
  // Anthropic's longest cache_control TTL.
  std::chrono::seconds max_pin_ttl{3600};
};


// What plan_load() asks: every tier, or only the local ones (no remote tier, so no peer lookup).
enum class PlanScope { kAll, kLocal };

// One loaded chunk. view.payload points into *bytes (or into view.owned when compressed); bytes is
// never null and may be shared with the memory tier (immutable: read, never write through it).
struct LoadedChunk {
  SharedBytes bytes;
  ChunkView view;
  std::size_t tier_index = 0;  // which tier served it
  // The leading tokens of view that the load asked for: all of them (view's token_count), or fewer
  // when a tail was found through a prefix alias and view is the longer chunk it names.
  std::uint32_t use_tokens = 0;
  bool via_alias = false;
};

// A possible tail of a prefix (a partial chunk): its key is the block-chain key at its last block.
struct TailCandidate {
  ChunkKey key;
  // Where it would continue the run: the index, among plan_load()'s keys, of the full chunk it
  // stands in for (keys.size(): after the last one).
  std::size_t at = 0;
};

// The chunks a load will fetch and where each is, as plan_load() found them. Plain data: it may be
// made on one thread and used on another, and kept while the request waits.
struct LoadPlan {
  std::vector<ChunkKey> keys;      // in prefix order: the leading run of full chunks, then the tail
  std::vector<std::size_t> tiers;  // tiers[i]: the fastest tier that held keys[i] when planned
  std::size_t full_chunks = 0;     // keys[0, full_chunks) are full chunks (a prefix of the keys asked)
  // Index, among the tail candidates passed to plan_load(), of the tail found (then keys.back());
  // empty if none was. Its `at` is full_chunks.
  std::optional<std::size_t> tail;
  // kLocal: made without the remote tiers; load() then asks no remote tier either.
  PlanScope scope = PlanScope::kAll;
  std::size_t size() const { return keys.size(); }
  bool empty() const { return keys.empty(); }
};

struct TierReport {
  std::string name;
  TierStats stats;
};

struct StoreStats {
  std::uint64_t chunks_loaded = 0;
  std::uint64_t chunks_rejected = 0;  // failed decode, erased (sum over tiers)
  std::uint64_t tier_skips = 0;       // tiers skipped in a request for an error or slowness
  std::uint64_t writes_queued = 0;    // tier writes accepted into the write-behind queue
  std::uint64_t writes_dropped = 0;   // tier writes refused because the queue was full
  std::uint64_t write_errors = 0;     // tier puts that failed (disk full, redis down, ...)
  std::uint64_t queue_bytes = 0;      // bytes waiting in the queues now (a chunk queued for k tiers counts k times)
  std::uint64_t plans = 0;            // plan_load() calls (lookup() and the one-argument load() included)
  std::uint64_t load_deadlines = 0;   // loads cut short by their deadline
  std::uint64_t aliases_followed = 0; // tails loaded through a prefix alias
  std::uint64_t remote_queued = 0;    // remote-tier gets and run_remote() jobs waiting now
  std::uint64_t remote_dropped = 0;   // remote-tier gets that found their queue full (misses)
  std::uint64_t remote_lane_dropped = 0;  // run_remote() jobs refused (lane full)
};

// Whether `plan` (from plan_load(keys, tails)) already has everything any tier could add: every
// full chunk, and the longest tail candidate after the last one (if any was offered).
bool plan_is_complete(const LoadPlan& plan, std::size_t n_keys, std::span<const TailCandidate> tails);

class TieredStore {
 public:
  // tiers: fastest first; may be empty (then nothing is ever found).
  TieredStore(std::vector<std::unique_ptr<Tier>> tiers, TieredStoreOptions options = {});
  ~TieredStore();  // finishes the queued writes, then stops the writer
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  using Clock = std::chrono::steady_clock;

  // --- Planned loads (one plan per request; safe from any thread, e.g. a prefetch thread). ---

  // Which tier holds each leading chunk of `keys` (one Tier::holds() per tier, no data moved,
  // nothing verified), and the best tail held by some tier among the candidates whose `at` is
  // where that run ends: the last such in `tail_candidates` (list each `at`'s shortest first).
  // Tails after the last key are asked in the same round; those of an earlier `at` in a second
  // round, only when the run ends there. The
  // plan's size is what a load may return; the load may still return fewer (chunks evicted or
  // damaged since, an alias whose chunk is gone).
  // scope kLocal: remote tiers are not asked (no DHT lookup, nothing planned from peers).
  LoadPlan plan_load(std::span<const ChunkKey> keys, std::span<const TailCandidate> tail_candidates = {},
                     PlanScope scope = PlanScope::kAll);

  // Loads the chunks of `plan`, each verified against expected[i] (its key included; a tail found
  // as a prefix alias is verified as an alias, then its chunk against expected[i] with the
  // chunk's key and length, and returned with use_tokens = expected[i].token_count). expected
  // must follow plan.keys in order (expected[i].key == plan.keys[i]) and may stop early (load
  // fewer chunks than planned); a chunk whose key differs from the plan's, or past the plan, ends
  // the run. Returns the longest run of verified leading chunks, cut at `deadline` (the gets in
  // flight then are abandoned): at most expected.size(). Never throws, never returns a chunk
  // that failed verification.
  std::vector<LoadedChunk> load(std::span<const ChunkMeta> expected, const LoadPlan& plan,
                                Clock::time_point deadline = Clock::time_point::max());

  // --- The calls the engine makes today (kept: each plans once more). ---

  // plan_load(keys).size(): how many leading chunks some tier claims to hold (no data moved, not
  // verified): for scheduling and routing. load() may still return fewer.
  std::size_t lookup(std::span<const ChunkKey> keys);

  // load(expected, plan_load(keys of expected)): the longest run of leading chunks, each verified
  // against expected[i] (its key included).
  std::vector<LoadedChunk> load(std::span<const ChunkMeta> expected);

  // Encodes a new chunk (meta.key names it) and queues it for every tier; returns once queued (or
  // dropped where a queue is full): no tier i/o on the caller's thread. `predecessors` are the keys
  // of the chunks before it in its prefix, in prefix order: every tier then holds them as more
  // recently used than the new chunk (touched after the put, in the same queue), so eviction takes
  // a prefix's tail before its head. `leading_block_keys`: the block-chain keys at the end of each
  // of the chunk's blocks but the last (n-1 for n equal blocks); each gets a prefix alias, queued
  // after the chunk (unless options.prefix_aliases is off). Fails only if the chunk cannot be
  // encoded.
  Status store(const ChunkMeta& meta, std::span<const std::uint8_t> payload,
               std::span<const ChunkKey> predecessors = {}, std::span<const ChunkKey> leading_block_keys = {});

  // Pins `keys` (a prefix's chunks, stored or still to be stored) in every local tier for `ttl`,
  // cut to options.max_pin_ttl (Tier::pin, pins.h). Remote tiers (peers) are never pinned: a pin
  // asks this node to keep KV, not strangers. Returns the most keys any one tier pinned (0 when no
  // tier pins: redis only, or every pin refused by the tiers' pinned share).
  std::size_t pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl);

  // A chunk that decodes but for which `accept` returns false is treated like a damaged one: a
  // miss, erased from the tier that served it, counted as rejected. Peer sharing uses it so that a
  // chunk derived from a banned producer is never loaded (share/share_node.h). Safe to set any time.
  void set_chunk_filter(std::function<bool(const ChunkHeader&)> accept);

  // Blocks until every write-behind queue is empty and its writer idle (tests, shutdown).
  void flush();

  // The chunk stored or promoted under key that tier 0's writer has not put yet, or null: what a
  // reader of tier(0) directly (a peer serving this node's chunks) must also look at, since a chunk
  // is announced to peers by the slowest tier's writer, possibly before tier 0's has run.
  SharedBytes queued(const ChunkKey& key);

  // Whether some tier is remote (Tier::remote()).
  bool has_remote_tiers() const { return has_remote_; }
  // Runs job(true) on the remote lane (a few threads of the store's own, bounded queue): the place
  // for a plan and load that may wait on remote tiers. False (counted, job not run) when the lane's
  // queue is full. A job still queued when the store is destroyed runs as job(false) (the store is
  // going: finish without touching it).
  bool run_remote(std::function<void(bool run)> job);

  std::size_t tier_count() const { return tiers_.size(); }
  Tier& tier(std::size_t i) { return *tiers_[i]; }
  // Per tier, fastest first, with the rejections this store made added to the tier's own.
  std::vector<TierReport> tier_stats() const;
  StoreStats stats() const;

 private:
  // A put (bytes set) and/or a touch of keys after it, for one tier; its writer runs them in order.
  struct WriteJob {
    ChunkKey key;
    std::shared_ptr<const Bytes> bytes;                        // null: touch only
    std::shared_ptr<const std::vector<ChunkKey>> touch_after;  // null: none
  };
  struct WriteQueue;  // one tier's queue and writer thread; tiered_store.cc
  class GetPool;      // the I/O threads behind load(); tiered_store.cc
  // Queues job for tier t; false (and counted if it carried bytes) when that queue is full.
  bool enqueue(std::size_t t, WriteJob job);
  void writer_loop(std::size_t t);
  // tiers_[t]->get_shared(key), except that tier 0 first serves a chunk still in its write queue.
  Expected<SharedBytes> tier_get(std::size_t t, const ChunkKey& key);
  static constexpr std::size_t kNoTier = static_cast<std::size_t>(-1);
  // For each key, the fastest tier holding it (tier 0's queue counts as tier 0), or kNoTier: one
  // Tier::holds() per tier, each about the keys no faster tier holds.
  std::vector<std::size_t> fastest_holders(std::span<const ChunkKey> keys, PlanScope scope);
  // The chunk a prefix alias found for `expected` names, from the fastest tier that has it whole
  // and verified; nothing if it is gone or damaged everywhere.
  std::optional<LoadedChunk> follow_alias(const AliasTarget& target, const ChunkMeta& expected, const std::vector<bool>& skipped,
                                          Clock::time_point deadline);
  // Puts `bytes` under key into every tier's queue (tier 0's pending_ included).
  void queue_put(const ChunkKey& key, std::shared_ptr<const Bytes> bytes, std::shared_ptr<const std::vector<ChunkKey>> touch_after);
  // Queues the put of `bytes` under key for tier 0 and, until its writer has put it, serves it
  // from pending_ (not at all if the queue is full).
  void enqueue_readable(const ChunkKey& key, std::shared_ptr<const Bytes> bytes,
                        std::shared_ptr<const std::vector<ChunkKey>> touch_after);
  // Drops key from pending_ if it still maps to `bytes` (a later store of the same key keeps its own).
  void forget_pending(const ChunkKey& key, const Bytes* bytes);
  // After a load of keys tail_first (reversed): promotions queued, then touches, per tier.
  void after_load(const std::vector<LoadedChunk>& out, std::span<const ChunkMeta> expected);

  bool acceptable(const ChunkHeader& header);

  const std::vector<std::unique_ptr<Tier>> tiers_;
  const TieredStoreOptions options_;
  std::mutex filter_mu_;  // guards filter_ (copied out, never held while it runs)
  std::shared_ptr<const std::function<bool(const ChunkHeader&)>> filter_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> rejected_by_tier_;
  std::atomic<std::uint64_t> chunks_loaded_{0}, tier_skips_{0}, writes_queued_{0};
  std::atomic<std::uint64_t> writes_dropped_{0}, write_errors_{0}, plans_{0}, load_deadlines_{0}, aliases_followed_{0};
  // Chunks queued for tier 0 (stored or promoted) that its writer has not put yet; guarded by pending_mu_.
  std::mutex pending_mu_;
  std::unordered_map<ChunkKey, std::shared_ptr<const Bytes>> pending_;
  // One per tier; declared after tiers_ (destroyed first) and joined in the destructor.
  std::vector<std::unique_ptr<WriteQueue>> queues_;
  // Declared after tiers_, so destroyed (its threads joined) before the tiers they read.
  std::unique_ptr<GetPool> get_pool_;  // null when load_threads or load_depth is 0
  std::unique_ptr<GetPool> remote_pool_;  // remote tiers' gets; null without a remote tier
  std::unique_ptr<GetPool> remote_lane_;  // run_remote() jobs; null without a remote tier
  bool has_remote_ = false;
  std::atomic<std::uint64_t> remote_dropped_{0}, remote_lane_dropped_{0};
};

}  // namespace kvstash::cache
