#include "cache/tiered_store.h"

#include <algorithm>
#include <functional>
#include <optional>

namespace kvstash::cache {

namespace {

// One tier get and how long the tier took over it (queueing on the pool not included, so a tier is
// judged slow by its own answer time, as with a get on the caller's thread).
struct TimedGet {
  Expected<Bytes> bytes;
  std::chrono::steady_clock::duration elapsed;
};

TimedGet timed_get(Tier& tier, const ChunkKey& key) {
  const auto start = std::chrono::steady_clock::now();
  Expected<Bytes> bytes = tier.get(key);
  return {std::move(bytes), std::chrono::steady_clock::now() - start};
}

// A get issued ahead of load()'s walk. Shared by the walk and the pool job, so the walk may abandon
// it (return, or take the chunk elsewhere) while the job still runs.
struct PendingGet {
  std::atomic<bool> cancelled{false};  // set by the walk: the job skips the get if not yet started
  std::mutex mu;
  std::condition_variable cv;
  std::optional<TimedGet> result;  // guarded by mu; set once by the job

  TimedGet wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [this] { return result.has_value(); });
    return std::move(*result);
  }
};

}  // namespace

// A fixed set of threads running queued jobs in order. Jobs queued when the pool is destroyed are
// dropped (their load() calls have all returned by then: a store is not destroyed under a call).
// Not common/thread_pool.h: that one is fork-join for kernels (one run at a time, spinning
// workers); these jobs block on i/o and come from many load() calls at once.
class TieredStore::GetPool {
 public:
  explicit GetPool(std::size_t threads) {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~GetPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Runs tier.get(key) on a pool thread; the walk waits on the returned entry.
  std::shared_ptr<PendingGet> submit(Tier& tier, const ChunkKey& key) {
    auto pending = std::make_shared<PendingGet>();
    {
      std::lock_guard lock(mu_);
      jobs_.push_back([pending, &tier, key] {
        TimedGet got = pending->cancelled.load(std::memory_order_relaxed)
                           ? TimedGet{not_found("cancelled"), {}}
                           : timed_get(tier, key);
        std::lock_guard done(pending->mu);
        pending->result.emplace(std::move(got));
        pending->cv.notify_all();
      });
    }
    cv_.notify_one();
    return pending;
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  bool stop_ = false;                       // guarded by mu_
  std::vector<std::thread> threads_;
};

TieredStore::TieredStore(std::vector<std::unique_ptr<Tier>> tiers, TieredStoreOptions options)
    : tiers_(std::move(tiers)),
      options_(options),
      rejected_by_tier_(new std::atomic<std::uint64_t>[tiers_.size()]()) {
  writer_ = std::thread([this] { writer_loop(); });
  if (options_.load_threads > 0 && options_.load_depth > 0 && !tiers_.empty()) {
    get_pool_ = std::make_unique<GetPool>(options_.load_threads);
  }
}

TieredStore::~TieredStore() {
  {
    std::lock_guard lock(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  writer_.join();
}

std::size_t TieredStore::lookup(std::span<const ChunkKey> keys) { return plan(keys).size(); }

std::vector<std::size_t> TieredStore::plan(std::span<const ChunkKey> keys) {
  // Tier by tier, each continuing from where the faster ones stopped: chunk i may live anywhere.
  std::vector<std::size_t> tier_of;
  bool progress = true;
  while (progress && tier_of.size() < keys.size()) {
    progress = false;
    for (std::size_t t = 0; t < tiers_.size(); ++t) {
      const std::size_t n = tiers_[t]->contains(keys.subspan(tier_of.size()));
      if (n > 0) {
        tier_of.insert(tier_of.end(), n, t);
        progress = true;
        break;
      }
    }
  }
  return tier_of;
}

std::vector<LoadedChunk> TieredStore::load(std::span<const ChunkMeta> expected) {
  std::vector<LoadedChunk> out;
  std::size_t deepest_tier = 0;  // the slowest tier that served a chunk of the run
  std::vector<bool> skipped(tiers_.size(), false);
  // The read-ahead: planned[i] is the tier expected to serve chunk i, ahead[i] its get in flight.
  std::vector<std::size_t> planned;
  if (get_pool_) {
    std::vector<ChunkKey> keys;
    keys.reserve(expected.size());
    for (const ChunkMeta& meta : expected) keys.push_back(meta.key);
    planned = plan(keys);
  }
  std::vector<std::shared_ptr<PendingGet>> ahead(planned.size());
  std::size_t issued = 0;  // chunks [0, issued) of the plan have had their get issued (or not needed)
  auto abandon = [&](std::size_t i) {
    if (i < ahead.size() && ahead[i]) {
      ahead[i]->cancelled.store(true, std::memory_order_relaxed);
      ahead[i].reset();
    }
  };

  auto skip = [&](std::size_t t) {
    skipped[t] = true;
    tier_skips_.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t i = 0; i < ahead.size(); ++i) {
      if (planned[i] == t) abandon(i);
    }
  };

  for (std::size_t i = 0; i < expected.size(); ++i) {
    for (; issued < planned.size() && issued < i + options_.load_depth; ++issued) {
      const std::size_t t = planned[issued];
      if (!skipped[t]) ahead[issued] = get_pool_->submit(*tiers_[t], expected[issued].key);
    }
    const ChunkMeta& meta = expected[i];
    bool found = false;
    for (std::size_t t = 0; t < tiers_.size() && !found; ++t) {
      if (skipped[t]) continue;
      const bool from_ahead = i < ahead.size() && ahead[i] && planned[i] == t;
      TimedGet got = from_ahead ? ahead[i]->wait() : timed_get(*tiers_[t], meta.key);
      if (from_ahead) ahead[i].reset();
      const bool slow = got.elapsed > options_.tier_timeout;
      auto& bytes = got.bytes;
      if (!bytes) {
        const StatusCode code = bytes.status().code();
        // Unreachable or failing: do not wait on it again this request.
        if ((code != StatusCode::kNotFound && code != StatusCode::kCorrupt) || slow) skip(t);
        continue;
      }
      if (slow) skip(t);
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
        for (std::size_t f = 1; f < t; ++f) enqueue({meta.key, shared, f, nullptr});
      }
      deepest_tier = std::max(deepest_tier, t);
      out.push_back(std::move(chunk));
      chunks_loaded_.fetch_add(1, std::memory_order_relaxed);
      found = true;
    }
    abandon(i);  // served by a faster tier than planned, or not at all
    if (!found) break;
  }
  for (std::size_t i = 0; i < ahead.size(); ++i) abandon(i);  // past the end of the run
  if (!out.empty()) {
    // The gets (and promotions) made the run's tail the most recently used: turn that around.
    auto tail_first = std::make_shared<std::vector<ChunkKey>>();
    for (std::size_t i = out.size(); i-- > 0;) tail_first->push_back(expected[i].key);
    for (std::size_t t = 0; t <= deepest_tier; ++t) {
      // Tier 0 and the served tiers at once; tiers with promotions queued, after those puts.
      const bool queued = t > 0 && t < deepest_tier;
      if (queued) {
        enqueue({ChunkKey{}, nullptr, t, tail_first});
      } else {
        tiers_[t]->touch(*tail_first);
      }
    }
  }
  return out;
}

Status TieredStore::store(const ChunkMeta& meta, std::span<const std::uint8_t> payload,
                          std::span<const ChunkKey> predecessors) {
  auto encoded = encode_chunk(meta, payload, options_.encode);
  if (!encoded) return encoded.status();
  if (tiers_.empty()) return Status::ok();
  auto shared = std::make_shared<const Bytes>(std::move(*encoded));
  std::shared_ptr<const std::vector<ChunkKey>> tail_first;
  if (!predecessors.empty()) {
    auto keys = std::make_shared<std::vector<ChunkKey>>(predecessors.rbegin(), predecessors.rend());
    tail_first = std::move(keys);
  }
  if (!tiers_[0]->put(meta.key, *shared).is_ok()) write_errors_.fetch_add(1, std::memory_order_relaxed);
  if (tail_first) tiers_[0]->touch(*tail_first);
  for (std::size_t t = 1; t < tiers_.size(); ++t) enqueue({meta.key, shared, t, tail_first});
  return Status::ok();
}

void TieredStore::enqueue(WriteJob job) {
  const std::uint64_t size = job.bytes ? job.bytes->size() : 0;
  {
    std::lock_guard lock(queue_mu_);
    // A job costs its bytes once per queued tier write; with shared bytes this over-counts, which
    // errs on the side of a smaller queue.
    if (queue_bytes_ + size > options_.write_queue_bytes) {
      if (size > 0) writes_dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_bytes_ += size;
    queue_.push_back(std::move(job));
  }
  if (size > 0) writes_queued_.fetch_add(1, std::memory_order_relaxed);
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
    Tier& tier = *tiers_[job.tier_index];
    if (job.bytes && !tier.put(job.key, *job.bytes)) write_errors_.fetch_add(1, std::memory_order_relaxed);
    if (job.touch_after) tier.touch(*job.touch_after);
    lock.lock();
    queue_bytes_ -= job.bytes ? job.bytes->size() : 0;
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
