// DiskTier: chunks as files in a directory, bounded in bytes, surviving restarts.
//
// Layout (docs/chunk-format.md, "disk layout"): <dir>/<first two hex digits of the key>/<hex>.kvc,
// 256 shard directories so no directory grows huge. Each file is exactly one encoded chunk.
//
// Crash safety: a put writes <shard>/.<hex>.tmp.<pid>.<n>, fsyncs it, then renames it over the
// final name, so a final name only ever holds a whole chunk from one writer. open() rebuilds the
// index by scanning: leftover temp files are deleted; a file whose header does not parse, whose
// name is not its key, or whose size is not the size its header declares, is deleted and counted
// (rejected_chunks). get() checks the whole chunk (header, length, payload checksum) before
// returning it; a damaged file is deleted, counted, and reported as kCorrupt.
//
// Reads: get() reads a file with FileSystem::read_file_once (page cache if there, else one
// O_DIRECT read): a chunk loaded is promoted to the memory tier, so it is not cached twice.
//
// Bounds: the bytes of indexed files plus in-flight writes never exceed capacity_bytes; space is
// reserved (evicting the least recently used files) before a write starts. Access time is the
// file's mtime, set on every hit, so the LRU order survives a restart.
//
// Pins (pins.h): eviction passes over live pinned files as the memory tier does. Pins are held in
// this process's memory: a restart keeps the files (and their LRU order) but not their pins, which
// the next request that asks for them sets again.
//
// Faults: any write error (ENOSPC, EIO, short write) disables writes for write_backoff, logged once;
// puts in that window return kResourceExhausted without touching the disk. Gets keep working.
//
// Thread safety: all methods are safe from many threads. mu_ guards the index; file i/o runs
// outside it.
#pragma once

#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/file_system.h"
#include "cache/pins.h"
#include "cache/tier.h"

namespace kvstash::cache {

struct DiskTierOptions {
  std::string dir;                                      // created if missing; required
  std::uint64_t capacity_bytes = std::uint64_t{50} << 30;  // --cache-disk-size, default 50 GiB
  std::chrono::milliseconds write_backoff{30000};       // writes off this long after a write error
  FileSystem* fs = nullptr;                             // nullptr = posix_file_system()
  PinOptions pins{};                                    // pins.h; pins live in this process only
};

class DiskTier final : public Tier {
 public:
  // Creates the directory if needed and rebuilds the index. Fails only if the directory cannot be
  // created or listed.
  static Expected<std::unique_ptr<DiskTier>> open(const DiskTierOptions& options);

  std::string name() const override { return "disk"; }
  std::size_t contains(std::span<const ChunkKey> keys) override;
  std::vector<bool> holds(std::span<const ChunkKey> keys) override;
  Expected<Bytes> get(const ChunkKey& key) override;
  // bytes must be an encoded chunk whose header names key (kInvalidArgument otherwise).
  Status put(const ChunkKey& key, std::span<const std::uint8_t> bytes) override;
  Status erase(const ChunkKey& key) override;
  // Moves the held keys to the front of the LRU in order and sets their files' mtimes in the same
  // order (outside the lock), so the order also survives a restart.
  void touch(std::span<const ChunkKey> keys) override;
  std::size_t pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl) override;
  TierStats stats() const override;
  Expected<std::vector<ChunkKey>> list_keys() override;
  Status clear() override;

  bool writes_disabled() const;
  std::string path_of(const ChunkKey& key) const;

 private:
  struct Entry {
    ChunkKey key;
    std::uint64_t size;
  };
  using Lru = std::list<Entry>;  // front = most recently used

  explicit DiskTier(const DiskTierOptions& options);
  Status scan();
  // Evicts until `incoming` more bytes fit; false if they never can. Requires mu_.
  bool make_room_locked(std::uint64_t incoming);
  void drop_locked(Lru::iterator it);  // index only
  void remove_file_and_entry(const ChunkKey& key);
  void disable_writes(const Status& why);

  const DiskTierOptions options_;
  FileSystem* const fs_;
  TierCounters counters_;
  mutable std::mutex mu_;
  Lru lru_;                                            // guarded by mu_
  std::unordered_map<ChunkKey, Lru::iterator> index_;  // guarded by mu_
  std::uint64_t bytes_used_ = 0;                       // indexed files; guarded by mu_
  std::uint64_t bytes_reserved_ = 0;                   // writes in flight; guarded by mu_
  std::uint64_t temp_counter_ = 0;                     // guarded by mu_
  std::chrono::steady_clock::time_point writes_off_until_{};  // guarded by mu_
  bool writes_off_logged_ = false;                     // guarded by mu_
  mutable PinSet pins_;  // guarded by mu_; mutable: stats() drops expired pins first
};

}  // namespace kvstash::cache
