// The engine: a model, a paged KV block pool, a scheduler that runs continuous batching with
// chunked prefill, a sampler and the in-engine prefix cache.
//
// Requests are submitted from any thread; one engine thread runs steps (a step = one batched
// forward pass mixing prefill chunks and decode tokens) and reports each generated token through
// the request's callback, on the engine thread. Callbacks must be quick and must not call back
// into the engine except cancel().
//
// Thread safety: submit(), cancel() and stats() are safe from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvstash/status.h"
#include "tokenizer/tokenizer.h"

namespace kvstash {

class Model;
namespace grammar {
class CompiledGrammar;
}
namespace cache {
class TieredStore;
class KvEventLog;
}

// How the sampler turns a row of logits into a token (engine/sampler.h has the order in which the
// knobs apply and their exact definitions). Every field changes the output; the response cache's
// key covers them all (server/sampling_key.h).
struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = no limit
  float top_p = 1.0f;        // 1 = no limit
  std::uint64_t seed = 0;    // per request; same seed + same prompt = same output
  float min_p = 0.0f;        // 0 = off; drops tokens with p < min_p * p(most likely)
  float typical_p = 1.0f;    // 1 = off; locally typical sampling (Meister et al. 2022)
  float top_n_sigma = -1.0f; // < 0 = off; keeps logits >= max - top_n_sigma * stddev (Tang et al. 2024)
  // OpenAI's penalties over the generated tokens: logit -= count * frequency + (count > 0) * presence.
  float presence_penalty = 0.0f;   // 0 = off
  float frequency_penalty = 0.0f;  // 0 = off
  // llama.cpp's repeat_penalty over the last repeat_last_n tokens of the sequence (prompt included):
  // a positive logit is divided by it, a negative one multiplied. 1 = off.
  float repetition_penalty = 1.0f;
  int repeat_last_n = 64;          // llama.cpp's default; -1 = the whole sequence, 0 = off
  // OpenAI's logit_bias: added to the token's logit; -100 bans the token. Sorted by id, unique.
  std::vector<std::pair<TokenId, float>> logit_bias;
  // Constrained decoding: the grammar every generated token must keep valid (grammar/), shared
  // with every request of the same schema. Null = none.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
};

struct GenerationRequest {
  std::vector<TokenId> prompt;  // already tokenized, BOS included if the model wants it
  SamplingParams sampling;
  int max_tokens = 16;             // tokens to generate at most
  bool stop_at_end_of_generation = true;  // stop on the tokenizer's EOS/EOT tokens
  std::vector<TokenId> stop_tokens;       // extra token ids that end generation
  std::string cache_salt;          // tenant namespace: no KV sharing between salts
  int top_logprobs = 0;            // alternatives to report per token (0..20)
  // KV budget in tokens for this request (engine/kv_compactor.h): -1 = the engine's
  // (EngineOptions::kv_budget.budget), 0 = none (full attention), else at least the protected sets.
  int kv_budget = -1;
  // Prompt caching (docs/prompt-caching.md): keep the store's KV of the prompt's first `tokens`
  // tokens for `ttl` in every local tier (cache/pins.h), as a breakpoint of Anthropic's
  // cache_control or OpenAI's prompt_cache_retention asks. Needs a KV store; empty = no pin.
  struct Pin {
    int tokens = 0;
    std::chrono::seconds ttl{0};
  };
  std::vector<Pin> pins;
  // Choices (OpenAI's `n`): the prompt is prefilled once, then n sequences fork on its KV (full
  // blocks shared by reference, the last partial block copied on its first write), each with its
  // own sampler, seed (choice_seed), grammar state and stop handling. 1..EngineOptions::max_running.
  int n = 1;
};

// The seed of choice `index` of a request seeded `seed`: choice 0 keeps the request's seed (so
// n = 1 and the first of n choices agree), choice i > 0 takes SplitMix64(seed + i), so choices
// differ from each other and from any request seeded with a nearby value's first choice.
std::uint64_t choice_seed(std::uint64_t seed, int index);

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

struct TokenEvent {
  TokenId token = -1;     // -1 on the final event of a request that ends without a token
  float logprob = 0.0f;   // log-probability of `token` under the unmodified distribution
  std::vector<std::pair<TokenId, float>> top_logprobs;
  FinishReason finish = FinishReason::kNone;  // != kNone on the request's last event
  std::string error;                          // set when finish == kError
  int prompt_tokens = 0;   // filled on every event
  int cached_tokens = 0;   // prompt tokens whose KV was reused (not prefilled)
  int pinned_tokens = 0;   // the longest prefix the request pinned, whole blocks only (GenerationRequest::pins)
  double ttft_s = 0.0;     // seconds from submit to the first token
  // The KV this token was computed on includes unchecked KV (an unknown peer's, taken without a
  // spot check, or KV computed on such): the answer must never be signed or cached as a record.
  bool unchecked = false;
  int choice = 0;  // which of the request's n choices this event belongs to (0..n-1)
};

using TokenCallback = std::function<void(const TokenEvent&)>;

enum class EvictionPolicy {
  kTriAttention,  // the scoring above
  kWindow,        // sinks + the most recent tokens (StreamingLLM)
  kRandom,        // sinks + recent window + a uniform random choice of the rest (a baseline)
};

struct KvBudgetOptions {
  int budget = 0;           // KV slots a sequence may hold; 0 = no budget (full attention)
  int compact_every = 128;  // tokens evicted per compaction (compaction runs at `budget` slots)
  int sinks = 4;            // first tokens always kept (attention sinks)
  int recent = 128;         // last tokens always kept
  EvictionPolicy policy = EvictionPolicy::kTriAttention;
  std::uint64_t seed = 0;   // kRandom only
};

// The step cost model's coefficients (engine/step_cost.h), in seconds: what any forward costs,
// each decode row (its logits row included), each prefill token, each attention (query, key) pair,
// each KV block installed from a loaded store chunk.
struct StepCostParams {
  double base_s = 0;
  double per_decode_row_s = 0;
  double per_row_s = 0;
  double per_pair_s = 0;
  double per_block_install_s = 0;
};

// One step that ran a forward, as the step-time budget saw it (EngineOptions::on_step_record).
struct StepRecord {
  std::int64_t step = 0;
  int decode_rows = 0;        // sequences decoding one token
  int prefill_tokens = 0;
  int installed_blocks = 0;   // KV blocks installed from the store at this step's admissions
  double budget_s = 0;        // 0: no budget (none set, or no sequence decoding)
  double predicted_s = 0;     // the cost model's prediction for the step as it ran
  double measured_s = 0;      // the forward, sampling and installs, measured
  double install_s = 0;       // of which the KV installs from the store
  // The step may be over its budget by design: what always progresses did not fit in it: the
  // oldest prefill's minimum (one block's worth of tokens), the step's first KV install, or (with
  // an absolute itl_slo_ms) the decode rows themselves.
  bool forced_progress = false;
  bool prefill_cut = false;  // the budget shortened a prefill chunk, or left one out of the step
};

// Speculative decoding (engine/speculative.h): who proposes the tokens a decoding sequence's step
// verifies besides its own.
enum class DraftKind {
  kNone,   // off: one token per decoding sequence per step
  kNgram,  // prompt lookup: the continuation of the sequence's last n-gram where it occurred before
  kModel,  // a draft model with the same vocabulary drafts greedily (engine/draft_model.h)
};

struct SpeculativeOptions {
  DraftKind draft = DraftKind::kNone;
  int max_draft = 8;      // drafted tokens per sequence and step at most (k); 1..64
  int max_ngram = 3;      // the longest n-gram looked up (tried first), then shorter ones
  int min_ngram = 1;      // the shortest n-gram looked up; 1 <= min_ngram <= max_ngram
  // Speculation only while the step has at most this many decoding sequences: past it the batch
  // already reads each weight for many rows, and drafts would cost their rows' compute.
  int max_decoders = 4;
  // DraftKind::kModel: the draft model (same vocabulary as the target: same token count, same
  // token texts; refused otherwise). Not owned; must outlive the engine.
  const Model* draft_model = nullptr;
  // Its own paged KV pool, in tokens; 0 = max_decoders * n_ctx (every sequence that may draft at
  // once, at full length). A sequence the pool cannot hold skips drafting until it can.
  std::int64_t draft_kv_tokens = 0;
};

struct EngineOptions {
  int n_ctx = 4096;                 // longest sequence (prompt + generated), tokens
  int max_running = 16;             // sequences in the running batch at most
  int block_size = 16;              // tokens per KV block
  std::int64_t kv_pool_tokens = 0;  // KV pool capacity in tokens; 0 = max_running * n_ctx / 2
  int prefill_chunk = 512;          // tokens of one prompt prefilled per step at most
  int step_token_budget = 1024;     // tokens (prefill + decode) per step at most
  int max_queued = 64;              // waiting requests beyond the running batch; more = rejected
  bool prefix_cache = true;         // keep and reuse full blocks by prefix hash
  double pool_pin_max_share = 0.5;  // share of the pool's blocks that pins may hold (block_pool.h)
  // Models with sliding-window layers (engine/block_pool.h): a sequence's window layers' KV in
  // blocks wholly before its window goes back to the pool as it grows. Off keeps every layer's
  // KV for every token (the all-global accounting; the same output, for comparisons).
  bool free_window_kv = true;
  int n_threads = 0;                // 0 = all cores
  // The tiered KV store (memory → disk → redis) behind the pool, or nullptr for none. Not owned;
  // must outlive the engine. Full chunks of chunk_tokens tokens are looked up there on admission
  // (after the pool's own prefix cache) and written there once computed.
  cache::TieredStore* kv_store = nullptr;
  int chunk_tokens = 256;           // a multiple of block_size
  // KV events (cache/kv_events.h): the pool's block keys are published here once per step, or
  // nullptr for none. Not owned; must outlive the engine.
  cache::KvEventLog* kv_events = nullptr;
  // A request whose prompt has chunks in the store waits (off the batch) while they load; past
  // this it stops waiting and computes them instead. Default: well above a 4,000-token load from
  // any local tier or Redis, well below the prefill it saves.
  std::chrono::milliseconds store_load_timeout{2000};
  // KV loaded from the store and held in host memory for requests not yet admitted, at most
  // (bytes; the count of such requests is bounded by the queue, their size by this). A finished
  // load that would pass it is dropped and its request recomputes. Default 1 GiB.
  std::size_t max_prefetched_bytes = std::size_t{1} << 30;
  // Long generations in a fixed KV budget (off by default); requests may override the budget.
  KvBudgetOptions kv_budget{};
  // Speculative decoding (off by default). Greedy and seeded output is the same with it as without.
  SpeculativeOptions speculative{};
  // For test harnesses: called on the engine thread at the start of every step with the step's
  // number (0, 1, ...), before new requests are taken in; it may call submit() and cancel(). With
  // it a harness places arrivals and cancellations at exact steps, so a seed replays exactly.
  std::function<void(std::int64_t step)> on_step{};
  // The step-time budget (issue 34, docs/step-budget.md): while any sequence decodes, prefill chunks
  // (and KV installs from the store) are sized so the step's predicted time stays within it.
  // < 0: itl_slo_factor times the predicted time of the step's decode part alone; 0: none
  // (throughput first: chunks of prefill_chunk); > 0: this many milliseconds.
  double itl_slo_ms = 0;
  double itl_slo_factor = 2.0;
  // Under the budget, the oldest prefill still gets this many tokens per step (its TTFT stays
  // bounded: at most one step per prompt token), even past the budget. One token: where a block of
  // prefill costs several decode steps (two loaded cores: 16 tokens ~ 4 steps), a block's minimum,
  // not the budget, set the streams' gaps (docs/step-budget.md).
  int min_prefill_tokens = 1;
  // The step cost model's starting coefficients; all zero = measured by a few forwards at create()
  // (well under a second for a 0.5B model). Tests set them to skip the calibration.
  StepCostParams step_cost{};
  bool step_cost_online = true;  // refine the model from each step's measured time
  // With the budget on and no step_cost given: measure the coefficients the first time the engine
  // has been idle for calibrate_idle_s, instead of at create() (serve's first start of a model: the
  // calibration's second of forwards leaves the start-up path, issue 37). No budget applies until
  // then (EngineStats::step_cost_pending). A request that arrives mid-calibration stops it after
  // the forward in progress (it waits for at most that one); it runs again at the next idle period.
  bool calibrate_when_idle = false;
  double calibrate_idle_s = 1.0;
  // Asked on the engine thread before a deferred calibration starts; false waits another idle
  // period (serve: while the prepared weights are being written, which would skew the timings).
  std::function<bool()> calibration_may_start{};
  // Called on the engine thread with what a deferred calibration measured, or why it could not
  // (a forward's error; the budget then stays off).
  std::function<void(const Expected<StepCostParams>&)> on_step_cost_measured{};
  // Called once on the engine thread when the engine has settled after create(): idle for half a
  // second, or 2 s after create() if it never was. Work that would slow a request sharing the
  // cores with it waits for this: the KV pool's prefault (block_pool.h) starts then, and serve
  // writes a first start's prepared weights then (not beside a cold start's first request).
  std::function<void()> on_settled{};
  // For tests and traces: called on the engine thread after every step that ran a forward.
  std::function<void(const StepRecord&)> on_step_record{};
};

struct EngineStats {
  std::int64_t requests_finished = 0;  // requests (once each, whatever their n) that ended
  std::int64_t prompt_tokens = 0;      // their prompts' tokens, once per request
  std::int64_t cached_prompt_tokens = 0;
  std::int64_t generated_tokens = 0;  // every choice's
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int running = 0;
  int waiting = 0;
  std::int64_t kv_blocks_total = 0;
  std::int64_t kv_blocks_used = 0;    // referenced by a sequence
  std::int64_t kv_blocks_cached = 0;  // free but holding reusable prefix KV
  // With window layers (engine/block_pool.h): the window group's blocks referenced, and the KV
  // held in one layer's blocks: kv_blocks_used * full layers + kv_window_blocks_used * window
  // layers (kv_blocks_used * n_layers without window layers, or with free_window_kv off). The
  // peaks are over every step so far.
  std::int64_t kv_window_blocks_used = 0;
  std::int64_t kv_layer_blocks_used = 0;
  std::int64_t kv_layer_blocks_peak = 0;
  std::int64_t kv_blocks_used_peak = 0;
  std::int64_t kv_window_blocks_peak = 0;
  std::int64_t prompt_tokens_from_pool = 0;   // cached prompt tokens found in the engine's pool
  std::int64_t prompt_tokens_from_store = 0;  // cached prompt tokens loaded from the tiered store
  std::int64_t chunks_stored = 0;             // chunks handed to the store's write-behind queue
  // chunks not stored because a block's window layers' KV was freed already (block_pool.h)
  std::int64_t chunks_not_stored_window = 0;
  std::int64_t preemptions = 0;               // running sequences sent back to wait (pool ran dry)
  std::int64_t steps = 0;                     // scheduler steps run (batched forward passes or not)
  int loading = 0;                            // requests waiting for their KV to load from the store
  std::int64_t store_loads_timed_out = 0;     // loads given up at store_load_timeout (recomputed)
  std::int64_t store_loads_dropped = 0;       // loads dropped at max_prefetched_bytes (recomputed)
  std::int64_t prefetched_bytes = 0;          // KV held for requests not yet admitted (last poll)
  std::int64_t store_loads_finished = 0;      // prefetch jobs whose I/O ended (counted when it ends)
  std::int64_t compactions = 0;               // KV compactions run (sequences with a budget)
  std::int64_t kv_tokens_evicted = 0;         // KV slots they dropped
  std::int64_t kv_blocks_freed = 0;           // pool blocks they returned
  double compaction_seconds = 0;              // time spent scoring and moving KV
  std::int64_t compacted_preemptions = 0;     // preempted after a compaction (recomputed in full)
  std::int64_t compactions_postponed = 0;     // no block for a copy-on-write: retried next token
  std::int64_t pinned_keys = 0;               // store keys pinned for requests (prompt caching)
  std::int64_t pool_pinned_keys_total = 0;    // pool block keys pinned or refreshed for requests
  std::int64_t draft_prefix_tokens = 0;       // draft-model KV tokens taken from its pool's prefix cache
  std::int64_t kv_blocks_pinned_keys = 0;     // the pool's live pins (last step), cached or in use
  std::int64_t kv_blocks_pinned_cached = 0;   // cached pool blocks under a pin (last step)
  std::int64_t pool_pins_refused = 0;         // pool pins refused past the pinned share
  std::int64_t pool_pinned_evictions = 0;     // pinned cached blocks evicted: nothing unpinned was left
  std::int64_t prompt_tokens_computed = 0;    // prompt tokens whose KV a forward pass computed
  std::int64_t forks = 0;                     // choices forked from a prompt's KV (n - 1 per request)
  std::int64_t blocks_copied_on_write = 0;    // shared partial blocks copied before a write
  // The step-time budget (EngineOptions::itl_slo_ms): steps run with sequences decoding, the last
  // such step's budget (0 = none), those whose measured time passed it, and those whose predicted
  // time did (only what always progresses does that: StepRecord::forced_progress).
  std::int64_t decoding_steps = 0;
  double step_budget_s = 0;
  std::int64_t steps_over_budget = 0;
  std::int64_t steps_predicted_over_budget = 0;
  double last_step_predicted_s = 0;
  double last_step_measured_s = 0;
  StepCostParams step_cost{};  // the coefficients the engine calibrated (or was given)
  bool step_cost_pending = false;  // calibrate_when_idle: not measured yet (no budget applies)
  // Speculative decoding: acceptance rate = draft_tokens_accepted / draft_tokens; mean accepted
  // length = draft_tokens_accepted / drafts.
  std::int64_t drafts = 0;                 // sequence steps that verified a draft
  std::int64_t draft_tokens = 0;           // tokens drafted (and verified)
  std::int64_t draft_tokens_accepted = 0;  // drafted tokens the target sampled too (kept)
  double draft_seconds = 0;                // time spent drafting
};

class Engine {
 public:
  // Starts the engine thread. The model must outlive the engine.
  static Expected<std::unique_ptr<Engine>> create(const Model& model, const EngineOptions& options);
  ~Engine();  // cancels everything, joins the engine thread

  // Queues a request. Errors: kInvalidArgument (empty prompt, prompt + max_tokens > n_ctx,
  // token id out of range, n outside 1..max_running), kResourceExhausted (queue full). On success
  // every choice of the request gets exactly one final event (finish != kNone) through
  // `on_token`, which carries its TokenEvent::choice; a request with n > 1 thus gets n.
  Expected<std::uint64_t> submit(GenerationRequest request, TokenCallback on_token);
  // Ends a request early, all its choices (their final events have FinishReason::kCancelled);
  // frees their blocks.
  void cancel(std::uint64_t request_id);
  // A producer was banned: the prefix cache forgets every block derived from its KV (on the engine
  // thread, before its next step). Safe from any thread.
  void forget_producer(const std::array<std::uint8_t, 32>& producer);
  EngineStats stats() const;
  const Model& model() const;
  const EngineOptions& options() const;
  // The kv_format of every key and chunk this engine makes: element type and pool layout
  // ("f16-blk16-v2": f16, blocks of 16 tokens each holding all layers' K then V, each KV head's
  // 16 rows together; model.h, KvPoolView).
  const std::string& kv_format() const;

 private:
  Engine() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The whole output of one request, for callers that wait for it (the run command, tests).
struct GenerationResult {
  std::vector<TokenId> tokens;  // generated tokens (the stop token included when one ended it)
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int prompt_tokens = 0;
  int cached_tokens = 0;
  double ttft_s = 0.0;
  double total_s = 0.0;
  bool unchecked = false;  // some event was computed on unchecked KV (TokenEvent::unchecked)
};

// Submits `request` and blocks until it finishes. `on_token`, if set, sees each token as it comes
// (on the engine thread). Errors are submit()'s, and kInvalidArgument for n != 1 (use
// generate_choices); a request that ends in kError has it in `error`.
Expected<GenerationResult> generate(Engine& engine, GenerationRequest request,
                                    std::function<void(TokenId)> on_token = {});
// The same for a request of any n: one result per choice, in choice order.
Expected<std::vector<GenerationResult>> generate_choices(Engine& engine, GenerationRequest request);

}  // namespace kvstash
