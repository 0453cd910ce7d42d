#include "bench/server_metrics.h"

#include <gtest/gtest.h>

namespace kvstash::bench {
namespace {

TEST(ServerMetrics, ParsesSamplesWithAndWithoutLabels) {
  const MetricSamples s = parse_prometheus_text(
      "# HELP kvstash_spec_drafts_total Sequence steps...\n"
      "# TYPE kvstash_spec_drafts_total counter\n"
      "kvstash_spec_drafts_total 12\n"
      "kvstash_step_seconds{kind=\"predicted\"} 0.0125\n"
      "kvstash_kv_tier_bytes{tier=\"a b\",x=\"}\"} 3e3\n"
      "\n"
      "broken_line_without_value\n"
      "also_broken {unclosed 5\n"
      "nan_free 1.5e-2\n");
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.at("kvstash_spec_drafts_total"), 12);
  EXPECT_DOUBLE_EQ(s.at("kvstash_step_seconds{kind=\"predicted\"}"), 0.0125);
  EXPECT_EQ(s.at("kvstash_kv_tier_bytes{tier=\"a b\",x=\"}\"}"), 3000);
  EXPECT_DOUBLE_EQ(s.at("nan_free"), 0.015);
}

TEST(ServerMetrics, DeltaOfTheRunsCounters) {
  const MetricSamples before = {{"kvstash_spec_drafts_total", 10},
                                {"kvstash_spec_draft_tokens_total", 40},
                                {"kvstash_spec_draft_tokens_accepted_total", 20},
                                {"kvstash_spec_draft_seconds_total", 0.5},
                                {"kvstash_prompt_tokens_total", 1000},
                                {"kvstash_cached_tokens_total", 100}};
  const MetricSamples after = {{"kvstash_spec_drafts_total", 30},
                               {"kvstash_spec_draft_tokens_total", 120},
                               {"kvstash_spec_draft_tokens_accepted_total", 80},
                               {"kvstash_spec_draft_seconds_total", 0.75},
                               {"kvstash_prompt_tokens_total", 3000},
                               {"kvstash_cached_tokens_total", 1100},
                               {"kvstash_prompt_tokens_from_pool_total", 600},
                               {"kvstash_prompt_tokens_from_store_total", 400}};
  const nlohmann::json d = server_counters_delta(before, after);
  EXPECT_EQ(d["speculative"]["drafts"], 20);
  EXPECT_EQ(d["speculative"]["draft_tokens"], 80);
  EXPECT_EQ(d["speculative"]["accepted_tokens"], 60);
  EXPECT_DOUBLE_EQ(d["speculative"]["acceptance"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(d["speculative"]["mean_accepted_length"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(d["speculative"]["draft_seconds"].get<double>(), 0.25);
  EXPECT_EQ(d["prompt_cache"]["prompt_tokens"], 2000);
  EXPECT_EQ(d["prompt_cache"]["cached_tokens"], 1000);
  EXPECT_EQ(d["prompt_cache"]["from_pool"], 600);  // absent before: counted from zero
  const std::string text = format_server_counters(d);
  EXPECT_NE(text.find("acceptance 0.750"), std::string::npos) << text;
  EXPECT_NE(text.find("mean accepted length 3.00"), std::string::npos) << text;
  EXPECT_NE(text.find("cached 1000 (0.500)"), std::string::npos) << text;
}

TEST(ServerMetrics, NoDraftsNoSpeculativePartAndAnotherServerNothing) {
  const MetricSamples idle = {{"kvstash_spec_drafts_total", 5}, {"kvstash_prompt_tokens_total", 9}};
  const nlohmann::json d = server_counters_delta(idle, idle);
  EXPECT_FALSE(d.contains("speculative"));
  EXPECT_TRUE(d.contains("prompt_cache"));
  const MetricSamples vllm = {{"vllm:num_requests_running", 1}};
  EXPECT_TRUE(server_counters_delta({}, vllm).empty());
  EXPECT_EQ(format_server_counters(nlohmann::json::object()), "");
  // A counter that went down was reset by a restart: the run's part counts from zero.
  const nlohmann::json reset = server_counters_delta({{"kvstash_prompt_tokens_total", 500}}, {{"kvstash_prompt_tokens_total", 40}});
  EXPECT_EQ(reset["prompt_cache"]["prompt_tokens"], 40);
}

}  // namespace
}  // namespace kvstash::bench
