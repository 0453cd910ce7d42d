// Engine: the request queue, the engine thread and the scheduler step.
//
// A step: take new requests and cancellations; admit waiting requests while the running batch has
// room (looking their prompt's full blocks up in the prefix cache first); give every running
// sequence its next tokens — 1 for a decoding sequence (plus its draft under speculative decoding,
// engine/speculative.h), a chunk of at most prefill_chunk for one still prefilling — within
// step_token_budget; make sure their block tables cover the new
// positions (preempting the newest sequences when the pool runs dry); run one batched forward;
// register newly filled blocks under their prefix keys; sample for every sequence whose pending
// tokens are all in, report the token, and retire finished sequences.
//
// Lock order: mu_ only (the engine thread never holds it while calling callbacks or the model).
#include "engine/engine.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <cstring>

#include "engine/engine_impl.h"
#include "engine/speculative.h"

namespace kvstash {
namespace {
// Loads run on these threads; each load() also keeps several gets in flight on the store's own
// I/O threads, so two are enough for two requests loading at once without queueing.
constexpr int kPrefetchThreads = 2;

std::chrono::steady_clock::duration calibrate_delay(const EngineOptions& o) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(o.calibrate_idle_s));
}
}  // namespace

Engine::Impl::Impl(const Model& m, const EngineOptions& o, std::int64_t n_blocks)
    : model(m), options(o), pool(m.config(), o.block_size, n_blocks), threads(o.n_threads),
      // v3: a model with window layers keeps them in their own group (block_pool.h), and a chunk
      // holds each block's full layers, then its window layers (docs/chunk-format.md).
      kv_format("f16-blk" + std::to_string(o.block_size) + (pool.split() ? "-v3" : "-v2")) {
  pool.record_key_changes(o.kv_events != nullptr);
  pool.set_pin_max_share(o.pool_pin_max_share);
  if (o.kv_store && o.prefix_cache) {
    prefetcher = std::make_unique<Prefetcher>(*o.kv_store, kPrefetchThreads, [this] {
      {
        std::lock_guard<std::mutex> lock(mu);
        load_finished = true;
        ++stats.store_loads_finished;  // counted as the I/O ends, not at the next step's end
      }
      wake.notify_one();
    });
  }
}

void Engine::Impl::extend_block_keys(Sequence& seq, int n_blocks) const {
  const int bs = pool.block_size();
  while (static_cast<int>(seq.block_keys.size()) < n_blocks) {
    const std::size_t i = seq.block_keys.size();
    std::span<const TokenId> toks(seq.tokens.data() + i * static_cast<std::size_t>(bs), static_cast<std::size_t>(bs));
    seq.block_keys.push_back(i == 0 ? cache::first_chunk_key(model.fingerprint(), kv_format, seq.request.cache_salt, toks)
                                    : cache::next_chunk_key(seq.block_keys[i - 1], toks));
  }
}

int Engine::Impl::count_pool_hits(Sequence& seq) {
  if (!options.prefix_cache) return 0;
  // At most all blocks but the one holding the last token, which must be computed for its logits.
  const int max_reuse = (static_cast<int>(seq.tokens.size()) - 1) / pool.block_size();
  extend_block_keys(seq, max_reuse);
  int hits = 0;
  while (hits < max_reuse && pool.contains(seq.block_keys[static_cast<std::size_t>(hits)])) ++hits;
  if (pool.split()) {
    // Window layers: resuming after `hits` blocks, the next token's window reaches back to slot
    // hits * bs + 1 - window, and the blocks from there on must still have their window layers'
    // KV (a sequence that went past them freed it). Else a shorter hit, down to none (recompute).
    const int bs = pool.block_size(), window = pool.view().max_window;
    const auto window_ready = [&](int k) {
      for (int j = std::max(0, k * bs + 1 - window) / bs; j < k; ++j) {
        if (!pool.key_has_window(seq.block_keys[static_cast<std::size_t>(j)])) return false;
      }
      return true;
    };
    while (hits > 0 && !window_ready(hits)) --hits;
  }
  return hits;
}

Expected<std::unique_ptr<Engine>> Engine::create(const Model& model, const EngineOptions& options) {
  EngineOptions o = options;
  if (o.block_size <= 0 || o.n_ctx <= 0 || o.max_running <= 0 || o.prefill_chunk <= 0 || o.step_token_budget <= 0) {
    return invalid_argument("engine options must be positive (block_size, n_ctx, max_running, prefill_chunk, step_token_budget)");
  }
  if (o.kv_store && (o.chunk_tokens <= 0 || o.chunk_tokens % o.block_size != 0)) {
    return invalid_argument("chunk_tokens (" + std::to_string(o.chunk_tokens) + ") must be a positive multiple of block_size (" +
                            std::to_string(o.block_size) + ")");
  }
  if (Status st = validate_budget(o.kv_budget, o.block_size); !st) return st;
  if (!std::isfinite(o.itl_slo_ms) || !std::isfinite(o.itl_slo_factor) || o.itl_slo_factor <= 0) {
    return invalid_argument("itl_slo_ms must be a finite number (0 = no step budget) and itl_slo_factor a positive one");
  }
  if (!(o.calibrate_idle_s >= 0 && o.calibrate_idle_s <= 3600)) {
    return invalid_argument("calibrate_idle_s must be in [0, 3600] seconds");
  }
  if (o.min_prefill_tokens < 1) return invalid_argument("min_prefill_tokens must be at least 1 (a prefill always progresses)");
  if (!(o.pool_pin_max_share >= 0.0 && o.pool_pin_max_share <= 0.9)) {
    return invalid_argument("pool_pin_max_share must be in [0, 0.9] (pinned blocks must leave the pool room to evict)");
  }
  if (Status st = validate_speculative(o.speculative); !st) return st;
  if (o.speculative.draft == DraftKind::kModel) {
    if (Status st = check_same_vocabulary(model, *o.speculative.draft_model); !st) return st;
  }
  if (o.kv_pool_tokens <= 0) o.kv_pool_tokens = std::int64_t{o.max_running} * o.n_ctx / 2;
  // The pool must hold at least one full-length sequence, or a long request could never run.
  o.kv_pool_tokens = std::max<std::int64_t>(o.kv_pool_tokens, o.n_ctx + o.block_size);
  const std::int64_t n_blocks = (o.kv_pool_tokens + o.block_size - 1) / o.block_size;
  std::unique_ptr<Engine> engine(new Engine());
  engine->impl_ = std::make_unique<Impl>(model, o, n_blocks);
  Impl* impl = engine->impl_.get();
  if (o.speculative.draft == DraftKind::kModel) {
    // Default: every sequence that may draft in one step, each at full length.
    std::int64_t kv_tokens = o.speculative.draft_kv_tokens;
    if (kv_tokens <= 0) kv_tokens = std::int64_t{std::min(o.speculative.max_decoders, o.max_running)} * o.n_ctx;
    kv_tokens = std::max<std::int64_t>(kv_tokens, o.n_ctx + o.block_size);
    impl->drafter = std::make_unique<DraftModelDrafter>(*o.speculative.draft_model, o.block_size, kv_tokens, o.prefill_chunk);
  }
  StepCostParams cost = o.step_cost;
  const bool given = cost.base_s > 0 || cost.per_decode_row_s > 0 || cost.per_row_s > 0 || cost.per_pair_s > 0;
  impl->created_at = std::chrono::steady_clock::now();
  impl->settle_at = impl->created_at + Impl::kSettleIdle;
  if (o.itl_slo_ms != 0 && !given && o.calibrate_when_idle) {  // measured by the engine thread, when idle
    impl->calibration_pending = true;
    impl->calibrate_at = std::chrono::steady_clock::now() + calibrate_delay(o);
  } else if (o.itl_slo_ms != 0 && !given) {  // the budget needs the model: measured here, before any request
    auto measured = StepCostModel::calibrate(model, impl->pool, impl->threads);
    if (!measured) return measured.status();
    cost = *measured;
  }
  impl->step_cost = StepCostModel(cost, o.step_cost_online);
  {
    std::lock_guard<std::mutex> lock(impl->mu);
    impl->stats.kv_blocks_total = n_blocks;
    impl->stats.step_cost = cost;
    impl->stats.step_cost_pending = impl->calibration_pending;
  }
  impl->thread = std::thread([impl] { impl->loop(); });
  return engine;
}

Engine::~Engine() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

const Model& Engine::model() const { return impl_->model; }
const EngineOptions& Engine::options() const { return impl_->options; }
const std::string& Engine::kv_format() const { return impl_->kv_format; }

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

Expected<std::uint64_t> Engine::submit(GenerationRequest request, TokenCallback on_token) {
  const int n_vocab = impl_->model.config().n_vocab;
  const int n_ctx = impl_->options.n_ctx;
  if (request.prompt.empty()) return invalid_argument("the prompt is empty");
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= n_vocab) {
      return invalid_argument("token id " + std::to_string(t) + " is out of range [0, " + std::to_string(n_vocab) + ")");
    }
  }
  if (static_cast<int>(request.prompt.size()) >= n_ctx) {
    return invalid_argument("the prompt has " + std::to_string(request.prompt.size()) +
                            " tokens; the context holds " + std::to_string(n_ctx) + " (prompt plus at least one generated token)");
  }
  if (request.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (static_cast<std::int64_t>(request.prompt.size()) + request.max_tokens > n_ctx) {
    return invalid_argument("prompt (" + std::to_string(request.prompt.size()) + " tokens) plus max_tokens (" +
                            std::to_string(request.max_tokens) + ") exceeds the context length " + std::to_string(n_ctx));
  }
  if (request.n < 1 || request.n > impl_->options.max_running) {
    return invalid_argument("n is " + std::to_string(request.n) + "; this engine runs 1 to " +
                            std::to_string(impl_->options.max_running) + " choices per request (max_running)");
  }
  request.top_logprobs = std::clamp(request.top_logprobs, 0, 20);
  if (request.kv_budget < -1) return invalid_argument("kv_budget must be -1 (the server's), 0 (none) or a token count");
  if (request.kv_budget > 0) {
    KvBudgetOptions o = impl_->options.kv_budget;
    o.budget = request.kv_budget;
    if (Status st = validate_budget(o, impl_->options.block_size); !st) return st;
  }
  std::uint64_t id;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->n_waiting_total >= impl_->options.max_queued) {
      return resource_exhausted("the request queue is full (" + std::to_string(impl_->options.max_queued) + " waiting)");
    }
    id = impl_->next_id++;
    auto seq = std::make_unique<Sequence>(id, std::move(request), std::move(on_token));
    seq->kv_budget = seq->request.kv_budget < 0 ? impl_->options.kv_budget.budget : seq->request.kv_budget;
    seq->kv.rng.seed(impl_->options.kv_budget.seed ^ id);
    impl_->incoming.push_back(std::move(seq));
    ++impl_->n_waiting_total;
    impl_->stats.waiting = impl_->n_waiting_total;
  }
  impl_->wake.notify_one();
  return id;
}

void Engine::forget_producer(const std::array<std::uint8_t, 32>& producer) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->forget.push_back(producer);
  }
  impl_->wake.notify_one();
}

void Engine::cancel(std::uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->cancels.push_back(request_id);
  }
  impl_->wake.notify_one();
}

void Engine::Impl::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      auto ready = [&] {
        return stopping || load_finished || !incoming.empty() || !cancels.empty() || !forget.empty() || !waiting.empty() ||
               !running.empty();
      };
      // Wake at the earliest load deadline at the latest, and when idle work falls due.
      auto deadline = std::chrono::steady_clock::time_point::max();
      for (const auto& s : loading) deadline = std::min(deadline, s->load_deadline);
      if (loading.empty() && !settled) deadline = std::min(deadline, settle_at);
      if (loading.empty() && calibration_pending) deadline = std::min(deadline, calibrate_at);
      if (!ready() && !unpublished_changes.empty()) {
        // About to wait with key changes a subscriber's lock held back at the last step: no step
        // may come to publish them, so publish them now, waiting for the log (the engine is idle).
        lock.unlock();
        options.kv_events->publish(unpublished_changes);
        unpublished_changes.clear();
        continue;
      }
      bool idle = false;
      if (deadline == std::chrono::steady_clock::time_point::max()) {
        wake.wait(lock, ready);
      } else {
        idle = !wake.wait_until(lock, deadline, ready) && loading.empty();
      }
      if (stopping) break;
      if (idle) {
        lock.unlock();
        idle_work();
        continue;
      }
    }
    step();
    publish_key_changes();
    const auto now = std::chrono::steady_clock::now();
    if (calibration_pending) calibrate_at = now + calibrate_delay(options);
    if (!settled) {  // busy since creation for long: settled anyway
      if (now - created_at >= kSettleLatest) settle();
      settle_at = now + kSettleIdle;
    }
  }
  // Shutting down: every request still known gets its final event.
  take_new_work();
  for (auto& s : running) finish(*s, FinishReason::kCancelled, "the engine is shutting down");
  for (auto& s : waiting) finish(*s, FinishReason::kCancelled, "the engine is shutting down");
  for (auto& s : loading) {
    s->prefetch->abandoned.store(true, std::memory_order_relaxed);
    finish(*s, FinishReason::kCancelled, "the engine is shutting down");
  }
  running.clear();
  waiting.clear();
  loading.clear();
}

void Engine::Impl::idle_work() {
  const auto now = std::chrono::steady_clock::now();
  if (!settled && now >= settle_at) settle();
  if (calibration_pending && now >= calibrate_at) calibrate_now();
}

void Engine::Impl::settle() {
  settled = true;
  pool.start_prefault();
  if (drafter) drafter->start_prefault();
  if (options.on_settled) options.on_settled();
}

void Engine::Impl::calibrate_now() {
  calibrate_at = std::chrono::steady_clock::now() + calibrate_delay(options);
  // Not beside the pool's prefault (it slows the forwards it shares the cores with), nor where the
  // caller says not yet.
  if (!pool.prefault_done()) return;
  if (options.calibration_may_start && !options.calibration_may_start()) return;
  auto interrupted = [this] {
    std::lock_guard<std::mutex> lock(mu);
    return stopping || !incoming.empty() || !cancels.empty() || !forget.empty();
  };
  Expected<StepCostParams> measured = StepCostModel::calibrate(model, pool, threads, interrupted);
  calibrate_at = std::chrono::steady_clock::now() + calibrate_delay(options);
  // Interrupted, or the pool's free blocks are all in use for now: again at the next idle period.
  if (!measured && (measured.status().code() == StatusCode::kUnavailable ||
                    measured.status().code() == StatusCode::kResourceExhausted)) {
    return;
  }
  calibration_pending = false;
  if (measured) step_cost = StepCostModel(*measured, options.step_cost_online);
  {
    std::lock_guard<std::mutex> lock(mu);
    stats.step_cost_pending = false;
    if (measured) stats.step_cost = *measured;
  }
  if (options.on_step_cost_measured) options.on_step_cost_measured(measured);
}

void Engine::Impl::take_new_work() {
  std::vector<std::uint64_t> to_cancel;
  std::deque<std::unique_ptr<Sequence>> arrived;
  std::vector<cache::ProducerKey> to_forget;
  {
    std::lock_guard<std::mutex> lock(mu);
    arrived.swap(incoming);
    to_cancel.swap(cancels);
    to_forget.swap(forget);
  }
  // Before anything is admitted: no new request reuses a banned producer's KV from the pool.
  for (const auto& producer : to_forget) {
    blocks_forgotten += pool.forget_derived_from(producer);
    banned_producers.push_back(producer);
  }
  // Arrivals start their store prefetch now (the store and the pool are looked up once, here).
  for (auto& s : arrived) enqueue_for_admission(std::move(s), false);
  for (std::uint64_t id : to_cancel) {
    for (auto* list : {&running, &loading}) {
      for (auto& s : *list) if (s->id == id) s->cancelled = true;
    }
    for (auto& s : waiting) if (s->id == id) s->cancelled = true;
  }
  auto retire_cancelled = [&](auto& list) {
    for (auto& s : list) {
      if (s && s->cancelled) {
        if (s->prefetch) s->prefetch->abandoned.store(true, std::memory_order_relaxed);
        finish(*s, FinishReason::kCancelled);
        s.reset();
      }
    }
    list.erase(std::remove(list.begin(), list.end(), nullptr), list.end());
  };
  retire_cancelled(running);
  retire_cancelled(loading);
  retire_cancelled(waiting);
  poll_loads();
}

bool Engine::Impl::admit(Sequence& seq) {
  const int bs = pool.block_size();
  const int n_tokens = static_cast<int>(seq.tokens.size());
  // Reuse the longest cached run of leading full blocks, but leave at least one token to compute:
  // the last prompt token's forward pass gives the logits of the first generated token.
  int hits = count_pool_hits(seq);
  const int pool_hits = hits;
  seq.taint.reset();  // rebuilt from what it reuses (a preempted sequence may reuse other KV now)
  // Admit only if the rest of the prompt (plus the first generated token) fits beside what the
  // running sequences need for their next token.
  // (Retaining a cached hit block takes it out of n_available(), so the check below is exact.)
  for (int i = 0; i < hits; ++i) {
    seq.block_table.push_back(*pool.lookup(seq.block_keys[static_cast<std::size_t>(i)]));
    seq.taint = merge_taint(seq.taint, pool.taint(seq.block_table.back()));
  }
  // A request with n > 1 also needs a copy of its last partial block per other choice at the fork.
  const int needed = ceil_div(n_tokens + 1, bs) - hits + (seq.choices_held() - 1);
  if (pool.n_available() < needed + static_cast<std::int64_t>(running.size())) {
    release_blocks(seq);
    return false;
  }
  // Then what the store prefetch brought, for the full chunks beyond what the pool had.
  const int before_install = hits;
  const auto install_start = Clock::now();
  hits = install_prefetched(seq, hits);
  if (hits > before_install) {  // step work too: the step budget counts it (step_budget.cc)
    step_installed_blocks += hits - before_install;
    step_install_s += std::chrono::duration<double>(Clock::now() - install_start).count();
  }
  if (options.kv_store) {
    seq.num_stored_chunks = std::max(seq.num_stored_chunks, hits * bs / options.chunk_tokens);
  }
  seq.num_computed_tokens = hits * bs;
  seq.num_slots = hits * bs;
  if (seq.kv_budget > 0) {
    seq.kv.slot_positions.resize(static_cast<std::size_t>(hits * bs));
    std::iota(seq.kv.slot_positions.begin(), seq.kv.slot_positions.end(), 0);
  }
  seq.num_registered_blocks = hits;
  if (!seq.admitted_before) {
    seq.num_cached_tokens = std::min(hits * bs, seq.n_prompt);
    seq.admitted_before = true;
    std::lock_guard<std::mutex> lock(mu);
    stats.prompt_tokens_from_pool += std::min(pool_hits * bs, seq.n_prompt);
    stats.prompt_tokens_from_store += std::min(hits * bs, seq.n_prompt) - std::min(pool_hits * bs, seq.n_prompt);
  }
  return true;
}

bool Engine::Impl::ensure_blocks(Sequence& seq, int n_new) {
  const int need = ceil_div(seq.num_slots + n_new, pool.block_size());
  while (static_cast<int>(seq.block_table.size()) < need) {
    auto b = pool.allocate();
    if (!b) return false;
    seq.block_table.push_back(*b);
  }
  return true;
}

void Engine::Impl::preempt(std::unique_ptr<Sequence> seq) {
  // Its full blocks stay in the prefix cache, so re-admission usually finds most of its KV.
  release_blocks(*seq);
  // A compacted sequence recomputes its whole KV (its compacted state cannot be rebuilt) and
  // compacts again once it reaches its budget.
  if (seq->kv.compacted) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.compacted_preemptions;
  }
  seq->num_computed_tokens = 0;
  seq->num_slots = 0;
  seq->kv = KvCompactionState{};
  seq->num_registered_blocks = 0;
  seq->draft.clear();
  seq->draft_kv.release();  // rebuilt by catching up after re-admission
  enqueue_for_admission(std::move(seq), true);
  std::lock_guard<std::mutex> lock(mu);
  ++stats.preemptions;
}

bool Engine::Impl::derives_from_banned(const Sequence& seq) const {
  if (!seq.taint || banned_producers.empty()) return false;
  for (const auto& producer : *seq.taint) {
    if (std::find(banned_producers.begin(), banned_producers.end(), producer) != banned_producers.end()) return true;
  }
  return false;
}

void Engine::Impl::register_full_blocks(Sequence& seq) {
  if (!options.prefix_cache || seq.kv.compacted) return;  // compacted KV is not its prefix's
  if (derives_from_banned(seq)) return;
  const int bs = pool.block_size();
  const int full = seq.num_computed_tokens / bs;
  extend_block_keys(seq, full);
  for (; seq.num_registered_blocks < full; ++seq.num_registered_blocks) {
    const auto i = static_cast<std::size_t>(seq.num_registered_blocks);
    pool.set_taint(seq.block_table[i], seq.taint);  // computed on everything before it
    pool.register_block(seq.block_table[i], seq.block_keys[i]);
  }
}

void Engine::Impl::emit(Sequence& seq, const SampleResult& r, FinishReason reason) {
  TokenEvent ev;
  ev.token = r.token;
  ev.logprob = r.logprob;
  ev.top_logprobs = r.top_logprobs;
  ev.finish = reason;
  ev.prompt_tokens = seq.n_prompt;
  ev.cached_tokens = seq.num_cached_tokens;
  ev.pinned_tokens = seq.pinned_tokens;
  ev.ttft_s = seq.ttft_s;
  ev.unchecked = seq.taint != nullptr;
  ev.choice = seq.choice;
  seq.on_token(ev);
}

void Engine::Impl::release_blocks(Sequence& seq) {
  pool.release_table(seq.block_table, seq.window_dropped);
  seq.window_dropped = 0;
}

void Engine::Impl::drop_window_blocks(Sequence& seq) {
  if (!pool.split() || !options.free_window_kv || seq.kv.compacted) return;
  // Block j is dropped once (j + 1) * bs <= num_computed - window: the next token (slot
  // num_computed and on) sees slots from num_computed + 1 - window only (model/attention.h).
  int cut = std::min((seq.num_computed_tokens - pool.view().max_window) / pool.block_size(),
                     static_cast<int>(seq.block_table.size()));
  // With a store, not before its chunk went to the store: a chunk's record holds every layer's KV
  // (engine_store.cc), so the window parts wait for it (at most chunk_tokens more per sequence).
  if (options.kv_store) cut = std::min(cut, seq.num_stored_chunks * (options.chunk_tokens / pool.block_size()));
  for (; seq.window_dropped < cut; ++seq.window_dropped) {
    pool.drop_window(seq.block_table[static_cast<std::size_t>(seq.window_dropped)]);
  }
}

void Engine::Impl::finish(Sequence& seq, FinishReason reason, const std::string& error) {
  release_blocks(seq);
  TokenEvent ev;
  ev.finish = reason;
  ev.error = error;
  ev.prompt_tokens = seq.n_prompt;
  ev.cached_tokens = seq.num_cached_tokens;
  ev.pinned_tokens = seq.pinned_tokens;
  ev.ttft_s = seq.ttft_s;
  ev.unchecked = seq.taint != nullptr;
  // Not forked yet: it stands for every choice of its request, and each gets its final event.
  const int first = seq.choice, last = seq.choice + seq.choices_held();
  for (int c = first; c < last; ++c) {
    ev.choice = c;
    seq.on_token(ev);
  }
}

void Engine::Impl::count_finished(const Sequence& seq) {
  if (seq.choice != 0) return;  // a request counts once, by its first choice
  std::lock_guard<std::mutex> lock(mu);
  ++stats.requests_finished;
  stats.prompt_tokens += seq.n_prompt;
  stats.cached_prompt_tokens += seq.num_cached_tokens;
}

void Engine::Impl::step() {
  pool.set_pin_clock(BlockPool::PinClock::now());
  if (options.on_step) options.on_step(step_number);
  ++step_number;
  step_installed_blocks = 0;
  step_install_s = 0;
  take_new_work();
  admit_waiting();
  if (running.empty()) {
    publish_stats(0, 0);
    return;
  }
  int prefill_tokens = 0;
  std::vector<Planned> plan = plan_step(prefill_tokens);
  reserve_blocks(plan, prefill_tokens);
  if (plan.empty()) {
    publish_stats(0, 0);
    return;
  }
  const StepShape shape = shape_of(plan);  // before run_batch, which may retire the plan's sequences
  const auto t0 = Clock::now();
  run_batch(plan, prefill_tokens);
  account_step(shape, std::chrono::duration<double>(Clock::now() - t0).count() + step_install_s);
}

// The pool's key changes of the step just run, in one publish (one lock hold of the log). A busy
// engine never waits for the log: when a subscriber holds its lock, the changes wait for the next
// step (in order; past kMaxUnpublished they are published with a wait, so memory stays bounded),
// or, when no step follows, are published with a wait before the engine idles (loop()).
void Engine::Impl::publish_key_changes() {
  if (!options.kv_events) return;
  constexpr std::size_t kMaxUnpublished = 1 << 16;
  std::vector<cache::KvChange> changes = pool.take_key_changes();
  unpublished_changes.insert(unpublished_changes.end(), changes.begin(), changes.end());
  if (unpublished_changes.empty()) return;
  if (unpublished_changes.size() > kMaxUnpublished) {
    options.kv_events->publish(unpublished_changes);
  } else if (!options.kv_events->try_publish(unpublished_changes)) {
    return;
  }
  unpublished_changes.clear();
}

// Admits waiting requests, oldest first, while the running batch has room and the pool can hold
// their prompts. A request the pool cannot hold even alone ends with an error.
void Engine::Impl::admit_waiting() {
  // A request not forked yet needs room for all its choices (submit() bounds n by max_running).
  while (!waiting.empty() && static_cast<int>(running.size()) + waiting.front()->choices_held() <= options.max_running) {
    if (defer_install(*waiting.front())) break;
    if (!admit(*waiting.front())) {
      if (running.empty()) {  // cannot fit even alone: the pool is too small for this request
        finish(*waiting.front(), FinishReason::kError, "the KV pool cannot hold this request");
        waiting.pop_front();
        continue;
      }
      break;
    }
    running.push_back(std::move(waiting.front()));
    waiting.pop_front();
  }
  std::lock_guard<std::mutex> lock(mu);
  n_waiting_total = static_cast<int>(loading.size() + waiting.size() + incoming.size());
}

// The step's work: decoding sequences first (one token each keeps every stream moving, then their
// drafts while the step has few decoders), then prefill chunks, within step_token_budget and,
// while any sequence decodes, within the step-time budget (step_budget.cc): the prefill gets what
// the decode part (drafted rows included) leaves, the oldest prefill at least min_prefill_tokens
// (one token by default). Every running sequence appears at most once.
std::vector<Engine::Impl::Planned> Engine::Impl::plan_step(int& prefill_tokens) {
  std::vector<Planned> plan;
  int budget = options.step_token_budget;
  int decoders = 0;
  for (auto& s : running) {
    s->draft.clear();
    decoders += s->pending() == 1;
  }
  const SpeculativeOptions& spec = options.speculative;
  const bool speculate = spec.draft != DraftKind::kNone && decoders <= spec.max_decoders;
  int draft_budget = budget - decoders;  // what is left once every decoder has its own token
  StepShape shape;
  shape.installed_blocks = step_installed_blocks;
  const auto t0 = Clock::now();
  draft_jobs.clear();
  for (auto& s : running) {
    if (s->pending() == 1 && budget > 0) {
      int drafted = 0;
      if (speculate && draft_budget > 0) {
        drafted = plan_draft(*s, std::min(draft_budget, budget - 1));
        draft_budget -= drafted;
      }
      plan.push_back({s.get(), 1 + drafted});
      budget -= 1 + drafted;
    }
  }
  if (!draft_jobs.empty()) {
    draft_with_model();
    for (Planned& p : plan) {  // the draft model may have drafted less than asked (catching up, pool full)
      const int n_new = 1 + static_cast<int>(p.seq->draft.size());
      budget += p.n_new - n_new;
      p.n_new = n_new;
    }
  }
  for (const Planned& p : plan) {
    for (int j = 0; j < p.n_new; ++j) shape.add_decode(p.seq->num_slots + j);
  }
  if (speculate) draft_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  step_budget_s = step_time_budget(shape);
  // The decode rows and the step's first install go whatever their cost (as the oldest prefill's
  // minimum below): the step may be over its budget by them alone.
  step_forced_progress = step_budget_s > 0 && step_cost.predict(shape) > step_budget_s;
  step_prefill_cut = false;
  prefill_tokens = 0;
  for (auto& s : running) {
    if (s->pending() > 1 && budget > 0) {
      int n = std::min({s->pending(), options.prefill_chunk, budget});
      if (step_budget_s > 0) {
        const int fits = step_cost.max_prefill_tokens(s->num_slots, n, step_budget_s - step_cost.predict(shape));
        step_prefill_cut = step_prefill_cut || fits < n;
        if (prefill_tokens == 0 && fits < std::min(n, options.min_prefill_tokens)) {
          n = std::min(n, options.min_prefill_tokens);
          step_forced_progress = true;
        } else if (fits == 0) {
          break;  // oldest first: the ones behind wait for a step with room
        } else {
          n = fits;
        }
      }
      plan.push_back({s.get(), n});
      budget -= n;
      prefill_tokens += n;
      shape.add_prefill(s->num_slots, n);
      // The draft model prefills the same chunk (up to the prompt's last token, its first draft's
      // input), so its first draft does not start with the whole prompt. Only while the batch is
      // small enough to speculate in.
      // Only while every sequence in sight (running, waiting, loading) fits in a speculating
      // step: a prompt the draft prefills and that then decodes in a larger batch never drafts.
      if (drafter && !s->spec.off && sequences_in_sight() <= spec.max_decoders) {
        const int end = std::min(s->num_computed_tokens + n, static_cast<int>(s->tokens.size()) - 1);
        if (end > s->draft_kv.n_computed()) {
          draft_jobs.push_back({std::span<const TokenId>(s->tokens.data(), static_cast<std::size_t>(end)), &s->draft_kv, 0, &s->draft,
                                draft_block_keys(*s, end)});
        }
      }
    }
  }
  if (!draft_jobs.empty()) {
    const auto t1 = Clock::now();
    draft_with_model();
    draft_seconds += std::chrono::duration<double>(Clock::now() - t1).count();
  }
  return plan;
}

// Gives every planned sequence the blocks for its new positions. When the pool runs dry, the
// newest running sequence is preempted (its KV recomputed after re-admission; its full blocks stay
// in the prefix cache) and the plan loses it, wherever it stood in the plan.
// Invariant on return: every planned sequence's block table covers [0, num_computed + n_new), and
// the blocks it writes are its own (no other sequence holds them: fork.cc).
void Engine::Impl::reserve_blocks(std::vector<Planned>& plan, int& prefill_tokens) {
  std::size_t i = 0;
  while (i < plan.size()) {
    if (ensure_blocks(*plan[i].seq, plan[i].n_new) && unshare_write_block(*plan[i].seq)) {
      ++i;
      continue;
    }
    // The newest sequence whose KV is not compacted (a compacted one cannot get its compacted KV
    // back: it recomputes the full KV and compacts again, so its output may change); the newest
    // of all when every one is compacted.
    std::size_t victim_index = running.size() - 1;
    for (std::size_t r = running.size(); r-- > 0;) {
      if (!running[r]->kv.compacted) {
        victim_index = r;
        break;
      }
    }
    Sequence* victim = running[victim_index].get();
    const auto at = std::find_if(plan.begin(), plan.end(), [&](const Planned& p) { return p.seq == victim; });
    if (at != plan.end()) {
      if (victim->pending() > 1) prefill_tokens -= at->n_new;  // planned as a prefill chunk
      // Erasing before i shifts plan[i] down by one; erasing plan[i] itself leaves i on its successor.
      if (static_cast<std::size_t>(at - plan.begin()) < i) --i;
      plan.erase(at);
    }
    preempt(std::move(running[victim_index]));
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(victim_index));
  }
  for (const Planned& p : plan) {
    assert(static_cast<int>(p.seq->block_table.size()) * pool.block_size() >= p.seq->num_slots + p.n_new);
    (void)p;
  }
}

// One batched forward over the plan, then per sequence: register and store the new full blocks,
// sample where the whole prompt is in, report the token, retire finished sequences.
void Engine::Impl::run_batch(const std::vector<Planned>& plan, int prefill_tokens) {
  ForwardBatch batch;
  for (const Planned& p : plan) {
    Sequence& s = *p.seq;
    const int n_known = p.n_new - static_cast<int>(s.draft.size());  // the rest is the draft
    batch.tokens.insert(batch.tokens.end(), s.tokens.begin() + s.num_computed_tokens,
                        s.tokens.begin() + s.num_computed_tokens + n_known);
    batch.tokens.insert(batch.tokens.end(), s.draft.begin(), s.draft.end());
    BatchSequence bs;
    bs.block_table = s.block_table.data();
    bs.n_blocks = static_cast<int>(s.block_table.size());
    bs.pos_start = s.num_computed_tokens;
    bs.slot_start = s.num_slots;
    bs.n_new = p.n_new;

    bs.want_logits = n_known == s.pending();
    bs.all_logits = !s.draft.empty();  // a row per drafted token to verify it
    batch.sequences.push_back(bs);
  }
  const int n_vocab = model.config().n_vocab;
  logits.resize(static_cast<std::size_t>(batch.logit_rows()) * static_cast<std::size_t>(n_vocab));
  const auto t0 = Clock::now();
  if (Status st = model.forward(batch, pool.view(), logits.data(), threads); !st) {
    // A broken scheduler invariant: nothing was written. End the batch's requests with the error
    // (never a wrong token, never wrong KV under a valid key) and keep serving the others.
    for (const Planned& p : plan) {
      finish(*p.seq, FinishReason::kError, st.to_string());
      p.seq->finished = true;
    }
    running.erase(std::remove_if(running.begin(), running.end(), [](const auto& s) { return s->finished; }), running.end());
    publish_stats(0, 0);
    return;
  }
  const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();

  int row = 0;
  int sampled = 0;
  std::int64_t prompt_computed = 0;
  std::vector<std::unique_ptr<Sequence>> forked;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].seq;
    const bool sample_now = batch.sequences[i].want_logits;
    if (!s.draft.empty()) {
      const float* rows = &logits[static_cast<std::size_t>(row) * n_vocab];
      row += plan[i].n_new;
      sampled += verify_draft(s, rows, n_vocab);
      continue;
    }
    prompt_computed += std::max(0, std::min(s.num_computed_tokens + plan[i].n_new, s.n_prompt) - s.num_computed_tokens);
    advance_computed(s, plan[i].n_new);
    if (!sample_now) continue;
    const float* logits_row = &logits[static_cast<std::size_t>(row++) * n_vocab];
    if (!s.forked && s.request.n > 1) {
      // The prompt's KV is complete: it goes to the store once (before the fork, so the choices
      // inherit stored_tail_end), then the other choices fork on it and sample from the same row.
      store_tail(s);
      std::vector<std::unique_ptr<Sequence>> children = fork_choices(s);
      sample_and_emit(s, logits_row, n_vocab);
      for (auto& c : children) sample_and_emit(*c, logits_row, n_vocab);
      sampled += static_cast<int>(children.size()) + 1;
      for (auto& c : children) {
        if (!c->finished) forked.push_back(std::move(c));
      }
      continue;
    }
    sample_and_emit(s, logits_row, n_vocab);
    ++sampled;
  }
  const int decode_tokens = static_cast<int>(batch.tokens.size()) - prefill_tokens;
  const double total = static_cast<double>(batch.tokens.size());
  {
    std::lock_guard<std::mutex> lock(mu);
    stats.generated_tokens += sampled;
    stats.prompt_tokens_computed += prompt_computed;
    stats.draft_seconds += draft_seconds;
  }
  draft_seconds = 0;
  // After the step's KV (and any draft's rollback): the window layers' blocks it left behind.
  for (const Planned& p : plan) {
    if (!p.seq->finished) drop_window_blocks(*p.seq);
  }
  for (auto& c : forked) running.push_back(std::move(c));
  running.erase(std::remove_if(running.begin(), running.end(), [](const auto& s) { return s->finished; }), running.end());
  publish_stats(step_s * prefill_tokens / total, step_s * decode_tokens / total);
}

void Engine::Impl::advance_computed(Sequence& s, int n) {
  if (s.kv_budget > 0) {
    for (int j = 0; j < n; ++j) s.kv.slot_positions.push_back(s.num_computed_tokens + j);
  }
  s.num_computed_tokens += n;
  s.num_slots += n;
  register_full_blocks(s);
  store_full_chunks(s);
}

int Engine::Impl::plan_draft(Sequence& s, int max_tokens) {
  // Not while the prompt's last token is pending: its row gives the first token (and, for n > 1,
  // the fork, which must precede any other token of the choices).
  if (s.n_generated() == 0) return 0;
  // Every drafted token accepted gives one more token after it: room for draft + 1 tokens.
  int room = std::min({max_tokens, s.request.max_tokens - s.n_generated() - 1,
                       options.n_ctx - static_cast<int>(s.tokens.size()) - 1});
  // Under a KV budget, a compaction may only fall due at the run's last token (as it would
  // without the draft: it changes the KV every later token attends to).
  if (s.kv_budget > 0) room = std::min(room, s.kv_budget - s.num_slots - 1);
  if (room <= 0) return 0;
  const SpeculativeOptions& o = options.speculative;
  // Sampling from a flat distribution: no draft could pay for itself (SpecState::flat).
  if (s.spec.flat()) return 0;
  const int k = std::min(room, s.spec.length(o.max_draft));
  if (k <= 0) return 0;
  if (drafter) {
    // A draft model far behind (a sequence that decoded in large batches, then found itself in a
    // small one) must first prefill what it missed: worth it only for a sequence with enough
    // tokens left to win it back. A draft-model token costs about a quarter of a target decode
    // step in a prefill, and a drafting step saves about that much per token at the acceptance
    // that makes a draft model worth running.
    const int behind = static_cast<int>(s.tokens.size()) - 1 - s.draft_kv.n_computed();
    const int remaining = s.request.max_tokens - s.n_generated();
    if (behind > kMaxCheapCatchUp && remaining * kCatchUpPerRemainingToken < behind) return 0;
    draft_jobs.push_back({s.tokens, &s.draft_kv, k, &s.draft, draft_block_keys(s, static_cast<int>(s.tokens.size()))});
    return k;
  }
  return ngram_draft(s.tokens, o.min_ngram, o.max_ngram, k, s.draft);
}

std::span<const cache::ChunkKey> Engine::Impl::draft_block_keys(Sequence& s, int n_tokens) {
  if (!options.prefix_cache) return {};
  const int n_blocks = n_tokens / pool.block_size();
  extend_block_keys(s, n_blocks);
  return std::span<const cache::ChunkKey>(s.block_keys.data(), static_cast<std::size_t>(n_blocks));
}

void Engine::Impl::draft_with_model() {
  if (!drafter->draft(draft_jobs, threads)) {
    for (auto& job : draft_jobs) job.out->clear();  // plain decoding this step: never a wrong token
  }
  draft_jobs.clear();
}

int Engine::Impl::verify_draft(Sequence& s, const float* rows, int n_vocab) {
  const int drafted = static_cast<int>(s.draft.size());
  advance_computed(s, 1);  // the sequence's own last token
  int emitted = 0, accepted = 0;
  for (int j = 0;; ++j) {
    // Row j follows the known tokens and the first j drafted ones, all accepted: its token is the
    // one plain decoding would sample here (the same sampler state, context and generator).
    sample_and_emit(s, rows + static_cast<std::size_t>(j) * n_vocab, n_vocab);
    ++emitted;
    if (s.finished || j == drafted || s.tokens.back() != s.draft[static_cast<std::size_t>(j)]) break;
    ++accepted;
    advance_computed(s, 1);  // the drafted token's KV was computed on accepted tokens only: kept
  }
  if (drafter) {
    // The draft model's KV of the accepted tokens stays (fed, the run's last drafted token is
    // not); the rest goes. The next draft catches up on the bonus token.
    if (s.finished) {
      s.draft_kv.release();
    } else {
      const int real = static_cast<int>(s.tokens.size()) - 1;
      drafter->rollback(s.draft_kv, real, draft_block_keys(s, real));
    }
  }
  if (!s.finished) {
    // Roll back: the KV past num_slots is the rejected tokens'; blocks holding only such KV (all
    // allocated for this step, never registered) go back to the pool.
    const auto keep = static_cast<std::size_t>(ceil_div(s.num_slots, pool.block_size()));
    while (s.block_table.size() > keep) {
      pool.release(s.block_table.back());
      s.block_table.pop_back();
    }
  }
  s.spec.update(drafted, accepted, options.speculative.max_draft, drafter ? SpecState::kModelGiveUpAfter : 0);
  if (s.spec.off && drafter) s.draft_kv.release();  // never fed again
  s.draft.clear();
  std::lock_guard<std::mutex> lock(mu);
  ++stats.drafts;
  stats.draft_tokens += drafted;
  stats.draft_tokens_accepted += accepted;
  return emitted;
}

void Engine::Impl::sample_and_emit(Sequence& s, const float* row, int n_vocab) {
  SampleResult r = s.sampler.sample(row, n_vocab, s.request.top_logprobs, s.tokens, s.n_prompt);
  if (!r.error.empty()) {
    // Nothing may be picked (everything banned or masked, or the grammar's state table full):
    // the request ends with the reason, never with a token outside its constraints.
    finish(s, FinishReason::kError, r.error);
    s.finished = true;
    count_finished(s);
    return;
  }
  if (s.ttft_s < 0) s.ttft_s = std::chrono::duration<double>(Clock::now() - s.submitted).count();
  if (options.speculative.draft != DraftKind::kNone) s.spec.observe(s.sampler.last_top_probability());
  s.tokens.push_back(r.token);
  const FinishReason reason = stop_reason(s, r.token);
  // The prompt's KV is complete (first token), or the sequence's (last): store its tail.
  if (s.n_generated() == 1 || reason != FinishReason::kNone) store_tail(s);
  emit(s, r, reason);
  if (reason == FinishReason::kNone && s.kv_budget > 0 && s.num_slots >= s.kv_budget) compact(s);
  if (reason != FinishReason::kNone) {
    release_blocks(s);
    s.finished = true;
    count_finished(s);
  }
}

// Drops the sequence's KV to kv_budget - compact_every slots (engine/kv_compactor.h).
void Engine::Impl::compact(Sequence& s) {
  const auto t0 = Clock::now();
  if (!query_stats) {
    // 256 tokens: the centres settle within a few dozen tokens; one small prefill, once.
    auto calibrated = calibrate_queries(model, 256);
    if (!calibrated) return;  // cannot happen for a loaded model; the sequence keeps its KV
    query_stats = std::make_shared<const QueryStats>(std::move(*calibrated));
  }
  s.kv.queries = query_stats;
  const int keep = s.kv_budget - options.kv_budget.compact_every;
  const auto kept = choose_survivors(options.kv_budget, model, pool.view(), s.block_table, s.kv, keep);
  const CompactionResult r = compact_slots(pool, s.block_table, s.kv, kept);
  if (!r.done) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.compactions_postponed;
    return;
  }
  s.num_slots = static_cast<int>(s.kv.slot_positions.size());
  std::lock_guard<std::mutex> lock(mu);
  ++stats.compactions;
  stats.kv_tokens_evicted += r.evicted;
  stats.kv_blocks_freed += r.blocks_freed;
  stats.compaction_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

FinishReason Engine::Impl::stop_reason(const Sequence& s, TokenId token) const {
  const auto& stops = s.request.stop_tokens;
  if ((s.request.stop_at_end_of_generation && model.tokenizer().is_end_of_generation(token)) ||
      std::find(stops.begin(), stops.end(), token) != stops.end()) {
    return FinishReason::kStop;
  }
  if (s.n_generated() >= s.request.max_tokens || static_cast<int>(s.tokens.size()) >= options.n_ctx) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

void Engine::Impl::publish_stats(double prefill_s, double decode_s) {
  std::lock_guard<std::mutex> lock(mu);
  stats.prefill_seconds += prefill_s;
  stats.decode_seconds += decode_s;
  stats.running = static_cast<int>(running.size());
  stats.waiting = n_waiting_total;
  stats.steps = step_number;
  stats.loading = static_cast<int>(loading.size());
  stats.kv_blocks_used = pool.n_used();
  stats.kv_blocks_cached = pool.n_cached();
  stats.kv_blocks_pinned_keys = pool.n_pinned_keys();
  stats.kv_blocks_pinned_cached = pool.n_pinned_cached();
  stats.pool_pins_refused = pool.pins_refused();
  stats.pool_pinned_evictions = pool.pinned_evictions();
  if (drafter) stats.draft_prefix_tokens = drafter->prefix_hit_tokens();
  stats.kv_window_blocks_used = pool.n_window_used();
  stats.kv_layer_blocks_used = pool.split() ? stats.kv_blocks_used * pool.n_full_layers() +
                                                  stats.kv_window_blocks_used * pool.n_window_layers()
                                            : stats.kv_blocks_used * pool.n_full_layers();
  stats.kv_layer_blocks_peak = std::max(stats.kv_layer_blocks_peak, stats.kv_layer_blocks_used);
  stats.kv_blocks_used_peak = std::max(stats.kv_blocks_used_peak, stats.kv_blocks_used);
  stats.kv_window_blocks_peak = std::max(stats.kv_window_blocks_peak, stats.kv_window_blocks_used);
}

}  // namespace kvstash
