#include "bench/sse.h"

#include <gtest/gtest.h>

#include "bench/stream_collector.h"

namespace kvstash::bench {
namespace {

std::vector<std::string> feed_all(const std::string& bytes, std::size_t piece) {
  SseParser parser;
  std::vector<std::string> events;
  for (std::size_t i = 0; i < bytes.size(); i += piece) {
    parser.feed(std::string_view(bytes).substr(i, piece), [&](const std::string& d) { events.push_back(d); });
  }
  return events;
}

TEST(SseParserTest, SameEventsWhateverThePieces) {
  const std::string stream =
      ": keep-alive comment\n"
      "data: {\"a\":1}\n\n"
      "event: message\r\ndata:{\"b\":2}\r\n\r\n"
      "data: line1\rdata: line2\r\r"
      "id: 7\ndata: [DONE]\n\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "[DONE]"};
  for (std::size_t piece : {1u, 2u, 3u, 7u, 1000u}) {
    EXPECT_EQ(feed_all(stream, piece), expected) << "piece " << piece;
  }
}

TEST(SseParserTest, UnfinishedEventIsPartial) {
  SseParser parser;
  int events = 0;
  parser.feed("data: {\"x\"", [&](const std::string&) { ++events; });
  EXPECT_EQ(events, 0);
  EXPECT_TRUE(parser.has_partial_event());
  parser.feed(":1}\n\n", [&](const std::string&) { ++events; });
  EXPECT_EQ(events, 1);
  EXPECT_FALSE(parser.has_partial_event());
}

TEST(StreamChunkTest, ChatContentUsageDoneAndError) {
  auto chat = parse_stream_chunk(R"({"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})");
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(chat->content, "Hi");
  EXPECT_FALSE(chat->has_usage);

  auto completion = parse_stream_chunk(R"({"choices":[{"text":" there","finish_reason":"length"}]})");
  ASSERT_TRUE(completion.has_value());
  EXPECT_EQ(completion->content, " there");
  EXPECT_EQ(completion->finish_reason, "length");

  auto usage = parse_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":64}}})");
  ASSERT_TRUE(usage.has_value());
  EXPECT_TRUE(usage->has_usage);
  EXPECT_EQ(usage->prompt_tokens, 100);
  EXPECT_EQ(usage->completion_tokens, 8);
  EXPECT_EQ(usage->cached_tokens, 64);

  auto no_cache = parse_stream_chunk(R"({"usage":{"prompt_tokens":5,"completion_tokens":1}})");
  ASSERT_TRUE(no_cache.has_value());
  EXPECT_EQ(no_cache->cached_tokens, -1);

  auto null_content = parse_stream_chunk(R"({"choices":[{"delta":{"role":"assistant","content":null}}]})");
  ASSERT_TRUE(null_content.has_value());
  EXPECT_EQ(null_content->content, "");

  EXPECT_TRUE(parse_stream_chunk("[DONE]")->done);
  auto error = parse_stream_chunk(R"({"error":{"message":"overloaded","type":"server_error"}})");
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->error, "overloaded");
}

TEST(StreamChunkTest, MalformedDataIsCorrupt) {
  for (const char* bad : {"{not json", "[1,2]", "42", R"({"id":"x"})", R"({"choices":{"0":1}})",
                          R"({"choices":[3]})", ""}) {
    auto chunk = parse_stream_chunk(bad);
    ASSERT_FALSE(chunk.has_value()) << bad;
    EXPECT_EQ(chunk.status().code(), StatusCode::kCorrupt);
  }
}

using Clock = StreamCollector::Clock;

Clock::time_point at_ms(Clock::time_point t0, int ms) { return t0 + std::chrono::milliseconds(ms); }

std::string content_event(const std::string& text) {
  return "data: {\"choices\":[{\"delta\":{\"content\":\"" + text + "\"}}]}\n\n";
}

TEST(StreamCollectorTest, TimesContentChunks) {
  const Clock::time_point t0 = Clock::now();
  StreamCollector c(t0);
  EXPECT_TRUE(c.on_bytes("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", at_ms(t0, 5)));
  EXPECT_TRUE(c.on_bytes(content_event("a"), at_ms(t0, 100)));
  EXPECT_TRUE(c.on_bytes(content_event("b") + content_event("c"), at_ms(t0, 130)));
  EXPECT_TRUE(c.on_bytes(content_event("d"), at_ms(t0, 180)));
  EXPECT_TRUE(c.on_bytes("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\ndata: [DONE]\n\n",
                         at_ms(t0, 190)));
  RequestRecord r;
  c.finish(r, at_ms(t0, 200));
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_NEAR(r.ttft_s, 0.100, 1e-9);
  ASSERT_EQ(r.itl_s.size(), 3u);
  EXPECT_NEAR(r.itl_s[0], 0.030, 1e-9);
  EXPECT_NEAR(r.itl_s[1], 0.0, 1e-9);  // two events in one read
  EXPECT_NEAR(r.itl_s[2], 0.050, 1e-9);
  EXPECT_NEAR(r.e2e_s, 0.200, 1e-9);
  EXPECT_EQ(r.output_text, "abcd");
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.prompt_tokens, 9);
  EXPECT_EQ(r.output_tokens, 4);
  EXPECT_EQ(r.cached_tokens, 3);
}

TEST(StreamCollectorTest, WithoutUsageCountsChunks) {
  const Clock::time_point t0 = Clock::now();
  StreamCollector c(t0);
  c.on_bytes(content_event("x") + content_event("y") + "data: [DONE]\n\n", at_ms(t0, 10));
  RequestRecord r;
  c.finish(r, at_ms(t0, 11));
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(r.usage_reported);
  EXPECT_EQ(r.output_tokens, 2);
  EXPECT_EQ(r.cached_tokens, -1);
}

TEST(StreamCollectorTest, StreamErrors) {
  const Clock::time_point t0 = Clock::now();
  struct Case {
    std::string bytes;
    const char* kind;
    bool keeps_reading;
  };
  const std::vector<Case> cases = {
      {content_event("a") + "data: {oops\n\n", error_kind::kMalformedSse, false},
      {content_event("a"), error_kind::kTruncated, true},
      {content_event("a") + "data: {\"choices\"", error_kind::kTruncated, true},
      {"data: {\"error\":{\"message\":\"boom\"}}\n\n", error_kind::kServerError, false},
      {"data: [DONE]\n\n", error_kind::kEmptyOutput, true},
      {content_event("a") + "data: [DONE]\n\n" + content_event("b"), error_kind::kMalformedSse, false},
  };
  for (const auto& test : cases) {
    StreamCollector c(t0);
    EXPECT_EQ(c.on_bytes(test.bytes, at_ms(t0, 1)), test.keeps_reading) << test.bytes;
    RequestRecord r;
    c.finish(r, at_ms(t0, 2));
    EXPECT_EQ(r.error, test.kind) << test.bytes;
    EXPECT_FALSE(r.error_detail.empty());
  }
}

}  // namespace
}  // namespace kvstash::bench
