#include "bench/http_client.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace kvstash::bench {
namespace {

TEST(ParseUrlTest, AcceptsHostPortAndPrefixes) {
  auto e = parse_url("http://127.0.0.1:8080");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->scheme_host_port, "http://127.0.0.1:8080");
  EXPECT_EQ(e->base_path, "");
  e = parse_url("http://host:9/v1/");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->base_path, "");
  e = parse_url("https://host/proxy/");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->scheme_host_port, "https://host");
  EXPECT_EQ(e->base_path, "/proxy");
  for (const char* bad : {"", "127.0.0.1:80", "ftp://x", "http://", "http://:80"}) {
    EXPECT_FALSE(parse_url(bad).has_value()) << bad;
  }
}

TEST(RequestBodyTest, ChatAndCompletions) {
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi?"}};
  ClientOptions options;
  options.model = "tiny";
  options.ignore_eos = true;
  OpenAiClient chat(*parse_url("http://127.0.0.1:1"), options);
  const auto body = nlohmann::json::parse(chat.request_body(messages, 12));
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["max_tokens"], 12);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  ASSERT_EQ(body["messages"].size(), 2u);
  EXPECT_EQ(body["messages"][1]["content"], "Hi?");

  options.api = "completions";
  options.ignore_eos = false;
  OpenAiClient completions(*parse_url("http://127.0.0.1:1"), options);
  const auto body2 = nlohmann::json::parse(completions.request_body(messages, 3));
  EXPECT_EQ(body2["prompt"], "Be brief.\n\nHi?");
  EXPECT_FALSE(body2.contains("messages"));
  EXPECT_FALSE(body2.contains("ignore_eos"));
}

TEST(OpenAiClientTest, UnreachableServerIsAConnectErrorRecord) {
  // Port 1 on loopback: nothing listens there, the connection is refused at once.
  ClientOptions options;
  options.timeout_s = 5;
  OpenAiClient client(*parse_url("http://127.0.0.1:1"), options);
  const auto start = std::chrono::steady_clock::now();
  const RequestRecord r = client.stream({{"user", "hello"}}, 4, start);
  EXPECT_EQ(r.error, error_kind::kConnect) << r.error_detail;
  EXPECT_EQ(r.http_status, 0);
  EXPECT_GT(r.prompt_tokens, 0);  // estimated locally
  EXPECT_FALSE(client.first_model().has_value());
  EXPECT_EQ(client.first_model().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvstash::bench
