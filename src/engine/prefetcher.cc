#include "engine/prefetcher.h"

namespace kvstash {

Prefetcher::Prefetcher(cache::TieredStore& store, int n_threads, std::function<void()> on_done)
    : store_(store), on_done_(std::move(on_done)) {
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::shared_ptr<PrefetchJob> Prefetcher::submit(std::vector<cache::ChunkMeta> metas,
                                                std::vector<cache::ChunkMeta> tail_candidates) {
  auto job = std::make_shared<PrefetchJob>();
  job->metas = std::move(metas);
  job->tail_candidates = std::move(tail_candidates);
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(job);
  }
  cv_.notify_one();
  return job;
}

void Prefetcher::load(PrefetchJob& job) {
  if (!job.metas.empty()) job.chunks = store_.load(job.metas);
  if (job.chunks.size() != job.metas.size()) return;  // the run broke off: no tail can follow it
  for (const cache::ChunkMeta& candidate : job.tail_candidates) {
    if (job.abandoned.load(std::memory_order_relaxed)) return;
    if (store_.lookup(std::span<const cache::ChunkKey>(&candidate.key, 1)) == 0) continue;
    auto loaded = store_.load(std::span<const cache::ChunkMeta>(&candidate, 1));
    if (!loaded.empty()) job.tail = std::move(loaded.front());
    return;
  }
}

void Prefetcher::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    std::shared_ptr<PrefetchJob> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    if (!job->abandoned.load(std::memory_order_relaxed)) load(*job);
    job->done.store(true, std::memory_order_release);
    if (on_done_) on_done_();
    job.reset();
    lock.lock();
  }
}

}  // namespace kvstash
