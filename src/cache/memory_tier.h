// MemoryTier: chunks held in this process's RAM, bounded in bytes, least recently used evicted.
//
// Bytes held (the sum of stored chunk sizes) never exceed capacity_bytes: a put evicts from the
// cold end until the new chunk fits, and a chunk larger than the whole capacity is refused
// (kResourceExhausted). get() copies the chunk out; get_shared() hands out the held buffer itself
// (immutable, kept alive by the pointer), so a load costs no copy and an eviction never
// invalidates a reader. put_shared() keeps the writer's buffer instead of copying it.
//
// Pins (pins.h): eviction passes over live pinned chunks (moving them to the warm end) and takes
// the coldest unpinned one; only when every chunk held is pinned does it evict a pinned one.
//
// Thread safety: all methods are safe from many threads; one mutex guards the map and LRU list.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/pins.h"
#include "cache/tier.h"

namespace kvstash::cache {

class MemoryTier final : public Tier {
 public:
  explicit MemoryTier(std::uint64_t capacity_bytes, PinOptions pins = {});

  std::string name() const override { return "memory"; }
  std::size_t contains(std::span<const ChunkKey> keys) override;
  std::vector<bool> holds(std::span<const ChunkKey> keys) override;
  Expected<Bytes> get(const ChunkKey& key) override;
  Expected<SharedBytes> get_shared(const ChunkKey& key) override;
  Status put(const ChunkKey& key, std::span<const std::uint8_t> bytes) override;
  Status put_shared(const ChunkKey& key, SharedBytes bytes) override;
  Status erase(const ChunkKey& key) override;
  void touch(std::span<const ChunkKey> keys) override;
  std::size_t pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl) override;
  TierStats stats() const override;
  Expected<std::vector<ChunkKey>> list_keys() override;
  Status clear() override;

 private:
  struct Entry {
    ChunkKey key;
    SharedBytes bytes;  // never null
  };
  using Lru = std::list<Entry>;  // front = most recently used

  void erase_locked(Lru::iterator it);
  // Evicts until `incoming` more bytes fit (the caller checked incoming <= capacity).
  void make_room_locked(std::uint64_t incoming);

  const std::uint64_t capacity_bytes_;
  TierCounters counters_;
  mutable std::mutex mu_;
  Lru lru_;                                             // guarded by mu_
  std::unordered_map<ChunkKey, Lru::iterator> index_;   // guarded by mu_
  std::uint64_t bytes_used_ = 0;                        // guarded by mu_
  mutable PinSet pins_;  // guarded by mu_; mutable: stats() drops expired pins first
};

}  // namespace kvstash::cache
