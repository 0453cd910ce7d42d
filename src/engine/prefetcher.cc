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
  // Jobs on the remote lane finish within their deadline (and skip their load once stopping).
  std::unique_lock lock(remote_->mu);
  remote_->stopping = true;
  remote_->idle.wait(lock, [this] { return remote_->in_flight == 0; });
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

// Loads what `plan` found, cut at `deadline`, into the job (the full chunks, then the tail).
void Prefetcher::load_plan(PrefetchJob& job, cache::TieredStore& store, const cache::LoadPlan& plan,
                           std::chrono::steady_clock::time_point deadline) {
  if (plan.empty()) return;
  std::vector<cache::ChunkMeta> expected(job.metas.begin(), job.metas.begin() + static_cast<std::ptrdiff_t>(plan.full_chunks));
  if (plan.tail) expected.push_back(job.tail_candidates[*plan.tail]);
  auto loaded = store.load(expected, plan, deadline);
  std::optional<cache::LoadedChunk> tail;
  if (plan.tail && loaded.size() == expected.size()) {
    tail = std::move(loaded.back());
    loaded.pop_back();
  } else if (loaded.size() > plan.full_chunks) {
    loaded.resize(plan.full_chunks);
  }
  // Keep the longer run: a remote plan's load may end short of what the local one found.
  const bool longer = loaded.size() > job.chunks.size() || (loaded.size() == job.chunks.size() && tail && !job.tail);
  if (!longer) return;
  job.chunks = std::move(loaded);
  job.tail = std::move(tail);
}

// One plan for the request: the full chunks and, in the same round per tier, the longest stored
// tail where their run ends; then one load of what the plan found, cut at the job's deadline.
bool Prefetcher::load(const std::shared_ptr<PrefetchJob>& job) {
  std::vector<cache::ChunkKey> keys;
  std::vector<cache::TailCandidate> tails;
  for (const auto& m : job->metas) keys.push_back(m.key);
  for (std::size_t i = 0; i < job->tail_candidates.size() && i < job->tail_at.size(); ++i) {
    tails.push_back({job->tail_candidates[i].key, job->tail_at[i]});
  }
  if (!store_.has_remote_tiers()) {
    load_plan(*job, store_, store_.plan_load(keys, tails), job->deadline);
    return true;
  }
  const cache::LoadPlan local = store_.plan_load(keys, tails, cache::PlanScope::kLocal);
  load_plan(*job, store_, local, job->deadline);
  if (cache::plan_is_complete(local, keys.size(), tails)) return true;
  {
    std::lock_guard lock(remote_->mu);
    if (remote_->stopping) return true;
    ++remote_->in_flight;
  }
  auto remote = remote_;
  const bool handed = store_.run_remote([this, job, keys = std::move(keys), tails = std::move(tails), remote](bool run) {
    const auto now = std::chrono::steady_clock::now();
    bool stopping = false;
    {
      std::lock_guard lock(remote->mu);
      stopping = remote->stopping;
    }
    if (run && !stopping && !job->abandoned.load(std::memory_order_relaxed) && now < job->deadline) {
      // 80% of the time left: the job is done before the engine gives up on it at its deadline.
      const auto deadline = job->deadline == std::chrono::steady_clock::time_point::max()
                                ? job->deadline  // no deadline (a time_point this far out overflows arithmetic)
                                : now + (job->deadline - now) * 4 / 5;
      load_plan(*job, store_, store_.plan_load(keys, tails), deadline);
    }
    job->done.store(true, std::memory_order_release);
    if (on_done_) on_done_();
    std::lock_guard lock(remote->mu);
    --remote->in_flight;
    remote->idle.notify_all();
  });
  if (handed) return false;
  std::lock_guard lock(remote_->mu);  // the lane is full: the local part is the answer
  --remote_->in_flight;
  remote_->idle.notify_all();
  return true;
}

void Prefetcher::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    std::shared_ptr<PrefetchJob> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    const bool finished = job->abandoned.load(std::memory_order_relaxed) || load(job);
    if (finished) {
      job->done.store(true, std::memory_order_release);
      if (on_done_) on_done_();
    }
    job.reset();
    lock.lock();
  }
}

}  // namespace kvstash
