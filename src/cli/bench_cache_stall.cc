#include "cli/bench_cache_stall.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "model/model.h"

namespace kvstash::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The p-th percentile (nearest rank) of `v`; 0 when empty.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t rank = static_cast<std::size_t>(std::max(1.0, std::ceil(p / 100.0 * static_cast<double>(v.size()))));
  return v[std::min(rank, v.size()) - 1];
}

}  // namespace

Expected<StallResult> measure_stall(const Model& model, EngineOptions base, cache::TieredStore* store,
                                    const std::vector<TokenId>& arrival_prompt, int streams, const std::vector<TokenId>* pool_prompt, int warm_tokens,
                                    int before_tokens, int after_tokens, double limit_s) {
  constexpr int kStreamPrompt = 32;
  const int stream_max = 2048;  // far more than the run needs: streams are cancelled at the end
  EngineOptions o = base;
  o.kv_store = store;
  o.max_running = streams + 1;
  o.n_ctx = std::max<int>(static_cast<int>(arrival_prompt.size()) + 16, kStreamPrompt + stream_max);
  o.kv_pool_tokens = static_cast<std::int64_t>(arrival_prompt.size()) + 128 +
                     static_cast<std::int64_t>(streams) * (kStreamPrompt + stream_max + 16);
  auto engine = Engine::create(model, o);
  if (!engine) return engine.status();
  if (pool_prompt) {
    GenerationRequest once;
    once.prompt = *pool_prompt;
    once.max_tokens = 1;
    auto warmed = generate(**engine, std::move(once));
    if (!warmed) return warmed.status();
  }

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<Clock::time_point>> times(static_cast<std::size_t>(streams));  // guarded by mu
  std::vector<std::uint64_t> ids;
  int streams_ended = 0;                    // guarded by mu
  std::optional<TokenEvent> arrival_first;  // guarded by mu
  bool arrival_ended = false;               // guarded by mu
  Clock::time_point arrival_first_at;       // guarded by mu
  const int nv = model.config().n_vocab;
  for (int s = 0; s < streams; ++s) {
    GenerationRequest r;
    for (int i = 0; i < kStreamPrompt; ++i) r.prompt.push_back(static_cast<TokenId>((s * 7919 + i * 104729 + 17) % nv));
    r.max_tokens = stream_max;
    r.stop_at_end_of_generation = false;
    auto id = (*engine)->submit(std::move(r), [&, s](const TokenEvent& ev) {
      std::lock_guard lock(mu);
      if (ev.token >= 0 && ev.finish != FinishReason::kCancelled) times[static_cast<std::size_t>(s)].push_back(Clock::now());
      if (ev.finish != FinishReason::kNone) ++streams_ended;
      cv.notify_all();
    });
    if (!id) return id.status();
    ids.push_back(*id);
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
  auto all_have = [&](const std::vector<std::size_t>& at_least) {
    for (int s = 0; s < streams; ++s) {
      if (times[static_cast<std::size_t>(s)].size() < at_least[static_cast<std::size_t>(s)]) return false;
    }
    return true;
  };
  std::unique_lock lock(mu);
  std::vector<std::size_t> want(static_cast<std::size_t>(streams), static_cast<std::size_t>(warm_tokens + before_tokens));
  if (!cv.wait_until(lock, deadline, [&] { return all_have(want) || streams_ended > 0; }) || streams_ended > 0) {
    return unavailable("bench-cache --stall: streams did not reach their warm-up in time");
  }
  lock.unlock();
  // The streams' own prefetches (their short prompts look for stored tails) ended before they
  // decoded: from here on only the arrival loads.
  const std::int64_t loads_before = (*engine)->stats().store_loads_finished;
  const Clock::time_point submitted = Clock::now();
  GenerationRequest arrival;
  arrival.prompt = arrival_prompt;
  arrival.max_tokens = 1;
  arrival.stop_at_end_of_generation = false;
  auto arrival_id = (*engine)->submit(std::move(arrival), [&](const TokenEvent& ev) {
    std::lock_guard l(mu);
    if (!arrival_first && ev.token >= 0) {
      arrival_first = ev;
      arrival_first_at = Clock::now();
    }
    if (ev.finish != FinishReason::kNone) arrival_ended = true;
    cv.notify_all();
  });
  if (!arrival_id) return arrival_id.status();
  // The load's end: the first poll that sees the arrival's prefetch job finished (the engine
  // counts a job as its I/O ends, between steps; the arrival is the only request that loads here).
  // When its first token comes before any load finished, no load window is reported.
  Clock::time_point load_done_at = submitted;
  bool loaded_something = false;
  while (Clock::now() < deadline) {
    if ((*engine)->stats().store_loads_finished > loads_before) {
      loaded_something = true;
      load_done_at = Clock::now();
      break;
    }
    {
      std::lock_guard l(mu);
      if (arrival_first) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  lock.lock();
  if (!cv.wait_until(lock, deadline, [&] { return arrival_ended; }) || !arrival_first) {
    return unavailable("bench-cache --stall: the arriving request did not finish in time");
  }
  for (int s = 0; s < streams; ++s) want[static_cast<std::size_t>(s)] = times[static_cast<std::size_t>(s)].size() + static_cast<std::size_t>(after_tokens);
  const bool tail_seen = cv.wait_until(lock, deadline, [&] { return all_have(want) || streams_ended > 0; });
  lock.unlock();
  for (std::uint64_t id : ids) (*engine)->cancel(id);
  lock.lock();
  if (!cv.wait_until(lock, deadline, [&] { return streams_ended == streams; }) || !tail_seen) {
    return unavailable("bench-cache --stall: streams did not end in time");
  }
  lock.unlock();
  engine->reset();  // every request has ended: no callback runs after this

  // Windows: "before" = the ITLs of the last before_tokens steps ending before the arrival;
  // "during" = every ITL whose interval overlaps [arrival submitted, arrival's first token].
  StallResult out;
  out.streams = streams;
  std::vector<double> before, during, during_load;
  for (const auto& t : times) {
    for (std::size_t j = static_cast<std::size_t>(warm_tokens) + 1; j < t.size(); ++j) {
      const double itl = seconds(t[j] - t[j - 1]);
      if (t[j] <= submitted) before.push_back(itl);
      if (t[j] > submitted && t[j - 1] <= arrival_first_at) during.push_back(itl);
      if (loaded_something && t[j] > submitted && t[j - 1] <= load_done_at) during_load.push_back(itl);
    }
  }
  out.itl_before_n = before.size();
  out.itl_during_n = during.size();
  out.itl_before_p99_s = percentile(before, 99);
  out.itl_during_p99_s = percentile(during, 99);
  out.itl_before_max_s = before.empty() ? 0 : *std::max_element(before.begin(), before.end());
  out.itl_during_max_s = during.empty() ? 0 : *std::max_element(during.begin(), during.end());
  out.itl_load_n = during_load.size();
  out.itl_load_p99_s = percentile(during_load, 99);
  out.load_s = loaded_something ? seconds(load_done_at - submitted) : 0;
  out.arrival_ttft_s = seconds(arrival_first_at - submitted);
  out.arrival_cached_tokens = arrival_first->cached_tokens;
  return out;
}

}  // namespace kvstash::cli
