// The paged KV block pool and the in-engine prefix cache.
//
// The pool owns one array of `n_blocks` KV blocks (layout: model/model.h KvPoolView). A sequence
// holds blocks through a block table; each block has a reference count, so sequences that share a
// prefix share its blocks. A full block may be registered under its prefix key (the SHA-256 chain
// of ARCHITECTURE.md at block granularity); when its last reference goes, a registered block stays
// cached — its KV intact and findable by key — until the pool needs room, and then the least
// recently used cached block is evicted. Unregistered blocks return to the free list at once.
//
// Each block also carries its KV's taint (KvTaint): null when the KV was computed here from trusted
// KV or loaded trusted; else the unchecked producers it derives from (cache/chunk_codec.h
// Provenance). Trust flows downhill: a block computed after tainted blocks gets their taint.
//
// Thread safety: not thread safe; owned and used by the engine thread only.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/chunk_codec.h"
#include "cache/chunk_key.h"
#include "cache/kv_events.h"
#include "common/huge_pages.h"
#include "kvstash/status.h"
#include "model/model.h"

namespace kvstash {

// Null: trusted. Otherwise the KV is unchecked and derives from these producers (possibly none
// known, e.g. a version-1 chunk); at most cache::kMaxProvenanceProducers. Immutable once shared.
using KvTaint = std::shared_ptr<const std::vector<cache::ProducerKey>>;
// The taint of KV computed on both (a union; a when b adds nothing).
KvTaint merge_taint(const KvTaint& a, const KvTaint& b);
// The taint recorded in a chunk's provenance: null when it is trusted.
KvTaint taint_of(const cache::Provenance& provenance);
// The provenance of a chunk this engine stores from KV of this taint.
cache::Provenance provenance_of(const KvTaint& taint);

class BlockPool {
 public:
  BlockPool(const ModelConfig& config, int block_size, std::int64_t n_blocks);

  const KvPoolView& view() const { return view_; }
  std::int64_t n_blocks() const { return view_.n_blocks; }
  int block_size() const { return view_.block_size; }
  // Blocks that allocate() can hand out now: free ones plus cached ones it may evict.
  std::int64_t n_available() const { return static_cast<std::int64_t>(free_.size() + lru_.size()); }
  std::int64_t n_used() const { return n_blocks() - n_available(); }
  std::int64_t n_cached() const { return static_cast<std::int64_t>(lru_.size()); }

  // A block with reference count 1, taken from the free list or else by evicting the least
  // recently used cached block (which forgets its key). kResourceExhausted when neither exists.
  Expected<std::int32_t> allocate();
  void retain(std::int32_t block);
  // Drops one reference; at zero a registered block becomes cached (most recently used), an
  // unregistered one free.
  void release(std::int32_t block);
  // Releases a whole block table, last block first, and clears it. Tail first, so that a cached
  // prefix's first block is its most recently used: eviction eats a prefix from its end, and
  // what stays cached is always a usable prefix (lookups stop at the first missing block).
  void release_table(std::vector<std::int32_t>& table);

  // The block registered under `key`, retained for the caller; nullopt when there is none.
  std::optional<std::int32_t> lookup(const cache::ChunkKey& key);
  // Whether `key` is registered, without touching reference counts or recency.
  bool contains(const cache::ChunkKey& key) const { return by_key_.count(key) != 0; }
  // Registers a full block under `key`. If the key already names another block, nothing changes
  // (the existing block keeps serving it; this one stays private and is freed on release).
  void register_block(std::int32_t block, const cache::ChunkKey& key);

  // The block's bytes (all layers' K and V of its tokens): for export and import of KV.
  std::span<std::uint8_t> block_bytes(std::int32_t block);
  int ref_count(std::int32_t block) const { return meta_[static_cast<std::size_t>(block)].refs; }
  // Forgets a referenced block's prefix key (the prefix cache loses that entry), so that its
  // holder may write it. Precondition: ref_count(block) >= 1.
  void unregister(std::int32_t block);
  // Whether the block is registered under a prefix key (its KV must then stay that prefix's).
  bool is_registered(std::int32_t block) const { return meta_[static_cast<std::size_t>(block)].key.has_value(); }

  // The block's taint (reset to null when allocate() hands it out), and setting it.
  const KvTaint& taint(std::int32_t block) const { return meta_[static_cast<std::size_t>(block)].taint; }
  void set_taint(std::int32_t block, KvTaint taint) { meta_[static_cast<std::size_t>(block)].taint = std::move(taint); }
  // The prefix cache forgets every block whose taint names `producer` (a banned producer): cached
  // ones go back to the free list, referenced ones lose their key (their holders finish with them,
  // never registered again). Returns how many blocks it forgot.
  std::int64_t forget_derived_from(const cache::ProducerKey& producer);

  // KV events: while on, every key the pool starts or stops holding (register, eviction,
  // unregister) is appended to a list that take_key_changes() hands over (the engine publishes it
  // once per step). Off by default.
  void record_key_changes(bool on) { record_changes_ = on; }
  std::vector<cache::KvChange> take_key_changes() { return std::exchange(changes_, {}); }

 private:
  struct BlockMeta {
    int refs = 0;
    std::optional<cache::ChunkKey> key;
    std::list<std::int32_t>::iterator lru_pos;  // valid while cached (refs == 0 && key)
    KvTaint taint;
  };
  HugePageBuffer storage_;                  // the blocks, in huge pages where the kernel gives them
  std::vector<std::uint16_t> small_storage_;  // where it gives no mapping at all
  KvPoolView view_;
  std::vector<BlockMeta> meta_;
  std::vector<std::int32_t> free_;
  std::list<std::int32_t> lru_;  // cached blocks, least recently used first
  std::unordered_map<cache::ChunkKey, std::int32_t> by_key_;
  bool record_changes_ = false;
  std::vector<cache::KvChange> changes_;

  void key_changed(bool stored, const cache::ChunkKey& key) {
    if (record_changes_) changes_.push_back({stored, cache::KvSource::kPool, key});
  }
};

}  // namespace kvstash
