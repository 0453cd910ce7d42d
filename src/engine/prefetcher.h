// Prefetcher: runs the tiered store's loads off the engine thread.
//
// A request that arrives with a prefix the pool does not hold gets a PrefetchJob: a background
// thread calls TieredStore::load() for the chunks it will need and leaves the verified chunks in
// host memory. The engine polls the job between steps (done), copies the chunks into pool blocks
// at admission, or gives up on it at its deadline and recomputes (abandon). A job the engine gave
// up on still finishes (its bytes are dropped); one not yet started is skipped.
//
// Peers never hold up a local hit: with a remote tier in the store (the peers), a job is planned on
// the local tiers first (TieredStore::plan_load, PlanScope::kLocal). When that plan is complete
// (tiered_store.h plan_is_complete) it is loaded here and the peers are not asked. Otherwise the
// local part is loaded here and the job goes to the store's remote lane (run_remote), which plans
// with the peers and loads until 80% of the time left to the job's deadline, keeping the longer
// of the two runs; when the lane is full the job ends with its local part (a miss, not a wait).
// The prefetch threads themselves never wait on a peer.
//
// Thread safety: submit() and the job's flags are safe from any thread; a job's `chunks` may be
// read only after `done` is seen true. Destruction drops queued jobs and joins the threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cache/tiered_store.h"

namespace kvstash {

struct PrefetchJob {
  std::vector<cache::ChunkMeta> metas;     // the full chunks wanted, a prefix's consecutive run
  // Partial chunks that may continue the run (a stored tail, or a stored chunk's leading blocks
  // through a prefix alias): at[i] is the index in `metas` of the full chunk tail_candidates[i]
  // stands for (metas.size(): after them), listed by `at`, each `at`'s shortest first. The longest
  // one stored where the run of full chunks ends is loaded into `tail`.
  std::vector<cache::ChunkMeta> tail_candidates;
  std::vector<std::size_t> tail_at;
  std::vector<cache::LoadedChunk> chunks;  // the leading ones found and verified; set before done
  std::optional<cache::LoadedChunk> tail;  // set before done
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();  // gets past it are abandoned
  std::atomic<bool> done{false};
  std::atomic<bool> abandoned{false};      // set by the engine: nobody will read the result
};

class Prefetcher {
 public:
  // `on_done` runs on a prefetch thread after each job completes (the engine wakes its loop).
  Prefetcher(cache::TieredStore& store, int n_threads, std::function<void()> on_done);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  std::shared_ptr<PrefetchJob> submit(std::vector<cache::ChunkMeta> metas, std::vector<cache::ChunkMeta> tail_candidates,
                                      std::vector<std::size_t> tail_at,
                                      std::chrono::steady_clock::time_point deadline);

 private:
  void run();
  // Plans and loads the job on the local tiers; true when finished here, false when handed to
  // the store's remote lane (which finishes it).
  bool load(const std::shared_ptr<PrefetchJob>& job);
  static void load_plan(PrefetchJob& job, cache::TieredStore& store, const cache::LoadPlan& plan,
                        std::chrono::steady_clock::time_point deadline);

  cache::TieredStore& store_;
  const std::function<void()> on_done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PrefetchJob>> jobs_;  // guarded by mu_
  bool stop_ = false;                              // guarded by mu_
  std::vector<std::thread> threads_;
  // Jobs on the store's remote lane, not finished yet (the destructor waits for them).
  struct Remote {
    std::mutex mu;
    std::condition_variable idle;
    int in_flight = 0;     // guarded by mu
    bool stopping = false; // guarded by mu
  };
  std::shared_ptr<Remote> remote_ = std::make_shared<Remote>();
};

}  // namespace kvstash
