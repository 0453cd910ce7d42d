#include "cache/memory_tier.h"

namespace kvstash::cache {

MemoryTier::MemoryTier(std::uint64_t capacity_bytes, PinOptions pins)
    : capacity_bytes_(capacity_bytes), pins_(std::move(pins), capacity_bytes) {}

std::size_t MemoryTier::contains(std::span<const ChunkKey> keys) {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  while (n < keys.size() && index_.count(keys[n])) ++n;
  return n;
}

std::vector<bool> MemoryTier::holds(std::span<const ChunkKey> keys) {
  std::vector<bool> out(keys.size());
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = index_.count(keys[i]) > 0;
  return out;
}

Expected<SharedBytes> MemoryTier::get_shared(const ChunkKey& key) {
  const auto start = std::chrono::steady_clock::now();
  SharedBytes out;
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      counters_.miss();
      return not_found("memory tier: " + key.hex());
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    pins_.on_hit(key);
    out = it->second->bytes;
  }
  counters_.hit(out->size(), std::chrono::steady_clock::now() - start);
  return out;
}

Expected<Bytes> MemoryTier::get(const ChunkKey& key) {
  auto shared = get_shared(key);
  if (!shared) return shared.status();
  return Bytes(**shared);  // outside the lock: the copy is the slow part
}

Status MemoryTier::put(const ChunkKey& key, std::span<const std::uint8_t> bytes) {
  if (bytes.size() > capacity_bytes_) {
    return resource_exhausted("memory tier: chunk of " + std::to_string(bytes.size()) + " bytes exceeds capacity");
  }
  return put_shared(key, std::make_shared<const Bytes>(bytes.begin(), bytes.end()));  // copy outside the lock
}

Status MemoryTier::put_shared(const ChunkKey& key, SharedBytes bytes) {
  const std::size_t size = bytes->size();
  if (size > capacity_bytes_) {
    return resource_exhausted("memory tier: chunk of " + std::to_string(size) + " bytes exceeds capacity");
  }
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) erase_locked(it->second);
  make_room_locked(size);
  bytes_used_ += size;
  lru_.push_front(Entry{key, std::move(bytes)});
  index_[key] = lru_.begin();
  pins_.on_put(key, size);
  key_changed(true, key);
  counters_.written(size);
  return Status::ok();
}

Status MemoryTier::erase(const ChunkKey& key) {
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) erase_locked(it->second);
  return Status::ok();
}

void MemoryTier::touch(std::span<const ChunkKey> keys) {
  std::lock_guard lock(mu_);
  for (const ChunkKey& key : keys) {
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      pins_.on_hit(key);
    }
  }
}

std::size_t MemoryTier::pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl) {
  std::lock_guard lock(mu_);
  pins_.expire();
  std::size_t n = 0;
  for (const ChunkKey& key : keys) {
    auto it = index_.find(key);
    const std::int64_t held = it == index_.end() ? -1 : static_cast<std::int64_t>(it->second->bytes->size());
    if (pins_.pin(key, ttl, held)) ++n;
  }
  return n;
}

void MemoryTier::make_room_locked(std::uint64_t incoming) {
  if (bytes_used_ + incoming <= capacity_bytes_) return;
  pins_.expire();
  // Live pinned chunks at the cold end move to the warm end; after a whole lap of them only
  // pinned chunks are left, and the coldest goes.
  std::size_t passed = 0;
  while (bytes_used_ + incoming > capacity_bytes_) {
    auto cold = std::prev(lru_.end());
    if (passed < lru_.size() && pins_.pinned(cold->key)) {
      lru_.splice(lru_.begin(), lru_, cold);
      ++passed;
      continue;
    }
    erase_locked(cold);
    counters_.evicted();
  }
}

void MemoryTier::erase_locked(Lru::iterator it) {
  pins_.on_drop(it->key);
  bytes_used_ -= it->bytes->size();
  key_changed(false, it->key);
  index_.erase(it->key);
  lru_.erase(it);
}

TierStats MemoryTier::stats() const {
  TierStats s;
  counters_.fill(s);
  std::lock_guard lock(mu_);
  s.entries = index_.size();
  s.bytes_used = bytes_used_;
  s.capacity_bytes = capacity_bytes_;
  pins_.expire();
  const PinStats p = pins_.stats();
  s.pinned_entries = p.pinned_entries;
  s.pinned_bytes = p.pinned_bytes;
  s.pin_intents = p.intents;
  s.pins_refused = p.pins_refused;
  s.pins_expired = p.pins_expired;
  return s;
}

Expected<std::vector<ChunkKey>> MemoryTier::list_keys() {
  std::lock_guard lock(mu_);
  std::vector<ChunkKey> keys;
  for (const auto& e : lru_) keys.push_back(e.key);
  return keys;
}

Status MemoryTier::clear() {
  std::lock_guard lock(mu_);
  for (const Entry& e : lru_) key_changed(false, e.key);
  lru_.clear();
  index_.clear();
  pins_.clear();
  bytes_used_ = 0;
  return Status::ok();
}

}  // namespace kvstash::cache
