#include "bench/metrics.h"

#include <gtest/gtest.h>

namespace kvstash::bench {
namespace {

RequestRecord ok_record(double start, double ttft, std::vector<double> itl, double e2e, int prompt, int output,
                        int cached = -1, int round = 0) {
  RequestRecord r;
  r.start_s = start;
  r.ttft_s = ttft;
  r.itl_s = std::move(itl);
  r.e2e_s = e2e;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.cached_tokens = cached;
  r.round = round;
  return r;
}

RequestRecord failed_record(double start, double e2e, const char* kind) {
  RequestRecord r;
  r.start_s = start;
  r.e2e_s = e2e;
  r.error = kind;
  return r;
}

TEST(PercentileTest, LinearInterpolationLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({7}, 90), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(SummarizeTest, HandMadeRecords) {
  const std::vector<RequestRecord> records = {
      ok_record(0.0, 0.10, {0.02, 0.04}, 0.16, 100, 3, 0),
      ok_record(0.5, 0.30, {0.05}, 0.40, 200, 2, 150),
      ok_record(1.0, 0.20, {}, 0.20, 50, 1),
      failed_record(1.5, 0.5, error_kind::kTimeout),
      failed_record(1.8, 0.01, error_kind::kConnect),
      failed_record(1.9, 0.01, error_kind::kConnect),
  };
  const Summary s = summarize(records, Slo{});
  EXPECT_EQ(s.requests, 6);
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.errors.at("connect"), 2);
  EXPECT_EQ(s.errors.at("timeout"), 1);
  EXPECT_DOUBLE_EQ(s.duration_s, 2.0);  // first start 0, last end 1.5 + 0.5
  EXPECT_EQ(s.prompt_tokens, 350);
  EXPECT_EQ(s.output_tokens, 6);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 178.0);
  EXPECT_EQ(s.ttft_ms.count, 3);
  EXPECT_NEAR(s.ttft_ms.mean, 200, 1e-9);
  EXPECT_NEAR(s.ttft_ms.p50, 200, 1e-9);
  EXPECT_NEAR(s.ttft_ms.max, 300, 1e-9);
  // TPOT: (0.16 - 0.10) / 2 = 30 ms and (0.40 - 0.30) / 1 = 100 ms; the 1-token request has none.
  EXPECT_EQ(s.tpot_ms.count, 2);
  EXPECT_NEAR(s.tpot_ms.mean, 65, 1e-9);
  EXPECT_NEAR(s.tpot_ms.p90, 30 + 0.9 * 70, 1e-9);
  EXPECT_EQ(s.itl_ms.count, 3);
  EXPECT_NEAR(s.itl_ms.mean, (20 + 40 + 50) / 3.0, 1e-9);
  EXPECT_NEAR(s.e2e_ms.p50, 200, 1e-9);
  // Only the second request reports cached tokens: 0 + 150 over prompt 100 + 200.
  EXPECT_EQ(s.cached_tokens, 150);
  EXPECT_NEAR(s.cached_token_ratio, 150.0 / 300.0, 1e-12);
  EXPECT_EQ(s.good_requests, 3);  // no SLO: every completed request is good
  EXPECT_TRUE(s.rounds.empty());
}

TEST(SummarizeTest, GoodputCountsRequestsMeetingEverySlo) {
  const std::vector<RequestRecord> records = {
      ok_record(0, 0.10, {0.02}, 0.12, 10, 2),  // ttft 100, tpot 20
      ok_record(0, 0.50, {0.01}, 0.51, 10, 2),  // ttft too slow
      ok_record(0, 0.10, {0.30}, 0.40, 10, 2),  // tpot too slow
      ok_record(0, 0.05, {}, 0.05, 10, 1),      // 1 token: tpot 0
      failed_record(0, 1.0, error_kind::kHttp5xx),
  };
  Slo slo;
  slo.ttft_ms = 200;
  slo.tpot_ms = 50;
  const Summary s = summarize(records, slo);
  EXPECT_EQ(s.good_requests, 2);
  EXPECT_DOUBLE_EQ(s.duration_s, 1.0);
  EXPECT_DOUBLE_EQ(s.goodput, 2.0);
  EXPECT_EQ(s.cached_token_ratio, -1);
}

TEST(SummarizeTest, PerRoundTtft) {
  const std::vector<RequestRecord> records = {
      ok_record(0, 0.4, {}, 0.5, 100, 1, 0, 0), ok_record(0, 0.6, {}, 0.7, 100, 1, 0, 0),
      ok_record(1, 0.1, {}, 0.2, 200, 1, 100, 1), ok_record(1, 0.3, {}, 0.4, 200, 1, 150, 1),
      failed_record(2, 0.1, error_kind::kRead),
  };
  const Summary s = summarize(records, Slo{});
  ASSERT_EQ(s.rounds.size(), 2u);
  EXPECT_EQ(s.rounds[0].count, 2);
  EXPECT_NEAR(s.rounds[0].mean_ttft_ms, 500, 1e-9);
  EXPECT_NEAR(s.rounds[0].cached_token_ratio, 0, 1e-12);
  EXPECT_NEAR(s.rounds[1].mean_ttft_ms, 200, 1e-9);
  EXPECT_NEAR(s.rounds[1].cached_token_ratio, 250.0 / 400.0, 1e-12);
}

TEST(SummarizeTest, RouterAddedTimeIsPairedPerRequest) {
  // Two routed requests (first byte after 10 and 30 ms, of which the router waited 9.5 and 29 ms on
  // the worker) and one straight to a worker: the router added 0.5 and 1 ms.
  std::vector<RequestRecord> records = {ok_record(0, 0.02, {}, 0.05, 10, 1), ok_record(0, 0.04, {}, 0.06, 10, 1),
                                        ok_record(0, 0.02, {}, 0.05, 10, 1)};
  records[0].ttfb_s = 0.010;
  records[0].upstream_s = 0.0095;
  records[1].ttfb_s = 0.030;
  records[1].upstream_s = 0.029;
  records[2].ttfb_s = 0.012;  // not routed: upstream_s stays -1
  const Summary s = summarize(records, Slo{});
  EXPECT_EQ(s.router_added_ms.count, 2);
  EXPECT_NEAR(s.router_added_ms.max, 1.0, 1e-9);
  EXPECT_NEAR(s.router_added_ms.p50, 0.75, 1e-9);
  EXPECT_EQ(summarize({records[2]}, Slo{}).router_added_ms.count, 0);
}

TEST(SummarizeTest, NoRecords) {
  const Summary s = summarize({}, Slo{});
  EXPECT_EQ(s.requests, 0);
  EXPECT_EQ(s.duration_s, 0);
  EXPECT_EQ(s.request_throughput, 0);
}

TEST(SloTest, Parse) {
  auto slo = parse_slo("ttft:500,tpot:50.5,e2e:3000");
  ASSERT_TRUE(slo.has_value());
  EXPECT_EQ(slo->ttft_ms, 500);
  EXPECT_EQ(slo->tpot_ms, 50.5);
  EXPECT_EQ(slo->e2e_ms, 3000);
  EXPECT_FALSE(parse_slo("")->any());
  for (const char* bad : {"ttft", "ttft:", "ttft:abc", "ttft:-1", "gap:5"}) {
    EXPECT_FALSE(parse_slo(bad).has_value()) << bad;
  }
  EXPECT_EQ(parse_slo("itl:80")->itl_ms, 80);
}

// itl: every gap of a request must be within the objective, its longest included.
TEST(SloTest, ItlObjectiveHoldsForEveryGap) {
  RequestRecord smooth, one_stall;
  for (RequestRecord* r : {&smooth, &one_stall}) {
    r->ttft_s = 0.1;
    r->e2e_s = 1.0;
    r->output_tokens = 5;
    r->usage_reported = true;
    r->http_status = 200;
    r->itl_s = {0.05, 0.05, 0.05, 0.05};
  }
  one_stall.itl_s[2] = 0.25;
  Slo slo;
  slo.itl_ms = 100;
  const Summary s = summarize({smooth, one_stall}, slo);
  EXPECT_EQ(s.good_requests, 1);
  slo.itl_ms = 300;
  EXPECT_EQ(summarize({smooth, one_stall}, slo).good_requests, 2);
}

}  // namespace
}  // namespace kvstash::bench
