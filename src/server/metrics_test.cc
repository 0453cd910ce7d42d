#include "server/metrics.h"

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Metrics, RendersCountersHistogramAndEngineGauges) {
  Metrics m;
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 400);
  m.observe_generation(10, 4, 5, 0.02);
  m.observe_generation(20, 0, 7, 3.0);
  m.observe_generation(5, 0, 0, -1);  // no first token: not in the histogram
  EngineStats e;
  e.running = 2;
  e.waiting = 3;
  e.kv_blocks_total = 100;
  e.kv_blocks_used = 30;
  e.kv_blocks_cached = 12;
  e.prefill_seconds = 1.5;
  e.preemptions = 4;
  e.forks = 6;
  e.blocks_copied_on_write = 5;
  e.compactions = 3;
  e.kv_tokens_evicted = 384;
  e.kv_blocks_freed = 24;
  e.loading = 2;
  e.decoding_steps = 40;
  e.step_budget_s = 0.25;
  e.steps_over_budget = 3;
  e.steps_predicted_over_budget = 1;
  e.last_step_predicted_s = 0.125;
  e.last_step_measured_s = 0.5;
  e.drafts = 10;
  e.draft_tokens = 40;
  e.draft_tokens_accepted = 25;
  e.draft_seconds = 0.5;
  std::string text = m.render(e);
  EXPECT_TRUE(has_line(text, "kvstash_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "kvstash_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1"));
  EXPECT_TRUE(has_line(text, "kvstash_prompt_tokens_total 35"));
  EXPECT_TRUE(has_line(text, "kvstash_cached_tokens_total 4"));
  EXPECT_TRUE(has_line(text, "kvstash_generated_tokens_total 12"));
  EXPECT_TRUE(has_line(text, "kvstash_ttft_seconds_bucket{le=\"0.01\"} 0"));
  EXPECT_TRUE(has_line(text, "kvstash_ttft_seconds_bucket{le=\"0.025\"} 1"));
  EXPECT_TRUE(has_line(text, "kvstash_ttft_seconds_bucket{le=\"2.5\"} 1"));
  EXPECT_TRUE(has_line(text, "kvstash_ttft_seconds_bucket{le=\"5\"} 2"));
  EXPECT_TRUE(has_line(text, "kvstash_ttft_seconds_bucket{le=\"+Inf\"} 2"));
  EXPECT_TRUE(has_line(text, "kvstash_ttft_seconds_count 2"));
  EXPECT_TRUE(has_line(text, "kvstash_requests_running 2"));
  EXPECT_TRUE(has_line(text, "kvstash_requests_waiting 3"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_blocks{state=\"used\"} 30"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_blocks{state=\"free\"} 70"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_blocks{state=\"cached\"} 12"));
  EXPECT_TRUE(has_line(text, "kvstash_prefill_seconds_total 1.5"));
  EXPECT_TRUE(has_line(text, "kvstash_preemptions_total 4"));
  EXPECT_TRUE(has_line(text, "kvstash_choices_forked_total 6"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_blocks_copied_on_write_total 5"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_compactions_total 3"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tokens_evicted_total 384"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_blocks_freed_total 24"));
  EXPECT_TRUE(has_line(text, "kvstash_requests_loading 2"));
  EXPECT_TRUE(has_line(text, "kvstash_decoding_steps_total 40"));
  EXPECT_TRUE(has_line(text, "kvstash_step_budget_seconds 0.25"));
  EXPECT_TRUE(has_line(text, "kvstash_steps_over_budget_total 3"));
  EXPECT_TRUE(has_line(text, "kvstash_steps_predicted_over_budget_total 1"));
  EXPECT_TRUE(has_line(text, "kvstash_step_seconds{kind=\"predicted\"} 0.125"));
  EXPECT_TRUE(has_line(text, "kvstash_step_seconds{kind=\"measured\"} 0.5"));
  EXPECT_TRUE(has_line(text, "kvstash_spec_drafts_total 10"));
  EXPECT_TRUE(has_line(text, "kvstash_spec_draft_tokens_total 40"));
  EXPECT_TRUE(has_line(text, "kvstash_spec_draft_tokens_accepted_total 25"));
  EXPECT_TRUE(has_line(text, "kvstash_spec_acceptance_ratio 0.625"));
  EXPECT_TRUE(has_line(text, "kvstash_spec_mean_accepted_length 2.5"));
  EXPECT_TRUE(has_line(text, "kvstash_spec_draft_seconds_total 0.5"));
  EXPECT_NE(text.find("# TYPE kvstash_preemptions_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvstash_ttft_seconds histogram"), std::string::npos);
}

TEST(Metrics, RendersKvStoreFamiliesPerTier) {
  Metrics m;
  EngineStats e;
  e.prompt_tokens_from_pool = 32;
  e.prompt_tokens_from_store = 256;
  e.chunks_stored = 7;
  KvStoreSnapshot store;
  store.enabled = true;
  cache::TierReport memory{"memory", {}};
  memory.stats.hits = 3;
  memory.stats.misses = 1;
  memory.stats.bytes_read = 4096;
  memory.stats.entries = 2;
  memory.stats.bytes_used = 8192;
  memory.stats.capacity_bytes = 1 << 20;
  memory.stats.loads = 3;
  memory.stats.load_latency_us_total = 1500;
  memory.stats.load_latency_us_max = 900;
  cache::TierReport redis{"redis", {}};
  redis.stats.errors = 4;
  redis.stats.rejected_chunks = 2;
  redis.stats.bytes_written = 100;
  store.tiers = {memory, redis};
  store.store.writes_queued = 9;
  store.store.writes_dropped = 1;
  store.store.chunks_rejected = 2;
  std::string text = m.render(e, store);
  EXPECT_TRUE(has_line(text, "kvstash_prompt_tokens_from_pool_total 32")) << text;
  EXPECT_TRUE(has_line(text, "kvstash_prompt_tokens_from_store_total 256"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_chunks_stored_total 7"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_hits_total{tier=\"memory\"} 3"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_hits_total{tier=\"redis\"} 0"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_misses_total{tier=\"memory\"} 1"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_read_bytes_total{tier=\"memory\"} 4096"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_written_bytes_total{tier=\"redis\"} 100"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_load_seconds_sum{tier=\"memory\"} 0.0015"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_load_seconds_count{tier=\"memory\"} 3"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_load_seconds_max{tier=\"memory\"} 9e-04"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_entries{tier=\"memory\"} 2"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_used_bytes{tier=\"memory\"} 8192"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_capacity_bytes{tier=\"memory\"} 1048576"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_errors_total{tier=\"redis\"} 4"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_tier_rejected_chunks_total{tier=\"redis\"} 2"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_store_writes_queued_total 9"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_store_writes_dropped_total 1"));
  EXPECT_TRUE(has_line(text, "kvstash_kv_store_chunks_rejected_total 2"));
  EXPECT_NE(text.find("# TYPE kvstash_kv_tier_load_seconds summary"), std::string::npos);
}

TEST(Metrics, NoKvStoreFamiliesWithoutAStore) {
  Metrics m;
  std::string text = m.render(EngineStats{});
  EXPECT_EQ(text.find("kvstash_kv_tier_"), std::string::npos);
  EXPECT_EQ(text.find("kvstash_kv_store_"), std::string::npos);
  EXPECT_TRUE(has_line(text, "kvstash_prompt_tokens_from_store_total 0"));
}

}  // namespace
}  // namespace kvstash::server
