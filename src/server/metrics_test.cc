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
  EXPECT_NE(text.find("# TYPE kvstash_ttft_seconds histogram"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::server
