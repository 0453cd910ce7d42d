// The HTTP layer against a scripted backend (no model): routing, errors, response shapes,
// streaming, stop strings, queue-full and client disconnects.
#include "server/server.h"

#include <gtest/gtest.h>

#include <thread>

#include "server/http_test_util.h"
#include "server/test_fakes.h"

namespace kvstash::server {
namespace {

using testing::json;

class ServerTest : public ::testing::Test {
 protected:
  void start(const std::string& reply, std::size_t max_body = 8u << 20) {
    backend_ = std::make_unique<testing::FakeBackend>(reply);
    ServerOptions options;
    options.port = 0;
    options.max_body_bytes = max_body;
    options.log_requests = false;
    auto server = Server::create(*backend_, options);
    ASSERT_TRUE(server) << server.status().to_string();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->start().is_ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  httplib::Result post(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }
  json post_ok(const std::string& path, const std::string& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }

  std::unique_ptr<testing::FakeBackend> backend_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<httplib::Client> client_;
};

const char* kChat = "/v1/chat/completions";
const char* kText = "/v1/completions";

TEST_F(ServerTest, HealthModelsAndMetrics) {
  start("hi");
  auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(json::parse(h->body), json({{"status", "ok"}}));
  auto m = client_->Get("/v1/models");
  ASSERT_TRUE(m);
  json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "fake-model");
  EXPECT_EQ(models["data"][0]["owned_by"], "kvstash");
  post_ok(kText, R"({"prompt": "x"})");
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvstash_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 1"),
            std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("kvstash_generated_tokens_total 3"), std::string::npos);  // "hi" + EOS
}

TEST_F(ServerTest, ChatCompletionShape) {
  start("Hello!");
  json r = post_ok(kChat, R"({"model": "whatever", "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(r["created"].is_number_integer());
  EXPECT_EQ(r["model"], "fake-model");
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello!");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  int prompt = static_cast<int>(backend_->last_request().prompt.size());
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(r["usage"]["completion_tokens"], 7);  // 6 bytes + EOS
  EXPECT_EQ(r["usage"]["total_tokens"], prompt + 7);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST_F(ServerTest, CompletionShapeAndLengthFinish) {
  start("abcdef");
  json r = post_ok(kText, R"({"prompt": "x", "max_tokens": 3})");
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["text"], "abc");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
}

TEST_F(ServerTest, StreamingMatchesNonStreaming) {
  start("Streaming text here.");
  for (const char* path : {kChat, kText}) {
    bool chat = std::string(path) == kChat;
    std::string req = chat ? R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12)"
                           : R"({"prompt": "hi", "max_tokens": 12)";
    json whole = post_ok(path, req + "}");
    auto s = post(path, req + R"(, "stream": true, "stream_options": {"include_usage": true}})");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->status, 200);
    EXPECT_NE(s->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    bool done = false;
    std::vector<json> events = testing::parse_sse(s->body, &done);
    EXPECT_TRUE(done);
    ASSERT_GE(events.size(), 3u);
    std::string text;
    std::string finish;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
      const json& c = events[i]["choices"][0];
      EXPECT_EQ(events[i]["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(events[i]["id"], events[0]["id"]);
      if (chat) {
        if (i == 0) EXPECT_EQ(c["delta"]["role"], "assistant");
        if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      } else {
        text += c["text"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    const json& usage_chunk = events.back();
    EXPECT_TRUE(usage_chunk["choices"].empty());
    EXPECT_EQ(usage_chunk["usage"], whole["usage"]);
    const json& c0 = whole["choices"][0];
    EXPECT_EQ(text, chat ? c0["message"]["content"] : c0["text"]);
    EXPECT_EQ(finish, c0["finish_reason"]);
    EXPECT_EQ(text, "Streaming te");
  }
}

TEST_F(ServerTest, StopStringsEndTheOutputAndCancel) {
  start("one, two, three. four");
  json r = post_ok(kText, R"({"prompt": "x", "stop": ["three", "xyz"], "max_tokens": 50})");
  EXPECT_EQ(r["choices"][0]["text"], "one, two, ");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  auto s = post(kChat, R"({"messages": [{"role": "user", "content": "x"}], "stop": ". ", "stream": true})");
  ASSERT_TRUE(s);
  bool done = false;
  std::string text;
  for (const json& e : testing::parse_sse(s->body, &done)) {
    const json& d = e["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, "one, two, three");
}

TEST_F(ServerTest, LogprobsShapes) {
  start("ab");
  json chat = post_ok(kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 2})");
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);  // EOS ends the turn and is not listed
  EXPECT_EQ(content[0]["token"], "a");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"], json::array({97}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "b");
  json text = post_ok(kText, R"({"prompt": "x", "logprobs": 1})");
  const json& lp = text["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"a", "b"}));
  EXPECT_EQ(lp["text_offset"], json::array({0, 1}));
  EXPECT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["a"].get<float>(), -1.0f);
}

TEST_F(ServerTest, BadInputsGetOpenAIErrorsAndServingContinues) {
  start("fine", /*max_body=*/4096);
  using testing::expect_api_error;
  expect_api_error(post(kChat, "{not json"), 400, "malformed JSON");
  expect_api_error(post(kChat, R"({"messages": "x"})"), 400, "messages");
  expect_api_error(post(kChat, R"({"messages": [{"role": "king", "content": "x"}]})"), 400, "king");
  expect_api_error(post(kChat, R"({"messages": []})"), 400, "messages");
  expect_api_error(post(kText, "{\"prompt\": \"\xFF\xFE\"}"), 400, "UTF-8");
  expect_api_error(post(kText, R"({"prompt": [5, 99999]})"), 400, "99999");
  expect_api_error(post(kText, "{\"prompt\": \"" + std::string(600, 'a') + "\"}"), 400, "context");
  expect_api_error(post(kText, R"({"prompt": "a", "max_tokens": 100000})"), 400, "max_tokens");
  expect_api_error(post(kText, R"({"prompt": "a", "n": 3})"), 400, "'n'");
  expect_api_error(post(kText, "{\"prompt\": \"" + std::string(5000, 'a') + "\"}"), 413, "too large");
  expect_api_error(post("/v1/nope", "{}"), 404, "/v1/nope");
  expect_api_error(client_->Get(kChat), 405, "GET");
  expect_api_error(post("/health", "{}"), 405, "POST");
  json r = post_ok(kText, R"({"prompt": "ok"})");
  EXPECT_EQ(r["choices"][0]["text"], "fine");
}

TEST_F(ServerTest, QueueFullIs429) {
  start("zzzz");
  backend_->max_queued = 0;
  testing::expect_api_error(post(kText, R"({"prompt": "x"})"), 429, "queue");
  backend_->max_queued = 1000;
  post_ok(kText, R"({"prompt": "x"})");
}

TEST_F(ServerTest, DisconnectedStreamIsCancelled) {
  start("a long reply that keeps going and going");
  backend_->token_delay = std::chrono::milliseconds(5);
  std::string got = testing::post_and_hang_up(
      server_->port(), kText, R"({"prompt": "x", "stream": true, "max_tokens": 400})", 200);
  EXPECT_NE(got.find("data: "), std::string::npos);
  // Bounded wait: the server notices on its next write and cancels.
  for (int i = 0; i < 400 && (backend_->stats().running > 0 || backend_->cancelled_count() == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(backend_->cancelled_count(), 1);
  EXPECT_EQ(backend_->stats().running, 0);
  post_ok(kText, R"({"prompt": "x", "max_tokens": 2})");
}

TEST(ServerCreate, UnrecognisedTemplateFailsUnlessOverridden) {
  testing::FakeBackend backend("x");
  backend.set_chat_template("[INST] {{ content }} [/INST]");
  ServerOptions options;
  options.port = 0;
  auto refused = Server::create(backend, options);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("[INST]"), std::string::npos);
  options.chat_template = "chatml";
  EXPECT_TRUE(Server::create(backend, options));
}

}  // namespace
}  // namespace kvstash::server
