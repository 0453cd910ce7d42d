#include "server/response_cache.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <ctime>

#include "cache/semantic_entry.h"
#include "common/sha256.h"
#include "server/log.h"
#include "server/sampling_key.h"

namespace kvstash::server {
namespace {

constexpr std::string_view kKeyDomain = "kvstash-response-key-v1";

void update_string(Sha256& h, std::string_view s) {
  h.update_u32(static_cast<std::uint32_t>(s.size()));
  h.update(s);
}

bool header_says_no_cache(std::string_view value) {
  std::string lower(value);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("no-cache") != std::string::npos || lower.find("no-store") != std::string::npos;
}

std::uint64_t now_unix() { return static_cast<std::uint64_t>(std::time(nullptr)); }

}  // namespace

ResponseCache::ResponseCache(std::unique_ptr<cache::TieredStore> store, const cache::ModelFingerprint& fingerprint,
                             ResponseCacheOptions options, std::shared_ptr<const identity::NodeIdentity> self,
                             std::shared_ptr<const identity::TrustList> trust)
    : store_(std::move(store)),
      fingerprint_(fingerprint),
      options_(std::move(options)),
      self_(std::move(self)),
      trust_(std::move(trust)) {
  if (options_.semantic.threshold > 0.0f && options_.embed) {
    semantic_ = std::make_unique<SemanticIndex>(options_.semantic);
    rebuild_semantic_index();
  }
  for (int i = 0; i < std::max(1, options_.lookup_threads); ++i) workers_.emplace_back([this] { worker_loop(); });
}

ResponseCache::~ResponseCache() { stop(); }

void ResponseCache::stop() {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    left.swap(jobs_);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  for (Job& job : left) job.done(LookupResult{});
  std::unique_lock<std::mutex> lock(mu_);  // lookups on the remote lane end within peer_timeout
  remote_idle_.wait(lock, [this] { return remote_in_flight_ == 0; });
}

bool ResponseCache::look_up_remotely(Job&& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    ++remote_in_flight_;
  }
  auto shared = std::make_shared<Job>(std::move(job));
  const bool handed = store_->run_remote([this, shared](bool run) {
    std::size_t bytes = 0;
    std::optional<cache::ResponseRecord> record;
    if (run) {
      record = fetch(shared->key, &bytes, cache::PlanScope::kAll, std::chrono::steady_clock::now() + options_.peer_timeout);
    }
    if (record) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      bytes_served_.fetch_add(bytes, std::memory_order_relaxed);
      LookupResult result;
      result.record = std::move(record);
      shared->done(std::move(result));
    } else {
      shared->exact_done = true;  // the rest (semantic fallback, the miss) on a worker
      bool queued = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!stopping_) {
          jobs_.push_back(std::move(*shared));
          wake_.notify_one();
          queued = true;
        }
      }
      if (!queued) shared->done(LookupResult{});
    }
    std::lock_guard<std::mutex> lock(mu_);
    --remote_in_flight_;
    remote_idle_.notify_all();
  });
  if (handed) return true;
  job = std::move(*shared);
  std::lock_guard<std::mutex> lock(mu_);
  --remote_in_flight_;
  remote_idle_.notify_all();
  return false;
}

void ResponseCache::worker_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (!job.exact_done && store_->has_remote_tiers()) {
      // The local tiers first; the peers only on the remote lane (never on this worker).
      std::size_t bytes = 0;
      if (auto record = fetch(job.key, &bytes, cache::PlanScope::kLocal)) {
        hits_.fetch_add(1, std::memory_order_relaxed);
        bytes_served_.fetch_add(bytes, std::memory_order_relaxed);
        LookupResult result;
        result.record = std::move(record);
        job.done(std::move(result));
        continue;
      }
      if (look_up_remotely(std::move(job))) continue;
      job.exact_done = true;  // the lane is full: the peer lookup is a miss, not a wait
    }
    job.done(run_lookup(job.key, std::move(job.query), job.exact_done));
  }
}

CachePlan ResponseCache::plan(const ParsedRequest& parsed, const GenerationRequest& request,
                              const http::Request& http) const {
  CachePlan plan;
  if (header_says_no_cache(http.header("Cache-Control"))) {
    plan.bypass_reason = "no-cache header";
    return plan;
  }
  if (!parsed.response_cache) {
    plan.bypass_reason = "opted out";
    return plan;
  }
  const SamplingParams& s = request.sampling;
  const bool greedy = s.temperature == 0.0f;
  if (!greedy && !parsed.seed_given) {
    plan.bypass_reason = "sampled without seed";
    return plan;
  }
  Sha256 h;
  h.update(kKeyDomain);
  h.update(fingerprint_.data(), fingerprint_.size());
  update_string(h, request.cache_salt);
  update_string(h, options_.engine_config);
  h.update_u32(parsed.endpoint == Endpoint::kChatCompletions ? 0 : 1);
  h.update_u32(static_cast<std::uint32_t>(request.prompt.size()));
  for (TokenId t : request.prompt) h.update_u32(static_cast<std::uint32_t>(t));
  h.update_u32(std::bit_cast<std::uint32_t>(s.temperature));
  h.update_u32(static_cast<std::uint32_t>(s.top_k));
  h.update_u32(std::bit_cast<std::uint32_t>(s.top_p));
  h.update_u64(greedy ? 0 : s.seed);
  h.update_u32(static_cast<std::uint32_t>(request.max_tokens));
  h.update_u32(request.stop_at_end_of_generation ? 1 : 0);
  h.update_u32(static_cast<std::uint32_t>(request.stop_tokens.size()));
  for (TokenId t : request.stop_tokens) h.update_u32(static_cast<std::uint32_t>(t));
  h.update_u32(static_cast<std::uint32_t>(parsed.stop.size()));
  for (const std::string& stop : parsed.stop) update_string(h, stop);
  h.update_u32(parsed.logprobs ? 1 : 0);
  if (request.n != 1) h.update_u32(static_cast<std::uint32_t>(request.n));  // n = 1 keys stay as they were
  h.update_u32(static_cast<std::uint32_t>(request.top_logprobs));
  h.update_u32(static_cast<std::uint32_t>(request.kv_budget));
  hash_sampling_knobs(h, s);  // logit_bias, penalties, min_p, typical_p, the grammar (nothing when all are off)
  plan.key.bytes = h.finish();
  // A record holds one choice's token events: n > 1 answers are neither served nor stored (the key
  // covers n all the same, so a later record format holding every choice needs no new key).
  if (request.n > 1) plan.bypass_reason = "n > 1";
  return plan;
}

void ResponseCache::lookup(const cache::ChunkKey& key, std::function<void(std::optional<cache::ResponseRecord>)> done) {
  lookup(key, std::nullopt, [done = std::move(done)](LookupResult r) { done(std::move(r.record)); });
}

void ResponseCache::lookup(const cache::ChunkKey& key, std::optional<SemanticQuery> query,
                           std::function<void(LookupResult)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      jobs_.push_back({key, std::move(query), std::move(done)});
      wake_.notify_one();
      return;
    }
  }
  done(LookupResult{});
}

void ResponseCache::reject(const cache::ChunkKey& key, Rejection why, bool erase) {
  rejected_[why].fetch_add(1, std::memory_order_relaxed);
  if (!erase) return;
  // Removes just this record from every tier, now. The lookup worker never waits for the store's
  // write queues (flush() would hold it behind every queued write of every tier, a slow redis's
  // or peer's included, so one planted record could stall lookups): a promotion of the bad record
  // still queued may land after this, and is then rejected and erased by the next lookup of it.
  for (std::size_t t = 0; t < store_->tier_count(); ++t) (void)store_->tier(t).erase(key);
}

std::optional<cache::ResponseRecord> ResponseCache::lookup_now(const cache::ChunkKey& key) {
  std::size_t bytes = 0;
  std::optional<cache::ResponseRecord> record =
      fetch(key, &bytes, cache::PlanScope::kAll, std::chrono::steady_clock::now() + options_.peer_timeout);
  (record ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  bytes_served_.fetch_add(bytes, std::memory_order_relaxed);
  return record;
}

std::optional<cache::ResponseRecord> ResponseCache::fetch(const cache::ChunkKey& key, std::size_t* payload_bytes,
                                                         cache::PlanScope scope,
                                                         std::chrono::steady_clock::time_point deadline) {
  const cache::ChunkMeta expected = cache::response_envelope_meta(key, fingerprint_);
  const cache::LoadPlan plan = store_->plan_load(std::span<const cache::ChunkKey>(&key, 1), {}, scope);
  std::vector<cache::LoadedChunk> loaded = store_->load(std::span<const cache::ChunkMeta>(&expected, 1), plan, deadline);
  if (loaded.empty()) return std::nullopt;
  const std::span<const std::uint8_t> payload = loaded.front().view.payload;
  cache::RecordError why{};
  Expected<cache::ResponseRecord> record = cache::decode_response_record(payload, &why);
  auto miss = [&](std::optional<Rejection> rejection, bool erase) -> std::optional<cache::ResponseRecord> {
    if (rejection) reject(key, *rejection, erase);
    return std::nullopt;
  };
  if (!record) {
    log_line("response cache: record " + key.hex() + " rejected: " + record.status().message());
    return miss(kBadRecord, true);
  }
  if (record->request_key != key || record->model_fingerprint != fingerprint_) return miss(kBadRecord, true);
  if (!identity::verify(record->producer, cache::kResponseSignatureDomain, cache::signed_message(*record),
                        record->signature)) {
    log_line("response cache: record " + key.hex() + " rejected: bad signature or output hash");
    return miss(kBadSignature, true);
  }
  if (!trust_ || !trust_->trusts(record->producer)) {
    // Not erased: a node that trusts its producer may still want it; this node's own answer will
    // replace it.
    return miss(kUntrusted, false);
  }
  if (options_.ttl.count() > 0 && now_unix() > record->created_unix + static_cast<std::uint64_t>(options_.ttl.count())) {
    expired_.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t t = 0; t < store_->tier_count(); ++t) (void)store_->tier(t).erase(key);
    return miss(std::nullopt, false);
  }
  if (payload_bytes) *payload_bytes = payload.size();
  return std::move(*record);
}

void ResponseCache::store(const cache::ChunkKey& key, const Generation& gen, const std::string& text, bool logprobs,
                          bool salted) {
  if (!self_) return;  // nothing to sign with: records are never stored unsigned
  if (gen.computed_on_unchecked()) {  // this node signs only what it computed from KV it trusts
    not_stored_unchecked_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const std::vector<TokenEvent>& events = gen.applied_events();
  if (events.empty()) return;
  cache::ResponseRecord r;
  r.request_key = key;
  r.model_fingerprint = fingerprint_;
  r.producer = self_->public_key();
  r.created_unix = now_unix();
  const Outcome& o = gen.outcome();
  r.prompt_tokens = static_cast<std::uint32_t>(o.prompt_tokens);
  r.completion_tokens = static_cast<std::uint32_t>(o.completion_tokens);
  r.finish_reason = o.finish_reason;
  r.final_finish = static_cast<std::uint8_t>(events.back().finish);
  r.final_event_has_token = events.back().token >= 0;
  r.has_logprobs = logprobs;
  for (const TokenEvent& e : events) {
    if (e.token < 0) continue;
    r.tokens.push_back(e.token);
    if (logprobs) r.logprobs.push_back({e.logprob, e.top_logprobs});
  }
  r.text = text;
  r.signature = self_->sign(cache::kResponseSignatureDomain, cache::signed_message(r));
  Expected<cache::Bytes> bytes = cache::encode_response_record(r);
  if (!bytes) {
    store_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  cache::ChunkMeta meta = cache::response_envelope_meta(key, fingerprint_);
  meta.salted = salted;
  if (Status st = store_->store(meta, *bytes); !st) {
    store_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  stores_.fetch_add(1, std::memory_order_relaxed);
  bytes_stored_.fetch_add(bytes->size(), std::memory_order_relaxed);
}

std::vector<TokenEvent> ResponseCache::replay_events(const cache::ResponseRecord& r) {
  std::vector<TokenEvent> events;
  events.reserve(r.tokens.size() + 1);
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    TokenEvent e;
    e.token = r.tokens[i];
    if (r.has_logprobs) {
      e.logprob = r.logprobs[i].logprob;
      e.top_logprobs = r.logprobs[i].top;
    }
    events.push_back(std::move(e));
  }
  if (!r.final_event_has_token || events.empty()) events.emplace_back();  // token -1
  events.back().finish = static_cast<FinishReason>(r.final_finish);
  for (TokenEvent& e : events) {
    e.prompt_tokens = static_cast<int>(r.prompt_tokens);
    e.cached_tokens = static_cast<int>(r.prompt_tokens);
  }
  return events;
}

std::string ResponseCache::render_metrics() const {
  auto v = [](const std::atomic<std::uint64_t>& a) { return std::to_string(a.load(std::memory_order_relaxed)); };
  std::string out;
  out += "# HELP kvstash_response_cache_requests_total Generation requests by response cache result.\n";
  out += "# TYPE kvstash_response_cache_requests_total counter\n";
  out += "kvstash_response_cache_requests_total{result=\"hit\"} " + v(hits_) + "\n";
  out += "kvstash_response_cache_requests_total{result=\"miss\"} " + v(misses_) + "\n";
  out += "kvstash_response_cache_requests_total{result=\"bypass\"} " + v(bypasses_) + "\n";
  out += "kvstash_response_cache_requests_total{result=\"semantic_hit\"} " + v(semantic_hits_) + "\n";
  if (semantic_) out += render_semantic_metrics();
  out += "# HELP kvstash_response_cache_rejected_records_total Records found but not served, by reason.\n";
  out += "# TYPE kvstash_response_cache_rejected_records_total counter\n";
  const char* reasons[kRejectionKinds] = {"bad_record", "bad_signature", "untrusted"};
  for (int i = 0; i < kRejectionKinds; ++i) {
    out += std::string("kvstash_response_cache_rejected_records_total{reason=\"") + reasons[i] + "\"} " +
           v(rejected_[i]) + "\n";
  }
  out += "# HELP kvstash_response_cache_expired_records_total Records older than --response-cache-ttl (misses).\n";
  out += "# TYPE kvstash_response_cache_expired_records_total counter\n";
  out += "kvstash_response_cache_expired_records_total " + v(expired_) + "\n";
  out += "# HELP kvstash_response_cache_unchecked_total Answers not stored: computed on unchecked KV.\n";
  out += "# TYPE kvstash_response_cache_unchecked_total counter\n";
  out += "kvstash_response_cache_unchecked_total " + v(not_stored_unchecked_) + "\n";
  out += "# HELP kvstash_response_cache_stores_total Records signed and queued for the tiers.\n";
  out += "# TYPE kvstash_response_cache_stores_total counter\n";
  out += "kvstash_response_cache_stores_total " + v(stores_) + "\n";
  out += "# HELP kvstash_response_cache_store_errors_total Answers not stored (record too large, encode failed).\n";
  out += "# TYPE kvstash_response_cache_store_errors_total counter\n";
  out += "kvstash_response_cache_store_errors_total " + v(store_errors_) + "\n";
  out += "# HELP kvstash_response_cache_bytes_total Record bytes served (hits) and stored.\n";
  out += "# TYPE kvstash_response_cache_bytes_total counter\n";
  out += "kvstash_response_cache_bytes_total{direction=\"served\"} " + v(bytes_served_) + "\n";
  out += "kvstash_response_cache_bytes_total{direction=\"stored\"} " + v(bytes_stored_) + "\n";
  if (store_->has_remote_tiers()) {  // the peers: their lookups' queue (TieredStore::run_remote)
    const cache::StoreStats st = store_->stats();
    out += "# HELP kvstash_response_cache_peer_queue Peer record gets and peer lookups waiting for a thread.\n";
    out += "# TYPE kvstash_response_cache_peer_queue gauge\n";
    out += "kvstash_response_cache_peer_queue " + std::to_string(st.remote_queued) + "\n";
    out += "# HELP kvstash_response_cache_peer_dropped_total Peer lookups and gets refused (queue full): misses, not waits.\n";
    out += "# TYPE kvstash_response_cache_peer_dropped_total counter\n";
    out += "kvstash_response_cache_peer_dropped_total{what=\"get\"} " + std::to_string(st.remote_dropped) + "\n";
    out += "kvstash_response_cache_peer_dropped_total{what=\"lookup\"} " + std::to_string(st.remote_lane_dropped) + "\n";
  }
  out += "# HELP kvstash_response_cache_tier_entries Records held per tier (0 where unknown: redis).\n";
  out += "# TYPE kvstash_response_cache_tier_entries gauge\n";
  const std::vector<cache::TierReport> tiers = store_->tier_stats();
  for (const cache::TierReport& t : tiers) {
    out += "kvstash_response_cache_tier_entries{tier=\"" + t.name + "\"} " + std::to_string(t.stats.entries) + "\n";
  }
  out += "# HELP kvstash_response_cache_tier_hits_total Record reads served per tier.\n";
  out += "# TYPE kvstash_response_cache_tier_hits_total counter\n";
  for (const cache::TierReport& t : tiers) {
    out += "kvstash_response_cache_tier_hits_total{tier=\"" + t.name + "\"} " + std::to_string(t.stats.hits) + "\n";
  }
  return out;
}

}  // namespace kvstash::server
