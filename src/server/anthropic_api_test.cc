// The Messages API translation, both ways: requests into chat requests (system blocks, tools,
// tool_use / tool_result history, breakpoints into pin points, refusals by name), chat answers and
// chat streams into Anthropic's answers and event streams.
#include "server/anthropic_api.h"

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

using nlohmann::json;

MessagesTranslation translate(const json& body) {
  MessagesTranslation out;
  auto err = translate_messages_request(body.dump(), out);
  EXPECT_FALSE(err) << err->message;
  return out;
}

std::string refusal(const json& body) {
  MessagesTranslation out;
  auto err = translate_messages_request(body.dump(), out);
  return err ? err->message : "";
}

TEST(AnthropicApi, TranslatesSystemToolsHistoryAndBreakpoints) {
  const json body = {
      {"model", "m"}, {"max_tokens", 64}, {"stop_sequences", {"END"}}, {"temperature", 0.5}, {"stream", true},
      {"system", {{{"type", "text"}, {"text", "You are terse."}, {"cache_control", {{"type", "ephemeral"}, {"ttl", "1h"}}}}}},
      {"tools", {{{"name", "get_weather"}, {"description", "d"}, {"input_schema", {{"type", "object"}}}}}},
      {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
      {"messages",
       {{{"role", "user"}, {"content", "Weather in Paris?"}},
        {{"role", "assistant"}, {"content", {{{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"},
         {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "18C"}},
                      {{"type", "text"}, {"text", "Thanks"}, {"cache_control", {{"type", "ephemeral"}}}}}}}}}};
  const MessagesTranslation t = translate(body);
  EXPECT_TRUE(t.stream);
  EXPECT_EQ(t.model, "m");
  const json& c = t.chat;
  EXPECT_EQ(c["stop"], json({"END"}));
  EXPECT_EQ(c["tool_choice"], "required");
  EXPECT_EQ(c["parallel_tool_calls"], false);
  EXPECT_EQ(c["stream_options"]["include_usage"], true);
  EXPECT_EQ(c["tools"][0]["function"]["name"], "get_weather");
  ASSERT_EQ(c["messages"].size(), 5u);
  EXPECT_EQ(c["messages"][0], json({{"role", "system"}, {"content", "You are terse."}}));
  EXPECT_EQ(c["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_TRUE(c["messages"][2]["content"].is_null());
  EXPECT_EQ(c["messages"][3], json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "18C"}}));
  EXPECT_EQ(c["messages"][4], json({{"role", "user"}, {"content", "Thanks"}}));
  // Breakpoints: after the system message (1 h), after the last message (5 min).
  EXPECT_EQ(c["kvstash_pins"], json({{{"messages", 1}, {"ttl_s", 3600}}, {{"messages", 5}, {"ttl_s", 300}}}));
  EXPECT_EQ(t.pin_messages, 5);
}

TEST(AnthropicApi, RefusesWhatItDoesNotRunByName) {
  const json base = {{"model", "m"}, {"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  json b = base;
  b.erase("max_tokens");
  EXPECT_NE(refusal(b).find("max_tokens"), std::string::npos);
  b = base;
  b["thinking"] = {{"type", "enabled"}};
  EXPECT_NE(refusal(b).find("'thinking' is not supported"), std::string::npos);
  b = base;
  b["messages"][0]["content"] = {{{"type", "image"}, {"source", {}}}};
  EXPECT_NE(refusal(b).find("'image' is not supported"), std::string::npos);
  b = base;
  b["system"] = {{{"type", "text"}, {"text", "s"}, {"cache_control", {{"type", "ephemeral"}, {"ttl", "2h"}}}}};
  EXPECT_NE(refusal(b).find("'2h'"), std::string::npos);
  b = base;
  b["tools"] = {{{"type", "web_search_20250305"}, {"name", "web_search"}}};
  EXPECT_NE(refusal(b).find("server tools"), std::string::npos);
  EXPECT_NE(refusal(json::array()).find("JSON object"), std::string::npos);
}

TEST(AnthropicApi, ChatAnswerBecomesAMessageWithCacheUsage) {
  const json completion = {
      {"choices", {{{"index", 0}, {"finish_reason", "tool_calls"},
                    {"message", {{"role", "assistant"}, {"content", "Let me check."},
                                 {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                                  {"function", {{"name", "f"}, {"arguments", "{\"a\":1}"}}}}}}}}}}},
      {"usage", {{"prompt_tokens", 2100}, {"completion_tokens", 7},
                 {"prompt_tokens_details", {{"cached_tokens", 2048}, {"pinned_tokens", 2000}}}}}};
  const json m = chat_to_message(completion, "m", true);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 2u);
  EXPECT_EQ(m["content"][0], json({{"type", "text"}, {"text", "Let me check."}}));
  EXPECT_EQ(m["content"][1]["input"], json({{"a", 1}}));
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 2000);
  EXPECT_EQ(m["usage"]["cache_creation_input_tokens"], 0);
  EXPECT_EQ(m["usage"]["input_tokens"], 100);
  // The first request of that prefix: nothing read, the pinned prefix written.
  json first = completion;
  first["usage"]["prompt_tokens_details"]["cached_tokens"] = 0;
  const json u = chat_to_message(first, "m", true)["usage"];
  EXPECT_EQ(u["cache_creation_input_tokens"], 2000);
  EXPECT_EQ(u["cache_read_input_tokens"], 0);
  EXPECT_EQ(u["input_tokens"], 100);
}

// Records what the translator writes.
struct FakeExchange : http::Exchange {
  std::string written;
  http::Response response;
  void respond(http::Response r) override { response = std::move(r); }
  void begin_stream(http::Response) override {}
  bool write(std::string data) override {
    written += data;
    return true;
  }
  void end() override { written += "<end>"; }
  void on_close(std::function<void()>) override {}
  void post(std::function<void()> fn) override { fn(); }
  bool closed() const override { return false; }
};

std::vector<std::string> event_names(const std::string& sse) {
  std::vector<std::string> names;
  for (std::size_t pos = 0; (pos = sse.find("event: ", pos)) != std::string::npos; pos += 7) {
    names.push_back(sse.substr(pos + 7, sse.find('\n', pos) - pos - 7));
  }
  return names;
}

TEST(AnthropicApi, ChatStreamBecomesAnthropicEvents) {
  auto inner = std::make_shared<FakeExchange>();
  AnthropicExchange ex(inner, "m", false);
  auto chunk = [](const json& j) { return "data: " + j.dump() + "\n\n"; };
  // Split across writes at odd places, as a TCP-sized write could be.
  const std::string stream =
      chunk({{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}}}}}) +
      chunk({{"choices", {{{"index", 0}, {"delta", {{"content", "Hel"}}}}}}}) +
      chunk({{"choices", {{{"index", 0}, {"delta", {{"content", "lo"}}}}}}}) +
      chunk({{"choices", {{{"index", 0}, {"delta", {{"tool_calls", {{{"index", 0}, {"id", "call_9"}, {"type", "function"},
                                                                     {"function", {{"name", "f"}, {"arguments", ""}}}}}}}}}}}}) +
      chunk({{"choices", {{{"index", 0}, {"delta", {{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "{\"a\":"}}}}}}}}}}}}) +
      chunk({{"choices", {{{"index", 0}, {"delta", {{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "1}"}}}}}}}}}}}}) +
      chunk({{"choices", {{{"index", 0}, {"delta", json::object()}, {"finish_reason", "tool_calls"}}}}}) +
      chunk({{"choices", json::array()}, {"usage", {{"prompt_tokens", 10}, {"completion_tokens", 5}}}}) + "data: [DONE]\n\n";
  for (std::size_t i = 0; i < stream.size(); i += 37) ASSERT_TRUE(ex.write(stream.substr(i, 37)));
  ex.end();
  const std::vector<std::string> expected = {"message_start", "ping", "content_block_start", "content_block_delta",
                                             "content_block_delta", "content_block_stop", "content_block_start",
                                             "content_block_delta", "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"};
  EXPECT_EQ(event_names(inner->written), expected) << inner->written;
  EXPECT_NE(inner->written.find("\"partial_json\":\"{\\\"a\\\":\""), std::string::npos);
  EXPECT_NE(inner->written.find("\"stop_reason\":\"tool_use\""), std::string::npos);
  EXPECT_NE(inner->written.find("\"output_tokens\":5"), std::string::npos);
  EXPECT_EQ(inner->written.substr(inner->written.size() - 5), "<end>");
}

TEST(AnthropicApi, ErrorsTakeAnthropicsShape) {
  auto inner = std::make_shared<FakeExchange>();
  AnthropicExchange ex(inner, "m", false);
  http::Response r;
  r.status = 429;
  r.body = R"({"error":{"message":"queue full","type":"rate_limit","param":null,"code":null}})";
  ex.respond(std::move(r));
  const json body = json::parse(inner->response.body);
  EXPECT_EQ(body["type"], "error");
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(body["error"]["message"], "queue full");
}

}  // namespace
}  // namespace kvstash::server
