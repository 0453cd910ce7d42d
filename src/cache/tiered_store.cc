#include "cache/tiered_store.h"

namespace kvstash::cache {

TieredStore::TieredStore(std::vector<std::unique_ptr<Tier>> tiers, TieredStoreOptions options)
    : tiers_(std::move(tiers)),
      options_(options),
      rejected_by_tier_(new std::atomic<std::uint64_t>[tiers_.size()]()) {
  writer_ = std::thread([this] { writer_loop(); });
}

TieredStore::~TieredStore() {
  {
    std::lock_guard lock(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  writer_.join();
}

std::size_t TieredStore::lookup(std::span<const ChunkKey> keys) {
  // Tier by tier, each continuing from where the faster ones stopped: chunk i may live anywhere.
  std::size_t found = 0;
  bool progress = true;
  while (progress && found < keys.size()) {
    progress = false;
    for (const auto& tier : tiers_) {
      std::size_t n = tier->contains(keys.subspan(found));
      if (n > 0) {
        found += n;
        progress = true;
        break;
      }
    }
  }
  return found;
}

std::vector<LoadedChunk> TieredStore::load(std::span<const ChunkMeta> expected) {
  std::vector<LoadedChunk> out;
  std::vector<bool> skipped(tiers_.size(), false);
  for (const ChunkMeta& meta : expected) {
    bool found = false;
    for (std::size_t t = 0; t < tiers_.size() && !found; ++t) {
      if (skipped[t]) continue;
      const auto start = std::chrono::steady_clock::now();
      auto bytes = tiers_[t]->get(meta.key);
      const bool slow = std::chrono::steady_clock::now() - start > options_.tier_timeout;
      if (!bytes) {
        const StatusCode code = bytes.status().code();
        if (code != StatusCode::kNotFound && code != StatusCode::kCorrupt) {
          skipped[t] = true;  // unreachable or failing: do not wait on it again this request
          tier_skips_.fetch_add(1, std::memory_order_relaxed);
        } else if (slow) {
          skipped[t] = true;
          tier_skips_.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      if (slow) {
        skipped[t] = true;
        tier_skips_.fetch_add(1, std::memory_order_relaxed);
      }
      LoadedChunk chunk;
      chunk.bytes = std::move(*bytes);
      chunk.tier_index = t;
      auto view = decode_chunk(chunk.bytes, meta);
      if (!view) {
        (void)tiers_[t]->erase(meta.key);  // a wrong chunk is never served, nor kept
        rejected_by_tier_[t].fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      chunk.view = std::move(*view);
      if (t > 0) {
        auto shared = std::make_shared<const Bytes>(chunk.bytes);
        (void)tiers_[0]->put(meta.key, *shared);
        for (std::size_t f = 1; f < t; ++f) enqueue(meta.key, shared, f);
      }
      out.push_back(std::move(chunk));
      chunks_loaded_.fetch_add(1, std::memory_order_relaxed);
      found = true;
    }
    if (!found) break;
  }
  return out;
}

Status TieredStore::store(const ChunkMeta& meta, std::span<const std::uint8_t> payload) {
  auto encoded = encode_chunk(meta, payload, options_.encode);
  if (!encoded) return encoded.status();
  if (tiers_.empty()) return Status::ok();
  auto shared = std::make_shared<const Bytes>(std::move(*encoded));
  if (!tiers_[0]->put(meta.key, *shared).is_ok()) write_errors_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t t = 1; t < tiers_.size(); ++t) enqueue(meta.key, shared, t);
  return Status::ok();
}

void TieredStore::enqueue(const ChunkKey& key, const std::shared_ptr<const Bytes>& bytes,
                          std::size_t tier_index) {
  {
    std::lock_guard lock(queue_mu_);
    // A job costs its bytes once per queued tier write; with shared bytes this over-counts, which
    // errs on the side of a smaller queue.
    if (queue_bytes_ + bytes->size() > options_.write_queue_bytes) {
      writes_dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_bytes_ += bytes->size();
    queue_.push_back({key, bytes, tier_index});
  }
  writes_queued_.fetch_add(1, std::memory_order_relaxed);
  queue_cv_.notify_one();
}

void TieredStore::writer_loop() {
  std::unique_lock lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    WriteJob job = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    Status st = tiers_[job.tier_index]->put(job.key, *job.bytes);
    if (!st) write_errors_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    queue_bytes_ -= job.bytes->size();
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void TieredStore::flush() {
  std::unique_lock lock(queue_mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

std::vector<TierReport> TieredStore::tier_stats() const {
  std::vector<TierReport> out;
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    TierReport r{tiers_[t]->name(), tiers_[t]->stats()};
    r.stats.rejected_chunks += rejected_by_tier_[t].load(std::memory_order_relaxed);
    out.push_back(std::move(r));
  }
  return out;
}

StoreStats TieredStore::stats() const {
  StoreStats s;
  s.chunks_loaded = chunks_loaded_.load(std::memory_order_relaxed);
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    s.chunks_rejected += rejected_by_tier_[t].load(std::memory_order_relaxed);
  }
  s.tier_skips = tier_skips_.load(std::memory_order_relaxed);
  s.writes_queued = writes_queued_.load(std::memory_order_relaxed);
  s.writes_dropped = writes_dropped_.load(std::memory_order_relaxed);
  s.write_errors = write_errors_.load(std::memory_order_relaxed);
  std::lock_guard lock(queue_mu_);
  s.queue_bytes = queue_bytes_;
  return s;
}

}  // namespace kvstash::cache
