#include "cache/tier.h"

namespace kvstash::cache {

void TierCounters::hit(std::uint64_t bytes, std::chrono::steady_clock::duration latency) {
  const auto us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(latency).count());
  hits_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
  loads_.fetch_add(1, std::memory_order_relaxed);
  latency_total_us_.fetch_add(us, std::memory_order_relaxed);
  std::uint64_t seen = latency_max_us_.load(std::memory_order_relaxed);
  while (us > seen && !latency_max_us_.compare_exchange_weak(seen, us, std::memory_order_relaxed)) {
  }
}

Expected<SharedBytes> Tier::get_shared(const ChunkKey& key) {
  auto bytes = get(key);
  if (!bytes) return bytes.status();
  return std::make_shared<const Bytes>(std::move(*bytes));
}

Status Tier::put_shared(const ChunkKey& key, SharedBytes bytes) { return put(key, *bytes); }

std::vector<bool> Tier::holds(std::span<const ChunkKey> keys) {
  std::vector<bool> out(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = contains(keys.subspan(i, 1)) == 1;
  return out;
}

void TierCounters::fill(TierStats& out) const {
  out.hits = hits_.load(std::memory_order_relaxed);
  out.misses = misses_.load(std::memory_order_relaxed);
  out.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  out.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  out.evictions = evictions_.load(std::memory_order_relaxed);
  out.errors = errors_.load(std::memory_order_relaxed);
  out.rejected_chunks = rejected_.load(std::memory_order_relaxed);
  out.loads = loads_.load(std::memory_order_relaxed);
  out.load_latency_us_total = latency_total_us_.load(std::memory_order_relaxed);
  out.load_latency_us_max = latency_max_us_.load(std::memory_order_relaxed);
}

}  // namespace kvstash::cache
