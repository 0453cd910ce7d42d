#include "cache/tiered_store.h"

#include <algorithm>
#include <functional>
#include <optional>

namespace kvstash::cache {

namespace {

// One tier get and how long the tier took over it (queueing on the pool not included, so a tier is
// judged slow by its own answer time, as with a get on the caller's thread).
struct TimedGet {
  Expected<SharedBytes> bytes;
  std::chrono::steady_clock::duration elapsed;
};

TimedGet timed(const std::function<Expected<SharedBytes>()>& get) {
  const auto start = std::chrono::steady_clock::now();
  Expected<SharedBytes> bytes = get();
  return {std::move(bytes), std::chrono::steady_clock::now() - start};
}

// A get issued ahead of load()'s walk. Shared by the walk and the pool job, so the walk may abandon
// it (return, or take the chunk elsewhere) while the job still runs.
struct PendingGet {
  std::atomic<bool> cancelled{false};  // set by the walk: the job skips the get if not yet started
  std::mutex mu;
  std::condition_variable cv;
  std::optional<TimedGet> result;  // guarded by mu; set once by the job

  // The result, or nothing if the deadline passes first (the job still runs to its end).
  std::optional<TimedGet> wait_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu);
    auto done = [this] { return result.has_value(); };
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      cv.wait(lock, done);  // no deadline: a time_point this far out overflows some conversions
    } else if (!cv.wait_until(lock, deadline, done)) {
      return std::nullopt;
    }
    return std::move(*result);
  }
};

}  // namespace

// A fixed set of threads running queued jobs in order, at most max_queued waiting for a thread
// (post() refuses more: with max_queued 0, a job runs at once on an idle thread or not at all). Jobs queued when the pool is destroyed are dropped (their load() calls have all returned
// by then: a store is not destroyed under a call), or run with `false` (run_remote()'s jobs).
// Not common/thread_pool.h: that one is fork-join for kernels (one run at a time, spinning
// workers); these jobs block on i/o and come from many load() calls at once.
class TieredStore::GetPool {
 public:
  explicit GetPool(std::size_t threads, std::size_t max_queued = static_cast<std::size_t>(-1))
      : max_queued_(max_queued) {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~GetPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    for (auto& job : jobs_) {
      if (job.on_drop) job.on_drop();
    }
  }

  // Runs get() on a pool thread; the walk waits on the returned entry. Null when the queue is full.
  std::shared_ptr<PendingGet> submit(std::function<Expected<SharedBytes>()> get) {
    auto pending = std::make_shared<PendingGet>();
    const bool queued = post([pending, get = std::move(get)] {
      TimedGet got = pending->cancelled.load(std::memory_order_relaxed)
                         ? TimedGet{not_found("cancelled"), {}}
                         : timed(get);
      std::lock_guard done(pending->mu);
      pending->result.emplace(std::move(got));
      pending->cv.notify_all();
    });
    return queued ? pending : nullptr;
  }

  // Queues job; false when max_queued jobs wait already. on_drop runs instead of job when the
  // pool is destroyed first.
  bool post(std::function<void()> job, std::function<void()> on_drop = nullptr) {
    {
      std::lock_guard lock(mu_);
      if (max_queued_ != static_cast<std::size_t>(-1) && jobs_.size() + busy_ >= threads_.size() + max_queued_) return false;
      jobs_.push_back({std::move(job), std::move(on_drop)});
    }
    cv_.notify_one();
    return true;
  }

  std::size_t queued() const {
    std::lock_guard lock(mu_);
    return jobs_.size();
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      std::function<void()> job = std::move(jobs_.front().run);
      jobs_.pop_front();
      ++busy_;
      lock.unlock();
      job();
      job = nullptr;
      lock.lock();
      --busy_;
    }
  }

  struct Job {
    std::function<void()> run, on_drop;
  };
  const std::size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by mu_
  std::size_t busy_ = 0;  // threads running a job; guarded by mu_
  bool stop_ = false;                       // guarded by mu_
  std::vector<std::thread> threads_;
};

// One tier's write-behind queue. Jobs run in queue order by the one writer thread.
struct TieredStore::WriteQueue {
  std::mutex mu;
  std::condition_variable work;  // the writer waits for a job or stop
  std::condition_variable idle;  // flush() waits for an empty queue and an idle writer
  std::deque<WriteJob> jobs;     // guarded by mu
  std::uint64_t bytes = 0;       // chunk bytes + touched keys' bytes queued; guarded by mu
  bool writing = false;          // a job is being run; guarded by mu
  bool stop = false;             // guarded by mu
  std::thread writer;
};

namespace {

// What a queued job costs against the queue's bound: its chunk and the keys it touches.
std::uint64_t job_cost(const std::shared_ptr<const Bytes>& bytes,
                       const std::shared_ptr<const std::vector<ChunkKey>>& touch) {
  return (bytes ? bytes->size() : 0) + (touch ? touch->size() * sizeof(ChunkKey) : 0);
}

}  // namespace

TieredStore::TieredStore(std::vector<std::unique_ptr<Tier>> tiers, TieredStoreOptions options)
    : tiers_(std::move(tiers)),
      options_(options),
      rejected_by_tier_(new std::atomic<std::uint64_t>[tiers_.size()]()) {
  for (std::size_t t = 0; t < tiers_.size(); ++t) queues_.push_back(std::make_unique<WriteQueue>());
  for (std::size_t t = 0; t < tiers_.size(); ++t) queues_[t]->writer = std::thread([this, t] { writer_loop(t); });
  if (options_.load_threads > 0 && options_.load_depth > 0 && !tiers_.empty()) {
    get_pool_ = std::make_unique<GetPool>(options_.load_threads);
  }
  for (const auto& tier : tiers_) has_remote_ = has_remote_ || tier->remote();
  if (has_remote_) {
    remote_pool_ = std::make_unique<GetPool>(std::max<std::size_t>(1, options_.remote_threads), options_.remote_queue);
    remote_lane_ = std::make_unique<GetPool>(std::max<std::size_t>(1, options_.remote_lane_threads), options_.remote_lane_queue);
  }
}

TieredStore::~TieredStore() {
  // The remote lane first: its running jobs use the whole store; queued ones run as job(false).
  remote_lane_.reset();
  for (auto& q : queues_) {
    std::lock_guard lock(q->mu);
    q->stop = true;
    q->work.notify_all();
  }
  for (auto& q : queues_) q->writer.join();
}

std::vector<std::size_t> TieredStore::fastest_holders(std::span<const ChunkKey> keys, PlanScope scope) {
  std::vector<std::size_t> tier_of(keys.size(), kNoTier);
  if (!tiers_.empty()) {
    std::lock_guard lock(pending_mu_);  // queued for tier 0 but not yet written: tier 0 has them
    for (std::size_t i = 0; i < keys.size() && !pending_.empty(); ++i) {
      if (pending_.count(keys[i])) tier_of[i] = 0;
    }
  }
  // Tier by tier, each asked once, about the keys no faster tier holds: chunk i may live anywhere.
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    if (scope == PlanScope::kLocal && tiers_[t]->remote()) continue;
    std::vector<std::size_t> unclaimed;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (tier_of[i] == kNoTier) unclaimed.push_back(i);
    }
    if (unclaimed.empty()) break;
    std::vector<ChunkKey> ask;
    ask.reserve(unclaimed.size());
    for (std::size_t i : unclaimed) ask.push_back(keys[i]);
    const std::vector<bool> held = tiers_[t]->holds(ask);
    for (std::size_t j = 0; j < unclaimed.size() && j < held.size(); ++j) {
      if (held[j]) tier_of[unclaimed[j]] = t;
    }
  }
  return tier_of;
}

LoadPlan TieredStore::plan_load(std::span<const ChunkKey> keys, std::span<const TailCandidate> tail_candidates,
                                PlanScope scope) {
  plans_.fetch_add(1, std::memory_order_relaxed);
  // One round per tier for the full chunks and the tails after the last of them; a second only
  // when the run breaks earlier and some tail could continue it there (at most a chunk's blocks).
  std::vector<ChunkKey> ask(keys.begin(), keys.end());
  std::vector<std::size_t> asked;  // indices of the candidates in `ask`, after the keys
  for (std::size_t c = 0; c < tail_candidates.size(); ++c) {
    if (tail_candidates[c].at == keys.size()) {
      ask.push_back(tail_candidates[c].key);
      asked.push_back(c);
    }
  }
  std::vector<std::size_t> tier_of = fastest_holders(ask, scope);
  LoadPlan plan;
  plan.scope = scope;
  while (plan.full_chunks < keys.size() && tier_of[plan.full_chunks] != kNoTier) {
    plan.keys.push_back(keys[plan.full_chunks]);
    plan.tiers.push_back(tier_of[plan.full_chunks]);
    ++plan.full_chunks;
  }
  std::vector<std::size_t> tail_tier(tail_candidates.size(), kNoTier);
  for (std::size_t j = 0; j < asked.size(); ++j) tail_tier[asked[j]] = tier_of[keys.size() + j];
  if (plan.full_chunks < keys.size()) {
    ask.clear();
    asked.clear();
    for (std::size_t c = 0; c < tail_candidates.size(); ++c) {
      if (tail_candidates[c].at == plan.full_chunks) {
        ask.push_back(tail_candidates[c].key);
        asked.push_back(c);
      }
    }
    if (!ask.empty()) {
      tier_of = fastest_holders(ask, scope);
      for (std::size_t j = 0; j < asked.size(); ++j) tail_tier[asked[j]] = tier_of[j];
    }
  }
  for (std::size_t c = tail_candidates.size(); c-- > 0;) {
    if (tail_candidates[c].at == plan.full_chunks && tail_tier[c] != kNoTier) {
      plan.tail = c;
      plan.keys.push_back(tail_candidates[c].key);
      plan.tiers.push_back(tail_tier[c]);
      break;
    }
  }
  return plan;
}

std::size_t TieredStore::lookup(std::span<const ChunkKey> keys) { return plan_load(keys).size(); }

std::vector<LoadedChunk> TieredStore::load(std::span<const ChunkMeta> expected) {
  std::vector<ChunkKey> keys;
  keys.reserve(expected.size());
  for (const ChunkMeta& meta : expected) keys.push_back(meta.key);
  return load(expected, plan_load(keys));
}

std::vector<LoadedChunk> TieredStore::load(std::span<const ChunkMeta> expected, const LoadPlan& plan,
                                           Clock::time_point deadline) {
  std::vector<LoadedChunk> out;
  // The chunks to fetch: expected's prefix that follows the plan.
  std::size_t n = 0;
  while (n < expected.size() && n < plan.size() && expected[n].key == plan.keys[n]) ++n;
  std::vector<bool> skipped(tiers_.size(), false);
  std::vector<std::shared_ptr<PendingGet>> ahead(n);  // gets in flight, by chunk
  std::size_t issued = 0;  // chunks [0, issued) have had their planned get issued (or not needed)
  auto abandon = [&](std::size_t i) {
    if (i < ahead.size() && ahead[i]) {
      ahead[i]->cancelled.store(true, std::memory_order_relaxed);
      ahead[i].reset();
    }
  };
  auto skip = [&](std::size_t t) {
    skipped[t] = true;
    tier_skips_.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i) {
      if (plan.tiers[i] == t) abandon(i);
    }
  };
  bool past_deadline = false;
  // A remote tier's get, on the remote pool (null, counted: its queue is full, a miss).
  auto remote_submit = [&](std::size_t t, const ChunkKey& key) {
    auto pending = remote_pool_->submit([this, t, key] { return tier_get(t, key); });
    if (!pending) remote_dropped_.fetch_add(1, std::memory_order_relaxed);
    return pending;
  };

  for (std::size_t i = 0; i < n && !past_deadline; ++i) {
    for (; issued < n && issued < i + std::max<std::size_t>(1, options_.load_depth); ++issued) {
      const std::size_t t = plan.tiers[issued];
      const ChunkKey key = expected[issued].key;
      if (skipped[t]) continue;
      if (tiers_[t]->remote()) {
        ahead[issued] = remote_submit(t, key);
      } else if (get_pool_) {
        ahead[issued] = get_pool_->submit([this, t, key] { return tier_get(t, key); });
      }
    }
    const ChunkMeta& meta = expected[i];
    // The planned tier first, then (evicted or damaged since the plan) the others fastest first.
    std::vector<std::size_t> order = {plan.tiers[i]};
    for (std::size_t t = 0; t < tiers_.size(); ++t) {
      if (t != plan.tiers[i]) order.push_back(t);
    }
    bool found = false;
    for (std::size_t t : order) {
      if (skipped[t] || (plan.scope == PlanScope::kLocal && tiers_[t]->remote())) continue;
      if (Clock::now() >= deadline) {
        past_deadline = true;
        break;
      }
      const bool from_ahead = ahead[i] && t == plan.tiers[i];
      std::optional<TimedGet> waited;
      if (from_ahead) {
        waited = ahead[i]->wait_until(deadline);
        if (!waited) {
          past_deadline = true;
          break;
        }
        ahead[i].reset();
      } else if (tiers_[t]->remote()) {  // never on this thread: on the remote pool, until the deadline
        auto now_get = remote_submit(t, meta.key);
        if (!now_get) continue;  // its queue is full: a miss, not a wait
        waited = now_get->wait_until(deadline);
        if (!waited) {
          now_get->cancelled.store(true, std::memory_order_relaxed);
          past_deadline = true;
          break;
        }
      }
      TimedGet got = waited ? std::move(*waited) : timed([&] { return tier_get(t, meta.key); });
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
      auto view = decode_chunk(*chunk.bytes, meta);
      if (!view) {
        if (auto alias = decode_alias(*chunk.bytes, meta)) {  // a tail stored as an alias: its chunk's head
          auto target = follow_alias(*alias, meta, skipped, deadline);
          if (!target) {
            (void)tiers_[t]->erase(meta.key);  // its chunk is gone: the alias leads nowhere
            continue;
          }
          out.push_back(std::move(*target));
          aliases_followed_.fetch_add(1, std::memory_order_relaxed);
          chunks_loaded_.fetch_add(1, std::memory_order_relaxed);
          found = true;
          break;
        }
        (void)tiers_[t]->erase(meta.key);  // a wrong chunk is never served, nor kept
        rejected_by_tier_[t].fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (!acceptable(view->header)) {  // e.g. derived from a banned producer: a miss, and erased
        (void)tiers_[t]->erase(meta.key);
        rejected_by_tier_[t].fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      chunk.view = std::move(*view);
      chunk.use_tokens = chunk.view.header.meta.token_count;
      out.push_back(std::move(chunk));
      chunks_loaded_.fetch_add(1, std::memory_order_relaxed);
      found = true;
      break;
    }
    abandon(i);  // served by another tier than planned, or not at all
    if (!found) break;
  }
  if (past_deadline) load_deadlines_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < ahead.size(); ++i) abandon(i);  // past the end of the run
  after_load(out, expected);
  return out;
}

void TieredStore::after_load(const std::vector<LoadedChunk>& out, std::span<const ChunkMeta> expected) {
  if (out.empty()) return;
  std::size_t deepest_tier = 0;  // the slowest tier that served a chunk of the run
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t t = out[i].tier_index;
    deepest_tier = std::max(deepest_tier, t);
    if (t == 0) continue;
    // A tail found through an alias is promoted as the chunk it is (the alias stays where it was).
    const ChunkKey& key = out[i].via_alias ? out[i].view.header.meta.key : expected[i].key;
    // Into tier 0 as store() puts: readable from its queue at once, so the next load (the next
    // request) takes it from there and never asks the slower tier for it again.
    enqueue_readable(key, out[i].bytes, nullptr);
    for (std::size_t f = 1; f < t; ++f) enqueue(f, {key, out[i].bytes, nullptr});
  }
  // The gets (and promotions) made the run's tail the most recently used: turn that around, in
  // each tier after its promotions (same queue).
  auto tail_first = std::make_shared<std::vector<ChunkKey>>();
  for (std::size_t i = out.size(); i-- > 0;) {
    tail_first->push_back(expected[i].key);
    if (out[i].via_alias) tail_first->push_back(out[i].view.header.meta.key);
  }
  for (std::size_t t = 0; t <= deepest_tier; ++t) enqueue(t, {ChunkKey{}, nullptr, tail_first});
}

Status TieredStore::store(const ChunkMeta& meta, std::span<const std::uint8_t> payload,
                          std::span<const ChunkKey> predecessors, std::span<const ChunkKey> leading_block_keys) {
  auto encoded = encode_chunk(meta, payload, options_.encode);
  if (!encoded) return encoded.status();
  if (tiers_.empty()) return Status::ok();
  std::shared_ptr<const std::vector<ChunkKey>> tail_first;
  if (!predecessors.empty()) {
    tail_first = std::make_shared<std::vector<ChunkKey>>(predecessors.rbegin(), predecessors.rend());
  }
  queue_put(meta.key, std::make_shared<const Bytes>(std::move(*encoded)), std::move(tail_first));
  if (!options_.prefix_aliases || leading_block_keys.empty()) return Status::ok();
  const std::uint32_t block_tokens = meta.token_count / static_cast<std::uint32_t>(leading_block_keys.size() + 1);
  for (std::size_t j = 0; j < leading_block_keys.size(); ++j) {
    auto alias = encode_alias(meta, leading_block_keys[j], block_tokens * static_cast<std::uint32_t>(j + 1));
    if (alias) queue_put(leading_block_keys[j], std::make_shared<const Bytes>(std::move(*alias)), nullptr);
  }
  return Status::ok();
}

void TieredStore::queue_put(const ChunkKey& key, std::shared_ptr<const Bytes> bytes,
                            std::shared_ptr<const std::vector<ChunkKey>> touch_after) {
  enqueue_readable(key, bytes, touch_after);
  for (std::size_t t = 1; t < tiers_.size(); ++t) enqueue(t, {key, bytes, touch_after});
}

void TieredStore::enqueue_readable(const ChunkKey& key, std::shared_ptr<const Bytes> bytes,
                                   std::shared_ptr<const std::vector<ChunkKey>> touch_after) {
  {
    std::lock_guard lock(pending_mu_);
    pending_[key] = bytes;
  }
  if (!enqueue(0, {key, bytes, std::move(touch_after)})) forget_pending(key, bytes.get());
}

void TieredStore::set_chunk_filter(std::function<bool(const ChunkHeader&)> accept) {
  std::lock_guard lock(filter_mu_);
  filter_ = std::make_shared<const std::function<bool(const ChunkHeader&)>>(std::move(accept));
}

bool TieredStore::acceptable(const ChunkHeader& header) {
  std::shared_ptr<const std::function<bool(const ChunkHeader&)>> filter;
  {
    std::lock_guard lock(filter_mu_);
    filter = filter_;
  }
  return !filter || !*filter || (*filter)(header);
}

std::optional<LoadedChunk> TieredStore::follow_alias(const AliasTarget& target, const ChunkMeta& expected,
                                                     const std::vector<bool>& skipped, Clock::time_point deadline) {
  ChunkMeta meta = expected;
  meta.key = target.key;
  meta.token_count = target.token_count;
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    if (skipped[t]) continue;
    Expected<SharedBytes> got = not_found("not asked");
    if (tiers_[t]->remote()) {  // on the remote pool, waited for until the deadline at most
      auto pending = remote_pool_->submit([this, t, key = meta.key] { return tier_get(t, key); });
      if (!pending) {
        remote_dropped_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      auto waited = pending->wait_until(deadline);
      if (!waited) {
        pending->cancelled.store(true, std::memory_order_relaxed);
        return std::nullopt;
      }
      got = std::move(waited->bytes);
    } else {
      got = tier_get(t, meta.key);
    }
    if (!got) continue;
    LoadedChunk chunk;
    chunk.bytes = std::move(*got);
    chunk.tier_index = t;
    auto view = decode_chunk(*chunk.bytes, meta);
    if (!view || !acceptable(view->header)) {
      (void)tiers_[t]->erase(meta.key);
      rejected_by_tier_[t].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    chunk.view = std::move(*view);
    chunk.use_tokens = expected.token_count;
    chunk.via_alias = true;
    return chunk;
  }
  return std::nullopt;
}

Expected<SharedBytes> TieredStore::tier_get(std::size_t t, const ChunkKey& key) {
  if (t == 0) {
    std::lock_guard lock(pending_mu_);
    if (auto it = pending_.find(key); it != pending_.end()) return it->second;
  }
  return tiers_[t]->get_shared(key);
}

bool TieredStore::run_remote(std::function<void(bool run)> job) {
  if (!remote_lane_) {
    job(true);  // no remote tier: nothing to wait on, run it here
    return true;
  }
  auto shared = std::make_shared<std::function<void(bool)>>(std::move(job));
  if (remote_lane_->post([shared] { (*shared)(true); }, [shared] { (*shared)(false); })) return true;
  remote_lane_dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool plan_is_complete(const LoadPlan& plan, std::size_t n_keys, std::span<const TailCandidate> tails) {
  if (plan.full_chunks < n_keys) return false;
  std::optional<std::size_t> longest;  // the last candidate after the last key: the longest
  for (std::size_t c = 0; c < tails.size(); ++c) {
    if (tails[c].at == n_keys) longest = c;
  }
  return !longest || plan.tail == longest;
}

SharedBytes TieredStore::queued(const ChunkKey& key) {
  std::lock_guard lock(pending_mu_);
  auto it = pending_.find(key);
  return it == pending_.end() ? nullptr : it->second;
}

void TieredStore::forget_pending(const ChunkKey& key, const Bytes* bytes) {
  std::lock_guard lock(pending_mu_);
  if (auto it = pending_.find(key); it != pending_.end() && it->second.get() == bytes) pending_.erase(it);
}

bool TieredStore::enqueue(std::size_t t, WriteJob job) {
  WriteQueue& q = *queues_[t];
  const std::uint64_t cost = job_cost(job.bytes, job.touch_after);
  const bool is_put = job.bytes != nullptr;
  {
    std::lock_guard lock(q.mu);
    if (q.bytes + cost > options_.write_queue_bytes) {
      if (is_put) writes_dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    q.bytes += cost;
    q.jobs.push_back(std::move(job));
  }
  if (is_put) writes_queued_.fetch_add(1, std::memory_order_relaxed);
  q.work.notify_one();
  return true;
}

void TieredStore::writer_loop(std::size_t t) {
  WriteQueue& q = *queues_[t];
  Tier& tier = *tiers_[t];
  std::unique_lock lock(q.mu);
  for (;;) {
    q.work.wait(lock, [&q] { return q.stop || !q.jobs.empty(); });
    if (q.jobs.empty()) return;  // stop and nothing left
    WriteJob job = std::move(q.jobs.front());
    q.jobs.pop_front();
    q.writing = true;
    lock.unlock();
    if (job.bytes && !tier.put_shared(job.key, job.bytes)) write_errors_.fetch_add(1, std::memory_order_relaxed);
    if (job.bytes && t == 0) forget_pending(job.key, job.bytes.get());  // tier 0 has it (or never will)
    if (job.touch_after) tier.touch(*job.touch_after);
    const std::uint64_t cost = job_cost(job.bytes, job.touch_after);
    job = {};  // release the chunk before waking flush()
    lock.lock();
    q.bytes -= cost;
    q.writing = false;
    if (q.jobs.empty()) q.idle.notify_all();
  }
}

void TieredStore::flush() {
  for (auto& q : queues_) {
    std::unique_lock lock(q->mu);
    q->idle.wait(lock, [&q] { return q->jobs.empty() && !q->writing; });
  }
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
  s.plans = plans_.load(std::memory_order_relaxed);
  s.load_deadlines = load_deadlines_.load(std::memory_order_relaxed);
  s.aliases_followed = aliases_followed_.load(std::memory_order_relaxed);
  s.remote_dropped = remote_dropped_.load(std::memory_order_relaxed);
  s.remote_lane_dropped = remote_lane_dropped_.load(std::memory_order_relaxed);
  if (remote_pool_) s.remote_queued += remote_pool_->queued();
  if (remote_lane_) s.remote_queued += remote_lane_->queued();
  for (const auto& q : queues_) {
    std::lock_guard lock(q->mu);
    s.queue_bytes += q->bytes;
  }
  return s;
}

std::size_t TieredStore::pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl) {
  ttl = std::min(ttl, options_.max_pin_ttl);
  if (ttl.count() <= 0 || keys.empty()) return 0;
  std::size_t most = 0;
  for (const auto& tier : tiers_) {
    if (!tier->remote()) most = std::max(most, tier->pin(keys, ttl));
  }
  return most;
}

}  // namespace kvstash::cache
