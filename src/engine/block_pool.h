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
// Window layers (a model with sliding-window layers: gemma3's local layers, gpt-oss's even ones,
// Mistral's): the pool keeps two groups of storage (model/model.h KvPoolView, "split"). A block id
// is the unit of block tables, references, keys and LRU as above, and names the block's full-layer
// KV; each allocated block also gets a window-layer block (window_of), counted by the holders that
// still need it (window_holders: a holder whose window has moved past the block calls drop_window;
// see engine/sequence.h window_dropped). When no holder needs it any more the window part goes back
// to the window group's free list at once, while the block itself (full layers) stays in the
// sequence's table and may stay registered: a prefix hit can use such a block only where no later
// token's window reaches it (BlockPool::has_window; engine.cc count_pool_hits). A cached block
// (no references) keeps its window part until it is evicted, so a finished conversation's last
// window stays reusable. The window group has as many blocks as the full one: every window block
// belongs to a distinct live block, so it never runs out first. docs/chunk-format.md has the
// record (v3) that the store keeps for such blocks.
//
// Pins (prompt caching: a cache_control breakpoint, prompt_cache_retention, a stored Responses
// turn): a key pinned until a time keeps its cached block out of eviction while the pool has an
// unpinned cached block to evict instead; with none, the pool evicts a pinned block rather than
// fail an allocation (a pin never starves a running request). A key may be pinned before any
// block holds it; a lookup hit restarts its time; pinned keys are at most a share of the pool's
// blocks (pin_max_share), pins past it are refused. Time is the pool's pin clock, which the
// engine advances once a step (set_pin_clock), so tests drive it.
//
// Fresh memory: the first write into a never-used page pays its fault (a huge page's clear; in a
// VM, the host's backing too), which on the project's VMs made a 39 MB install from the store cost
// 87 ms of the engine thread against 6 ms into used memory, in a step that held every stream. So
// the pool has its whole storage backed by a Prefaulter (common/prefaulter.h) from
// start_prefault() on, on a thread of the idle scheduling class, from the low blocks that are
// handed out first upward. About a second later the pool is resident (as a memset at start-up
// would make it; llama.cpp clears its KV buffer so), and no step pays a fault; a request that
// runs meanwhile shares the cores with it (a 6-second prefill ran 5-9 % slower) and faults what it
// has not reached. The engine starts it once idle for a moment, not at construction: a cold
// start's first request, sent as soon as the server listened, took its first token in 0.08-0.16 s
// beside the prefault in 3 of 6 starts, against 0.045-0.049 s in 6 of 6 without it. Backing only a reserve ahead of the blocks in
// use was tried and is worse: each refill lands on the steps that run beside it (a step 36 % over
// its prediction; paced at 256 MiB/s, three steps 20-40 % over).
//
// Thread safety: not thread safe; owned and used by the engine thread only (the prefaulter's
// thread touches no state of the pool, only its memory's page tables).
#pragma once

#include <chrono>
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
#include "common/prefaulter.h"
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
  // Bytes from the start of the (full-layer) storage backed ahead of use so far (the header's
  // "Fresh memory"); 0 where the pool did not map its storage.
  std::size_t prefaulted_bytes() const { return prefault_ ? prefault_->populated() : 0; }
  // Starts backing the whole storage on the prefaulter's thread (once; later calls do nothing).
  void start_prefault();
  // Started, and all of the storage backed (or the kernel cannot: then nothing more will be).
  bool prefault_done() const;
  int block_size() const { return view_.block_size; }
  // Blocks that allocate() can hand out now: free ones plus cached ones it may evict.
  std::int64_t n_available() const { return static_cast<std::int64_t>(free_.size() + lru_.size()); }
  std::int64_t n_free() const { return static_cast<std::int64_t>(free_.size()); }  // never cached
  std::int64_t n_used() const { return n_blocks() - n_available(); }
  std::int64_t n_cached() const { return static_cast<std::int64_t>(lru_.size()); }

  // A block with reference count 1, taken from the free list or else by evicting the least
  // recently used cached block (which forgets its key). kResourceExhausted when neither exists.
  // With a split, the block comes with a window part that its caller needs (one window holder).
  Expected<std::int32_t> allocate();
  // One more reference; with a split and the block's window part present, one more window holder
  // unless need_window is false (a holder whose window has passed the block already).
  void retain(std::int32_t block, bool need_window = true);
  // Drops one reference (and, with need_window, its window holder); at zero a registered block
  // becomes cached (most recently used), an unregistered one free. A window part no holder needs
  // is freed.
  void release(std::int32_t block, bool need_window = true);
  // Releases a whole block table, last block first, and clears it. Tail first, so that a cached
  // prefix's first block is its most recently used: eviction eats a prefix from its end, and
  // what stays cached is always a usable prefix (lookups stop at the first missing block). The
  // first n_window_dropped blocks are released without their window holder (drop_window done).
  void release_table(std::vector<std::int32_t>& table, int n_window_dropped = 0);

  // Window layers (split pools, above). Whether the pool is split; whether the block still has its
  // window part (always without a split); the holder no longer needs the block's window part
  // (freed when it was the last holder that did). Precondition of drop_window: the caller holds
  // the block and counted as a window holder (retained with need_window while it had one).
  bool split() const { return view_.split(); }
  bool has_window(std::int32_t block) const { return !split() || window_of_[static_cast<std::size_t>(block)] >= 0; }
  void drop_window(std::int32_t block);
  // Whether the block registered under `key` has its window part (false when none is registered).
  bool key_has_window(const cache::ChunkKey& key) const;
  // Window-group blocks allocated to referenced blocks (not counting those of cached blocks, which
  // eviction reclaims): the window group's "used".
  std::int64_t n_window_used() const;
  // The layers in each group: full-attention layers and window layers (all and 0 without a split).
  int n_full_layers() const { return view_.group_layers; }
  int n_window_layers() const { return view_.window_group_layers; }

  // A block's KV as one record (its full layers, then its window layers with a split: kv_format
  // v3, docs/chunk-format.md), for export, import and copy-on-write. copy_out fails (false) when
  // the block's window part was freed; copy_in writes a block allocated with its window part.
  std::size_t record_bytes() const;
  bool copy_out(std::int32_t block, std::uint8_t* out) const;
  void copy_in(std::int32_t block, const std::uint8_t* in);

  // The block registered under `key`, retained for the caller; nullopt when there is none.
  std::optional<std::int32_t> lookup(const cache::ChunkKey& key);
  // Whether `key` is registered, without touching reference counts or recency.
  bool contains(const cache::ChunkKey& key) const { return by_key_.count(key) != 0; }
  // Registers a full block under `key`. If the key already names another block, nothing changes
  // (the existing block keeps serving it; this one stays private and is freed on release).
  void register_block(std::int32_t block, const cache::ChunkKey& key);

  // The block's bytes in the full group (all layers' K and V of its tokens without a split).
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

  // Pins (above). pin() pins or refreshes each key for `ttl` from the pin clock and returns how
  // many it pinned; a new key past the share is refused (counted in pins_refused()).
  using PinClock = std::chrono::steady_clock;
  void set_pin_max_share(double share) { pin_max_share_ = share; }
  std::size_t pin(std::span<const cache::ChunkKey> keys, std::chrono::seconds ttl);
  // Advances the pin clock; pins whose time has passed are dropped.
  void set_pin_clock(PinClock::time_point now);
  std::int64_t n_pinned_keys() const { return static_cast<std::int64_t>(pins_.size()); }
  // Cached blocks (no references) whose key is pinned.
  std::int64_t n_pinned_cached() const;
  std::int64_t pins_refused() const { return pins_refused_; }
  // Pinned cached blocks evicted because nothing else was left to evict.
  std::int64_t pinned_evictions() const { return pinned_evictions_; }

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
  // The window group (empty without a split): per block its window block (-1: none) and how many
  // of its holders still need it; the window group's storage and free list; the layer mapping
  // the view points into; windows of cached blocks.
  std::vector<std::int32_t> window_of_;
  std::vector<int> window_holders_;
  HugePageBuffer window_storage_;
  std::vector<std::uint16_t> small_window_storage_;
  // Back the storage's pages ahead of their first use (block_pool.cc). Declared after the storage:
  // they stop before it is unmapped.
  std::unique_ptr<Prefaulter> prefault_, window_prefault_;
  bool prefault_started_ = false;
  std::vector<std::int32_t> window_free_;
  std::vector<std::int16_t> layer_index_;
  std::vector<std::uint8_t> layer_window_;
  std::int64_t n_window_cached_ = 0;
  bool record_changes_ = false;

  struct Pin {
    std::chrono::seconds ttl;
    PinClock::time_point until;
  };
  std::unordered_map<cache::ChunkKey, Pin> pins_;
  PinClock::time_point pin_now_ = PinClock::now();
  PinClock::time_point next_expiry_ = PinClock::time_point::max();
  double pin_max_share_ = 0.5;
  std::int64_t pins_refused_ = 0;
  std::int64_t pinned_evictions_ = 0;
  bool pinned(const BlockMeta& m) const { return m.key && pins_.count(*m.key) != 0; }

  void setup_split(const ModelConfig& config);
  void free_window(std::int32_t block);
  std::vector<cache::KvChange> changes_;

  void key_changed(bool stored, const cache::ChunkKey& key) {
    if (record_changes_) changes_.push_back({stored, cache::KvSource::kPool, key});
  }
};

}  // namespace kvstash
