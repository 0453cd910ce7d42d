#include "bench/result_io.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "bench/summary_table.h"

namespace kvstash::bench {
namespace {

std::vector<RequestRecord> sample_records() {
  RequestRecord a;
  a.index = 0;
  a.session_id = 3;
  a.round = 1;
  a.start_s = 0.25;
  a.ttft_s = 0.125;
  a.itl_s = {0.01, 0.02, 0.03};
  a.e2e_s = 0.5;
  a.prompt_tokens = 120;
  a.output_tokens = 4;
  a.cached_tokens = 64;
  a.usage_reported = true;
  a.http_status = 200;
  a.label = "stream";
  RequestRecord b;
  b.index = 1;
  b.start_s = 0.3;
  b.e2e_s = 2.0;
  b.error = error_kind::kTimeout;
  b.error_detail = "no answer within 2 s";
  return {a, b};
}

BenchResult sample_result() {
  BenchResult result;
  result.config = {{"url", "http://127.0.0.1:1"}, {"workload", "multi-turn"}};
  result.records = sample_records();
  Slo slo;
  slo.ttft_ms = 300;
  slo.itl_ms = 25;
  result.summary = summarize(result.records, slo);
  result.classes["stream"] = summarize({result.records[0]}, slo);
  return result;
}

TEST(ResultIoTest, RoundTripThroughAFile) {
  const BenchResult result = sample_result();
  const std::string path = testing::TempDir() + "/bench_result_test_" + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(write_result(path, result).is_ok());
  auto back = read_result(path);
  ASSERT_TRUE(back.has_value()) << back.status().to_string();
  EXPECT_EQ(back->config, result.config);
  ASSERT_EQ(back->records.size(), 2u);
  // Records and summary serialise to the same JSON as the originals.
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(record_to_json(back->records[i]), record_to_json(result.records[i]));
  EXPECT_EQ(summary_to_json(back->summary), summary_to_json(result.summary));
  EXPECT_EQ(back->records[1].error, "timeout");
  EXPECT_EQ(back->records[1].cached_tokens, -1);
  EXPECT_EQ(back->summary.slo.ttft_ms, 300);
  EXPECT_EQ(back->summary.slo.tpot_ms, -1);
  EXPECT_EQ(back->summary.slo.itl_ms, 25);
  EXPECT_EQ(back->records[0].label, "stream");
  EXPECT_EQ(back->records[1].label, "");
  ASSERT_EQ(back->classes.size(), 1u);
  EXPECT_EQ(summary_to_json(back->classes.at("stream")), summary_to_json(result.classes.at("stream")));
  EXPECT_EQ(back->classes.at("stream").good_requests, 0);  // its 30 ms gap is past the 25 ms objective
  // And the summary recomputed from the read records is the stored one.
  EXPECT_EQ(summary_to_json(summarize(back->records, back->summary.slo)), summary_to_json(back->summary));
  std::remove(path.c_str());
}

TEST(ResultIoTest, RejectsBadFiles) {
  const std::string path = testing::TempDir() + "/bench_result_bad_" + std::to_string(getpid()) + ".json";
  EXPECT_EQ(read_result(path + ".missing").status().code(), StatusCode::kNotFound);
  for (const char* text : {"not json", R"({"format":"other"})",
                           R"({"format":"kvstash-bench","version":1,"records":[]})",
                           R"({"format":"kvstash-bench","version":9,"summary":{},"records":[]})"}) {
    std::ofstream(path) << text;
    EXPECT_FALSE(read_result(path).has_value()) << text;
  }
  nlohmann::json j = result_to_json(sample_result());
  j["records"][0]["ttft_s"] = "fast";
  EXPECT_EQ(result_from_json(j).status().code(), StatusCode::kCorrupt);
  j = result_to_json(sample_result());
  j["summary"].erase("ttft_ms");
  EXPECT_EQ(result_from_json(j).status().code(), StatusCode::kCorrupt);
  std::remove(path.c_str());
}

TEST(SummaryTableTest, TableListsMetricsAndErrors) {
  const std::string table = format_summary(sample_result().summary);
  EXPECT_NE(table.find("TTFT p99"), std::string::npos);
  EXPECT_NE(table.find("goodput"), std::string::npos);
  EXPECT_NE(table.find("timeout=1"), std::string::npos);
  EXPECT_NE(table.find("round 2 TTFT mean"), std::string::npos);
}

TEST(SummaryTableTest, CompareShowsRatiosBOverA) {
  Summary a, b;
  a.request_throughput = 2;
  b.request_throughput = 3;
  a.ttft_ms.mean = 100;
  b.ttft_ms.mean = 50;
  a.cached_token_ratio = -1;
  b.cached_token_ratio = 0.5;
  const std::string text = format_comparison(a, b, "a.json", "b.json");
  auto line_of = [&](const std::string& label) {
    const auto at = text.find(label);
    EXPECT_NE(at, std::string::npos) << label;
    return text.substr(at, text.find('\n', at) - at);
  };
  EXPECT_NE(line_of("request throughput").find("1.500x"), std::string::npos) << text;
  EXPECT_NE(line_of("TTFT mean").find("0.500x"), std::string::npos);
  const std::string cached = line_of("cached token ratio");
  EXPECT_NE(cached.find("50.0 %"), std::string::npos);
  EXPECT_EQ(cached.find('x'), std::string::npos);  // no ratio against a missing value
  EXPECT_NE(text.find("a.json"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::bench
