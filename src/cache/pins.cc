#include "cache/pins.h"

#include <algorithm>

namespace kvstash::cache {

PinSet::PinSet(PinOptions options, std::uint64_t capacity_bytes)
    : options_(std::move(options)),
      max_pinned_bytes_(static_cast<std::uint64_t>(std::clamp(options_.max_share, 0.0, 1.0) *
                                                   static_cast<double>(capacity_bytes))) {}

std::chrono::steady_clock::time_point PinSet::now() const {
  return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
}

bool PinSet::fits(std::uint64_t size) const { return pinned_bytes_ + size <= max_pinned_bytes_; }

bool PinSet::pin(const ChunkKey& key, std::chrono::seconds ttl, std::int64_t held_size) {
  const auto deadline = now() + ttl;
  auto it = pins_.find(key);
  if (it == pins_.end()) {
    if (pins_.size() >= options_.max_intents) expire();
    const bool room = held_size < 0 ? true : fits(static_cast<std::uint64_t>(held_size));
    if (pins_.size() >= options_.max_intents || !room) {
      ++refused_;
      return false;
    }
    Pin p{deadline, ttl, held_size};
    if (held_size >= 0) {
      pinned_bytes_ += static_cast<std::uint64_t>(held_size);
      ++pinned_entries_;
    }
    pins_.emplace(key, p);
    return true;
  }
  Pin& p = it->second;
  if (p.held_bytes < 0 && held_size >= 0) {  // an intent whose chunk came without room at its put
    if (!fits(static_cast<std::uint64_t>(held_size))) {
      ++refused_;
      return false;
    }
    p.held_bytes = held_size;
    pinned_bytes_ += static_cast<std::uint64_t>(held_size);
    ++pinned_entries_;
  }
  p.deadline = std::max(p.deadline, deadline);
  p.ttl = std::max(p.ttl, ttl);
  return true;
}

void PinSet::on_put(const ChunkKey& key, std::uint64_t size) {
  auto it = pins_.find(key);
  if (it == pins_.end()) return;
  Pin& p = it->second;
  if (p.deadline <= now()) {
    on_drop(key);
    pins_.erase(it);
    ++expired_;
    return;
  }
  if (p.held_bytes >= 0) {  // replaced by a new put of the same key
    pinned_bytes_ -= static_cast<std::uint64_t>(p.held_bytes);
    --pinned_entries_;
    p.held_bytes = -1;
  }
  if (!fits(size)) {
    ++refused_;  // stays an intent: a later pin() may find room
    return;
  }
  p.held_bytes = static_cast<std::int64_t>(size);
  pinned_bytes_ += size;
  ++pinned_entries_;
}

void PinSet::on_drop(const ChunkKey& key) {
  auto it = pins_.find(key);
  if (it == pins_.end() || it->second.held_bytes < 0) return;
  pinned_bytes_ -= static_cast<std::uint64_t>(it->second.held_bytes);
  --pinned_entries_;
  it->second.held_bytes = -1;
}

void PinSet::on_hit(const ChunkKey& key) {
  auto it = pins_.find(key);
  if (it == pins_.end()) return;
  const auto t = now();
  if (it->second.deadline > t) it->second.deadline = std::max(it->second.deadline, t + it->second.ttl);
}

bool PinSet::pinned(const ChunkKey& key) const {
  auto it = pins_.find(key);
  return it != pins_.end() && it->second.held_bytes >= 0 && it->second.deadline > now();
}

void PinSet::expire() {
  const auto t = now();
  for (auto it = pins_.begin(); it != pins_.end();) {
    if (it->second.deadline > t) {
      ++it;
      continue;
    }
    if (it->second.held_bytes >= 0) {
      pinned_bytes_ -= static_cast<std::uint64_t>(it->second.held_bytes);
      --pinned_entries_;
    }
    it = pins_.erase(it);
    ++expired_;
  }
}

void PinSet::clear() {
  pins_.clear();
  pinned_bytes_ = 0;
  pinned_entries_ = 0;
}

PinStats PinSet::stats() const {
  PinStats s;
  s.pinned_entries = pinned_entries_;
  s.pinned_bytes = pinned_bytes_;
  s.intents = pins_.size() - pinned_entries_;
  s.pins_refused = refused_;
  s.pins_expired = expired_;
  return s;
}

}  // namespace kvstash::cache
