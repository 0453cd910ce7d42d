#include "server/metrics.h"

#include <algorithm>
#include <charconv>

namespace kvstash::server {
namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += " ";
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += " ";
  out += type;
  out += "\n";
}

std::string number(double v) {
  // Shortest text that reads back as the same double ("0.025", not "0.025000000000000001").
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

void sample(std::string& out, const char* name, double value) {
  out += name;
  out += " ";
  out += number(value);
  out += "\n";
}

// One family with a sample per tier: NAME{tier="..."} value.
template <typename Field>
void per_tier(std::string& out, const KvStoreSnapshot& store, const char* name, const char* type,
              const char* help, Field field) {
  header(out, name, type, help);
  for (const cache::TierReport& t : store.tiers) {
    out += name;
    out += "{tier=\"" + t.name + "\"} " + number(field(t.stats)) + "\n";
  }
}

void render_kv_store(std::string& out, const KvStoreSnapshot& store) {
  using S = cache::TierStats;
  auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  per_tier(out, store, "kvstash_kv_tier_hits_total", "counter", "KV chunks a tier returned.",
           [&](const S& s) { return d(s.hits); });
  per_tier(out, store, "kvstash_kv_tier_misses_total", "counter", "KV chunk lookups a tier did not have.",
           [&](const S& s) { return d(s.misses); });
  per_tier(out, store, "kvstash_kv_tier_read_bytes_total", "counter", "Chunk bytes read from a tier.",
           [&](const S& s) { return d(s.bytes_read); });
  per_tier(out, store, "kvstash_kv_tier_written_bytes_total", "counter", "Chunk bytes written to a tier.",
           [&](const S& s) { return d(s.bytes_written); });
  // A summary without quantiles: rate(_sum)/rate(_count) is the mean load latency.
  header(out, "kvstash_kv_tier_load_seconds", "summary", "Time of one successful chunk get, by tier.");
  for (const cache::TierReport& t : store.tiers) {
    const std::string label = "{tier=\"" + t.name + "\"} ";
    out += "kvstash_kv_tier_load_seconds_sum" + label + number(d(t.stats.load_latency_us_total) / 1e6) + "\n";
    out += "kvstash_kv_tier_load_seconds_count" + label + number(d(t.stats.loads)) + "\n";
  }
  per_tier(out, store, "kvstash_kv_tier_load_seconds_max", "gauge", "Slowest chunk get so far, by tier.",
           [&](const S& s) { return d(s.load_latency_us_max) / 1e6; });
  per_tier(out, store, "kvstash_kv_tier_entries", "gauge", "Chunks a tier holds (0 where unknown: redis).",
           [&](const S& s) { return d(s.entries); });
  per_tier(out, store, "kvstash_kv_tier_used_bytes", "gauge", "Bytes a tier holds (0 where unknown: redis).",
           [&](const S& s) { return d(s.bytes_used); });
  per_tier(out, store, "kvstash_kv_tier_capacity_bytes", "gauge", "A tier's bound (0 = not bounded here).",
           [&](const S& s) { return d(s.capacity_bytes); });
  per_tier(out, store, "kvstash_kv_tier_evictions_total", "counter", "Chunks a tier evicted to stay in bounds.",
           [&](const S& s) { return d(s.evictions); });
  per_tier(out, store, "kvstash_kv_tier_errors_total", "counter",
           "Failed tier operations (i/o errors, unreachable, timeouts).", [&](const S& s) { return d(s.errors); });
  per_tier(out, store, "kvstash_kv_tier_rejected_chunks_total", "counter",
           "Damaged or mismatched chunks found in a tier, never served, removed.",
           [&](const S& s) { return d(s.rejected_chunks); });
  per_tier(out, store, "kvstash_kv_tier_pinned_entries", "gauge", "Chunks a tier holds pinned now (prompt caching).",
           [&](const S& s) { return d(s.pinned_entries); });
  per_tier(out, store, "kvstash_kv_tier_pinned_bytes", "gauge", "Bytes of the chunks a tier holds pinned now.",
           [&](const S& s) { return d(s.pinned_bytes); });
  per_tier(out, store, "kvstash_kv_tier_pin_intents", "gauge", "Pins of chunks a tier does not hold (yet).",
           [&](const S& s) { return d(s.pin_intents); });
  per_tier(out, store, "kvstash_kv_tier_pins_refused_total", "counter", "Pins refused: past the tier's pinned share.",
           [&](const S& s) { return d(s.pins_refused); });

  const cache::StoreStats& st = store.store;
  header(out, "kvstash_kv_store_chunks_loaded_total", "counter", "Verified chunks loaded from any tier.");
  sample(out, "kvstash_kv_store_chunks_loaded_total", d(st.chunks_loaded));
  header(out, "kvstash_kv_store_chunks_rejected_total", "counter", "Chunks that failed verification.");
  sample(out, "kvstash_kv_store_chunks_rejected_total", d(st.chunks_rejected));
  header(out, "kvstash_kv_store_tier_skips_total", "counter", "Tiers skipped within a request for an error or slowness.");
  sample(out, "kvstash_kv_store_tier_skips_total", d(st.tier_skips));
  header(out, "kvstash_kv_store_writes_queued_total", "counter", "Tier writes accepted by the write-behind queue.");
  sample(out, "kvstash_kv_store_writes_queued_total", d(st.writes_queued));
  header(out, "kvstash_kv_store_writes_dropped_total", "counter", "Tier writes dropped because the queue was full.");
  sample(out, "kvstash_kv_store_writes_dropped_total", d(st.writes_dropped));
  header(out, "kvstash_kv_store_load_plans_total", "counter", "Load plans made (one per request that looks the store up).");
  sample(out, "kvstash_kv_store_load_plans_total", d(st.plans));
  header(out, "kvstash_kv_store_load_deadlines_total", "counter", "Store loads cut short by their deadline.");
  sample(out, "kvstash_kv_store_load_deadlines_total", d(st.load_deadlines));
  header(out, "kvstash_kv_store_remote_queue", "gauge", "Remote-tier (peer) gets and remote-lane loads waiting for a thread.");
  sample(out, "kvstash_kv_store_remote_queue", d(st.remote_queued));
  header(out, "kvstash_kv_store_remote_dropped_total", "counter",
         "Remote-tier (peer) gets and remote-lane loads refused because their queue was full (misses, not waits).");
  sample(out, "kvstash_kv_store_remote_dropped_total{what=\"get\"}", d(st.remote_dropped));
  sample(out, "kvstash_kv_store_remote_dropped_total{what=\"load\"}", d(st.remote_lane_dropped));
  header(out, "kvstash_kv_store_aliases_followed_total", "counter",
         "Prompt tails loaded as the leading blocks of a longer stored chunk (through a prefix alias).");
  sample(out, "kvstash_kv_store_aliases_followed_total", d(st.aliases_followed));
  header(out, "kvstash_kv_store_write_errors_total", "counter", "Tier writes that failed (disk full, redis down).");
  sample(out, "kvstash_kv_store_write_errors_total", d(st.write_errors));
  header(out, "kvstash_kv_store_queue_bytes", "gauge", "Bytes waiting in the write-behind queue.");
  sample(out, "kvstash_kv_store_queue_bytes", d(st.queue_bytes));
}

}  // namespace

void Metrics::count_request(const std::string& endpoint, int http_status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, http_status}];
}

void Metrics::observe_generation(int prompt_tokens, int cached_tokens, int generated_tokens,
                                 double ttft_s, double e2e_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  generated_tokens_ += generated_tokens;
  if (e2e_s >= 0) e2e_.observe(kE2eBuckets, e2e_s);
  if (e2e_s >= 0 && ttft_s >= 0 && generated_tokens > 1) {
    tpot_.observe(kTpotBuckets, std::max(0.0, e2e_s - ttft_s) / (generated_tokens - 1));
  }
  if (ttft_s < 0) return;
  ++ttft_count_;
  ttft_sum_ += ttft_s;
  for (std::size_t i = 0; i < kTtftBuckets.size(); ++i) {
    if (ttft_s <= kTtftBuckets[i]) {
      ++ttft_counts_[i];
      break;
    }
  }
}

namespace {

template <std::size_t N>
void render_histogram(std::string& out, const char* name, const char* help, const std::array<double, N>& bounds,
                      const Metrics::Histogram<N>& h) {
  header(out, name, "histogram", help);
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < N; ++i) {
    cumulative += h.counts[i];
    out += std::string(name) + "_bucket{le=\"" + number(bounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  out += std::string(name) + "_sum " + number(h.sum) + "\n";
  out += std::string(name) + "_count " + std::to_string(h.count) + "\n";
}

void render_http(std::string& out, const http::HttpStats& h) {
  auto d = [](std::int64_t v) { return static_cast<double>(v); };
  header(out, "kvstash_http_connections_open", "gauge", "Client connections open.");
  sample(out, "kvstash_http_connections_open", d(h.connections_open));
  header(out, "kvstash_http_connections_accepted_total", "counter", "Client connections accepted (before the caps).");
  sample(out, "kvstash_http_connections_accepted_total", d(h.connections_accepted));
  header(out, "kvstash_http_connections_rejected_total", "counter", "Connections answered 503 and closed, by reason.");
  out += "kvstash_http_connections_rejected_total{reason=\"max_connections\"} " + number(d(h.rejected_total_limit)) + "\n";
  out += "kvstash_http_connections_rejected_total{reason=\"max_connections_per_client\"} " + number(d(h.rejected_per_client_limit)) + "\n";
  header(out, "kvstash_http_refused_total", "counter", "Requests the HTTP layer refused or cut, by reason.");
  const std::pair<const char*, std::int64_t> reasons[] = {
      {"draining", h.rejected_draining},      {"bad_framing", h.bad_request},
      {"header_too_large", h.header_too_large}, {"body_too_large", h.body_too_large},
      {"header_timeout", h.header_timeout},   {"body_timeout", h.body_timeout},
      {"write_timeout", h.write_timeout},     {"slow_reader", h.slow_reader}};
  for (const auto& [reason, count] : reasons) {
    out += std::string("kvstash_http_refused_total{reason=\"") + reason + "\"} " + number(d(count)) + "\n";
  }
  header(out, "kvstash_http_idle_closed_total", "counter", "Keep-alive connections closed after the idle timeout.");
  sample(out, "kvstash_http_idle_closed_total", d(h.idle_closed));
}

}  // namespace

std::string Metrics::render(const EngineStats& engine, const KvStoreSnapshot& store,
                            const http::HttpStats* http) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  header(out, "kvstash_requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [key, count] : requests_) {
    out += "kvstash_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  }
  header(out, "kvstash_prompt_tokens_total", "counter", "Prompt tokens of finished generations.");
  sample(out, "kvstash_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  header(out, "kvstash_cached_tokens_total", "counter", "Prompt tokens served from the prefix cache.");
  sample(out, "kvstash_cached_tokens_total", static_cast<double>(cached_tokens_));
  header(out, "kvstash_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "kvstash_generated_tokens_total", static_cast<double>(generated_tokens_));

  header(out, "kvstash_ttft_seconds", "histogram", "Time from request to first token.");
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < kTtftBuckets.size(); ++i) {
    cumulative += ttft_counts_[i];
    out += "kvstash_ttft_seconds_bucket{le=\"" + number(kTtftBuckets[i]) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += "kvstash_ttft_seconds_bucket{le=\"+Inf\"} " + std::to_string(ttft_count_) + "\n";
  sample(out, "kvstash_ttft_seconds_sum", ttft_sum_);
  sample(out, "kvstash_ttft_seconds_count", static_cast<double>(ttft_count_));

  render_histogram(out, "kvstash_e2e_request_latency_seconds", "Request latency, arrival to last token.",
                   kE2eBuckets, e2e_);
  render_histogram(out, "kvstash_time_per_output_token_seconds", "Mean time per output token after the first, per request.",
                   kTpotBuckets, tpot_);
  if (http) render_http(out, *http);

  header(out, "kvstash_prefill_seconds_total", "counter", "Engine time spent in prefill.");
  sample(out, "kvstash_prefill_seconds_total", engine.prefill_seconds);
  header(out, "kvstash_decode_seconds_total", "counter", "Engine time spent in decode.");
  sample(out, "kvstash_decode_seconds_total", engine.decode_seconds);
  header(out, "kvstash_requests_running", "gauge", "Sequences in the running batch.");
  sample(out, "kvstash_requests_running", engine.running);
  header(out, "kvstash_requests_waiting", "gauge", "Requests queued for the running batch.");
  sample(out, "kvstash_requests_waiting", engine.waiting);
  header(out, "kvstash_kv_blocks", "gauge", "KV blocks of the engine's pool by state.");
  std::int64_t free_blocks = engine.kv_blocks_total - engine.kv_blocks_used;
  out += "kvstash_kv_blocks{state=\"used\"} " + std::to_string(engine.kv_blocks_used) + "\n";
  out += "kvstash_kv_blocks{state=\"free\"} " + std::to_string(free_blocks) + "\n";
  out += "kvstash_kv_blocks{state=\"cached\"} " + std::to_string(engine.kv_blocks_cached) + "\n";
  header(out, "kvstash_kv_pool_pins", "gauge",
         "The engine pool's live pins (prompt caching): pinned keys, and cached blocks held under one.");
  out += "kvstash_kv_pool_pins{state=\"keys\"} " + std::to_string(engine.kv_blocks_pinned_keys) + "\n";
  out += "kvstash_kv_pool_pins{state=\"cached\"} " + std::to_string(engine.kv_blocks_pinned_cached) + "\n";
  header(out, "kvstash_kv_pool_pins_refused_total", "counter", "Pool pins refused past --pin-max-share of the pool.");
  sample(out, "kvstash_kv_pool_pins_refused_total", static_cast<double>(engine.pool_pins_refused));
  header(out, "kvstash_kv_pool_pinned_evictions_total", "counter",
         "Pinned cached pool blocks evicted because no unpinned cached block was left to evict.");
  sample(out, "kvstash_kv_pool_pinned_evictions_total", static_cast<double>(engine.pool_pinned_evictions));
  header(out, "kvstash_kv_blocks_total", "gauge", "KV blocks in the engine's pool.");
  sample(out, "kvstash_kv_blocks_total", static_cast<double>(engine.kv_blocks_total));
  header(out, "kvstash_prompt_tokens_from_pool_total", "counter", "Cached prompt tokens found in the engine's KV pool.");
  sample(out, "kvstash_prompt_tokens_from_pool_total", static_cast<double>(engine.prompt_tokens_from_pool));
  header(out, "kvstash_prompt_tokens_from_store_total", "counter", "Cached prompt tokens loaded from the tiered KV store.");
  sample(out, "kvstash_prompt_tokens_from_store_total", static_cast<double>(engine.prompt_tokens_from_store));
  header(out, "kvstash_kv_chunks_stored_total", "counter", "KV chunks the engine handed to the tiered store.");
  sample(out, "kvstash_kv_chunks_stored_total", static_cast<double>(engine.chunks_stored));
  header(out, "kvstash_preemptions_total", "counter",
         "Running sequences sent back to wait because the KV pool ran dry (recomputed later).");
  sample(out, "kvstash_preemptions_total", static_cast<double>(engine.preemptions));
  header(out, "kvstash_choices_forked_total", "counter",
         "Choices of n > 1 requests forked on their prompt's KV (n - 1 per request; the prompt is prefilled once).");
  sample(out, "kvstash_choices_forked_total", static_cast<double>(engine.forks));
  header(out, "kvstash_kv_blocks_copied_on_write_total", "counter",
         "Shared KV blocks (a forked prompt's last partial block) copied before a choice wrote into them.");
  sample(out, "kvstash_kv_blocks_copied_on_write_total", static_cast<double>(engine.blocks_copied_on_write));
  header(out, "kvstash_requests_loading", "gauge", "Requests waiting beside the batch while their KV loads from the store.");
  sample(out, "kvstash_requests_loading", static_cast<double>(engine.loading));
  header(out, "kvstash_kv_loads_timed_out_total", "counter",
         "Store loads given up at --kv-load-timeout-ms (the request recomputed its prefix).");
  sample(out, "kvstash_kv_loads_timed_out_total", static_cast<double>(engine.store_loads_timed_out));
  header(out, "kvstash_kv_loads_dropped_total", "counter",
         "Finished store loads dropped to keep the KV held for queued requests within its byte bound (recomputed).");
  sample(out, "kvstash_kv_loads_dropped_total", static_cast<double>(engine.store_loads_dropped));
  header(out, "kvstash_kv_prefetched_bytes", "gauge", "KV loaded from the store and held for requests not yet admitted.");
  sample(out, "kvstash_kv_prefetched_bytes", static_cast<double>(engine.prefetched_bytes));
  header(out, "kvstash_kv_compactions_total", "counter", "KV compactions of sequences over their --kv-budget.");
  sample(out, "kvstash_kv_compactions_total", static_cast<double>(engine.compactions));
  header(out, "kvstash_kv_tokens_evicted_total", "counter", "KV slots dropped by compactions.");
  sample(out, "kvstash_kv_tokens_evicted_total", static_cast<double>(engine.kv_tokens_evicted));
  header(out, "kvstash_kv_blocks_freed_total", "counter", "KV pool blocks returned by compactions.");
  sample(out, "kvstash_kv_blocks_freed_total", static_cast<double>(engine.kv_blocks_freed));
  header(out, "kvstash_kv_compaction_seconds_total", "counter", "Time spent scoring and moving KV in compactions.");
  sample(out, "kvstash_kv_compaction_seconds_total", engine.compaction_seconds);
  header(out, "kvstash_decoding_steps_total", "counter", "Engine steps run while sequences were decoding.");
  sample(out, "kvstash_decoding_steps_total", static_cast<double>(engine.decoding_steps));
  header(out, "kvstash_step_budget_seconds", "gauge",
         "Time budget of the last decoding step (--itl-slo-ms, or a factor of its decode part); 0 = none.");
  sample(out, "kvstash_step_budget_seconds", engine.step_budget_s);
  header(out, "kvstash_steps_over_budget_total", "counter", "Decoding steps whose measured time passed their budget.");
  sample(out, "kvstash_steps_over_budget_total", static_cast<double>(engine.steps_over_budget));
  header(out, "kvstash_steps_predicted_over_budget_total", "counter",
         "Decoding steps planned over their budget: what always progresses (a prefill's block, the first KV install) did not fit.");
  sample(out, "kvstash_steps_predicted_over_budget_total", static_cast<double>(engine.steps_predicted_over_budget));
  header(out, "kvstash_step_seconds", "gauge", "The last step's time: as the step cost model predicted it, and measured.");
  out += "kvstash_step_seconds{kind=\"predicted\"} " + number(engine.last_step_predicted_s) + "\n";
  out += "kvstash_step_seconds{kind=\"measured\"} " + number(engine.last_step_measured_s) + "\n";
  header(out, "kvstash_spec_drafts_total", "counter",
         "Sequence steps that verified a speculative draft (--spec); mean accepted length = "
         "kvstash_spec_draft_tokens_accepted_total / kvstash_spec_drafts_total.");
  sample(out, "kvstash_spec_drafts_total", static_cast<double>(engine.drafts));
  header(out, "kvstash_spec_draft_prefix_tokens_total", "counter",
         "Draft-model KV tokens taken from the draft pool's prefix cache instead of computed.");
  sample(out, "kvstash_spec_draft_prefix_tokens_total", static_cast<double>(engine.draft_prefix_tokens));
  header(out, "kvstash_spec_draft_tokens_total", "counter", "Tokens drafted by speculative decoding and verified.");
  sample(out, "kvstash_spec_draft_tokens_total", static_cast<double>(engine.draft_tokens));
  header(out, "kvstash_spec_draft_tokens_accepted_total", "counter",
         "Drafted tokens the target model sampled too (kept); acceptance rate = this / kvstash_spec_draft_tokens_total.");
  sample(out, "kvstash_spec_draft_tokens_accepted_total", static_cast<double>(engine.draft_tokens_accepted));
  header(out, "kvstash_spec_acceptance_ratio", "gauge", "Drafted tokens accepted / drafted, since the start (0 before any draft).");
  sample(out, "kvstash_spec_acceptance_ratio",
         engine.draft_tokens > 0 ? static_cast<double>(engine.draft_tokens_accepted) / static_cast<double>(engine.draft_tokens) : 0.0);
  header(out, "kvstash_spec_mean_accepted_length", "gauge", "Drafted tokens accepted per verified draft, since the start.");
  sample(out, "kvstash_spec_mean_accepted_length",
         engine.drafts > 0 ? static_cast<double>(engine.draft_tokens_accepted) / static_cast<double>(engine.drafts) : 0.0);
  header(out, "kvstash_spec_draft_seconds_total", "counter", "Time spent drafting (looking n-grams up, or the draft model's forward passes).");
  sample(out, "kvstash_spec_draft_seconds_total", engine.draft_seconds);
  if (store.enabled) render_kv_store(out, store);
  return out;
}

}  // namespace kvstash::server
