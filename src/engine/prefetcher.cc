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
                                                std::vector<cache::ChunkMeta> tail_candidates,
                                                std::vector<std::size_t> tail_at,
                                                std::chrono::steady_clock::time_point deadline) {
  auto job = std::make_shared<PrefetchJob>();
  job->deadline = deadline;
  job->metas = std::move(metas);
  job->tail_candidates = std::move(tail_candidates);
  job->tail_at = std::move(tail_at);
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(job);
  }
  cv_.notify_one();
  return job;
}

// One plan for the request: the full chunks and, in the same round per tier, the longest stored
// tail where their run ends; then one load of what the plan found, cut at the job's deadline.
void Prefetcher::load(PrefetchJob& job) {
  std::vector<cache::ChunkKey> keys;
  std::vector<cache::TailCandidate> tails;
  for (const auto& m : job.metas) keys.push_back(m.key);
  for (std::size_t i = 0; i < job.tail_candidates.size() && i < job.tail_at.size(); ++i) {
    tails.push_back({job.tail_candidates[i].key, job.tail_at[i]});
  }
  const cache::LoadPlan plan = store_.plan_load(keys, tails);
  if (plan.empty()) return;
  std::vector<cache::ChunkMeta> expected(job.metas.begin(), job.metas.begin() + static_cast<std::ptrdiff_t>(plan.full_chunks));
  if (plan.tail) expected.push_back(job.tail_candidates[*plan.tail]);
  auto loaded = store_.load(expected, plan, job.deadline);
  if (plan.tail && loaded.size() == expected.size()) {
    job.tail = std::move(loaded.back());
    loaded.pop_back();
  } else if (loaded.size() > plan.full_chunks) {
    loaded.resize(plan.full_chunks);
  }
  job.chunks = std::move(loaded);
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
