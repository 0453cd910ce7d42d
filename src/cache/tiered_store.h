// TieredStore: the KV chunk store the engine talks to; tiers ordered fastest first.
//
// load() walks a prefix's chunks in order and, for each, asks the tiers fastest first; chunk i may
// come from any tier. It stops at the first chunk no tier can supply, so what it returns is the
// longest contiguous run of leading chunks. Every chunk is decoded against the meta the caller
// expects before it is returned: a chunk that fails is a miss, is erased from the tier that served
// it, and is counted (that tier's rejected_chunks). A tier that errors (redis down) or answers
// slower than tier_timeout is skipped for the rest of that request.
//
// Gets run ahead of that walk: load() first plans which tier holds each leading chunk
// (contains(), as lookup() does) and keeps up to load_depth of the planned gets in flight on a
// small pool of I/O threads owned by the store, so a disk tier sees several reads at once instead
// of one file after another (and a memory tier's copies overlap the walk's checksums). The walk
// itself is unchanged: it still asks the tiers fastest first for chunk i, takes the planned tier's
// answer from its get in flight, verifies, promotes, erases and stops exactly as it would with one
// get at a time. Gets issued ahead for chunks past the end of the run, or to a tier skipped since,
// are abandoned (cancelled if not started); one that did start still counts in that tier's own
// stats (a hit, an error, or a damaged file the tier itself removed).
//
// What load() finds below the fastest tier is promoted: put into tier 0 at once (memory: a copy),
// and queued for the other faster tiers. Every tier involved is then touched with the run's keys
// tail first (Tier::touch), so the run's head is its most recently used chunk everywhere. store() puts a new chunk into tier 0 at once and queues
// it for every slower tier. The queue is bounded in bytes and served by one writer thread; when
// full, writes are dropped and counted, never waited for.
//
// Thread safety: load/store/lookup/stats are safe from many threads. The tiers are owned by the
// store and must outlive nothing else. Lock order: queue_mu_ and the I/O pool's lock are never held
// together; tiers lock themselves.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "cache/tier.h"

namespace kvstash::cache {

struct TieredStoreOptions {
  std::uint64_t write_queue_bytes = std::uint64_t{256} << 20;  // write-behind bound, 256 MiB
  std::chrono::milliseconds tier_timeout{500};  // a get slower than this skips the tier after it
  EncodeOptions encode;                         // compression of stored chunks (off by default)
  // Threads that run load()'s gets ahead of its walk; 0 = one get at a time on the caller's thread.
  // 4: reading the 63 files of a 4,032-token prefix from 4 threads took the disk tier from 0.52 to
  // 0.70-0.88 GB/s on the dev VM (BENCHMARKS.md, issue 4).
  std::size_t load_threads = 4;
  std::size_t load_depth = 8;  // gets in flight per load() call (bounds the memory read ahead)
};

// One loaded chunk. view.payload points into bytes (or into view.owned when compressed).
struct LoadedChunk {
  Bytes bytes;
  ChunkView view;
  std::size_t tier_index = 0;  // which tier served it
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
  std::uint64_t queue_bytes = 0;      // bytes waiting in the queue now
};

class TieredStore {
 public:
  // tiers: fastest first; may be empty (then nothing is ever found).
  TieredStore(std::vector<std::unique_ptr<Tier>> tiers, TieredStoreOptions options = {});
  ~TieredStore();  // finishes the queued writes, then stops the writer
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // How many leading chunks some tier claims to hold (contains(), no data moved, not verified):
  // for scheduling and routing. load() may still return fewer.
  std::size_t lookup(std::span<const ChunkKey> keys);

  // The longest run of leading chunks, each verified against expected[i] (its key included).
  std::vector<LoadedChunk> load(std::span<const ChunkMeta> expected);

  // Encodes and stores a new chunk (meta.key names it). `predecessors` are the keys of the chunks
  // before it in its prefix, in prefix order: every tier then holds them as more recently used
  // than the new chunk, so eviction takes a prefix's tail before its head. Never blocks on slow
  // tiers. Fails only if the chunk cannot be encoded.
  Status store(const ChunkMeta& meta, std::span<const std::uint8_t> payload,
               std::span<const ChunkKey> predecessors = {});

  // Blocks until the write-behind queue is empty and the writer idle (tests, shutdown).
  void flush();

  std::size_t tier_count() const { return tiers_.size(); }
  Tier& tier(std::size_t i) { return *tiers_[i]; }
  // Per tier, fastest first, with the rejections this store made added to the tier's own.
  std::vector<TierReport> tier_stats() const;
  StoreStats stats() const;

 private:
  // A put (bytes set) and/or a touch of keys after it; one writer runs them in queue order.
  struct WriteJob {
    ChunkKey key;
    std::shared_ptr<const Bytes> bytes;  // null: touch only
    std::size_t tier_index;
    std::shared_ptr<const std::vector<ChunkKey>> touch_after;  // null: none
  };
  class GetPool;  // the I/O threads behind load(); tiered_store.cc
  void enqueue(WriteJob job);
  void writer_loop();
  // Per leading chunk, the tier lookup() credits with it (fastest tier holding the start of a run).
  std::vector<std::size_t> plan(std::span<const ChunkKey> keys);

  const std::vector<std::unique_ptr<Tier>> tiers_;
  const TieredStoreOptions options_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> rejected_by_tier_;
  std::atomic<std::uint64_t> chunks_loaded_{0}, tier_skips_{0}, writes_queued_{0};
  std::atomic<std::uint64_t> writes_dropped_{0}, write_errors_{0};

  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_;   // writer waits for work or stop
  std::condition_variable idle_cv_;    // flush() waits for an empty queue
  std::deque<WriteJob> queue_;         // guarded by queue_mu_
  std::uint64_t queue_bytes_ = 0;      // guarded by queue_mu_
  bool writing_ = false;               // a job is being written; guarded by queue_mu_
  bool stop_ = false;                  // guarded by queue_mu_
  std::thread writer_;
  // Declared after tiers_, so destroyed (its threads joined) before the tiers they read.
  std::unique_ptr<GetPool> get_pool_;  // null when load_threads or load_depth is 0
};

}  // namespace kvstash::cache
