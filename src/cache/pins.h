// PinSet: which of a tier's chunks are pinned, until when, and how many bytes the pins hold.
//
// A pin asks a tier to keep a chunk for a time (a prompt-caching breakpoint, a stored response's
// conversation: docs/prompt-caching.md). The tier's LRU never evicts a live pinned chunk while it
// holds unpinned ones it could evict instead; the pinned bytes are bounded by a share of the tier's
// capacity (PinOptions::max_share), so pins can never starve the unpinned traffic: a pin past the
// share is refused (counted), not granted by evicting other pins.
//
// A pin may name a chunk the tier does not hold yet (its KV is still being prefilled, or waits in
// the store's write-behind queue): the pin is kept as an intent and takes hold when the chunk is put,
// if the share allows it then. Every pin, held or intended, expires at its deadline; a hit (a get or
// a touch of the key) restarts its TTL, as Anthropic's cache_control refreshes on each read.
// Intents are bounded in number (max_intents): more are refused.
//
// Keys are the store's chunk keys, which already carry the tenant's salt: a pin is per tenant.
//
// Thread safety: none; the owning tier calls it under its own mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "cache/chunk_key.h"

namespace kvstash::cache {

using PinClock = std::function<std::chrono::steady_clock::time_point()>;

struct PinOptions {
  // Pinned bytes at most, as a share of the tier's capacity (--pin-max-share). 0.5: half the tier
  // stays for the unpinned traffic whatever the clients ask.
  double max_share = 0.5;
  // Pins (held or intended) at most.
  std::size_t max_intents = 65536;
  // The time source; null = std::chrono::steady_clock::now (tests pass a fake clock).
  PinClock clock{};
};

struct PinStats {
  std::uint64_t pinned_entries = 0;  // chunks held and pinned now
  std::uint64_t pinned_bytes = 0;
  std::uint64_t intents = 0;         // pins of chunks not held (yet)
  std::uint64_t pins_refused = 0;    // past the share or the intent bound (counter)
  std::uint64_t pins_expired = 0;    // counter
};

class PinSet {
 public:
  PinSet(PinOptions options, std::uint64_t capacity_bytes);

  // Pins `key` for `ttl` from now (a pin already there keeps the later deadline and the longer TTL).
  // `held_size`: the chunk's size if the tier holds it, or -1. False if refused (the share, the
  // intent bound); a refused pin leaves an existing one as it was.
  bool pin(const ChunkKey& key, std::chrono::seconds ttl, std::int64_t held_size);
  // The tier now holds `key` (a put of `size` bytes): an intent takes hold if the share allows.
  void on_put(const ChunkKey& key, std::uint64_t size);
  // The tier no longer holds `key` (erased, evicted, damaged). The pin stays an intent until its
  // deadline, so a later put of the same chunk is pinned again.
  void on_drop(const ChunkKey& key);
  // A hit: a live pin's TTL restarts.
  void on_hit(const ChunkKey& key);
  // True while `key` is held, pinned and its deadline has not passed.
  bool pinned(const ChunkKey& key) const;
  // Drops every pin whose deadline has passed (the chunks stay, as unpinned ones).
  void expire();
  void clear();
  PinStats stats() const;

 private:
  struct Pin {
    std::chrono::steady_clock::time_point deadline;
    std::chrono::seconds ttl{0};
    std::int64_t held_bytes = -1;  // >= 0: held and counted in pinned_bytes_
  };
  std::chrono::steady_clock::time_point now() const;
  bool fits(std::uint64_t size) const;

  const PinOptions options_;
  const std::uint64_t max_pinned_bytes_;
  std::unordered_map<ChunkKey, Pin> pins_;
  std::uint64_t pinned_bytes_ = 0;
  std::uint64_t pinned_entries_ = 0;
  std::uint64_t refused_ = 0;
  std::uint64_t expired_ = 0;
};

}  // namespace kvstash::cache
