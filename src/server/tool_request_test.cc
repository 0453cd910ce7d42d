// The request side of tool calling: tools, tool_choice and parallel_tool_calls parsed and
// validated (400s naming the field), history tool fields kept, the tools reaching published
// templates in the client's key order, the built-ins' tool renderings, and the schema seam.
#include "server/tool_request.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/http_test_util.h"
#include "server/request_parser.h"

namespace kvstash::server {
namespace {

// OpenAI requires `model`: the tests not about it name one (testing::naming_model).
std::optional<ApiError> parse_named(Endpoint endpoint, const std::string& body, ParsedRequest& out) {
  return parse_request(endpoint, testing::naming_model(body, "m"), out);
}

using nlohmann::json;

const std::string kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
  "parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}},
  "required": ["zeta"]}}}, {"type": "function", "function": {"name": "ping"}}])";

std::string chat_body(const std::string& extra, const std::string& messages = R"([{"role": "user", "content": "hi"}])") {
  return R"({"messages": )" + messages + (extra.empty() ? "" : ", " + extra) + "}";
}

ParsedRequest parse_ok(const std::string& body) {
  ParsedRequest r;
  std::optional<ApiError> err = parse_named(Endpoint::kChatCompletions, body, r);
  EXPECT_FALSE(err) << body << " -> " << (err ? err->message : "");
  return r;
}

ApiError parse_fails(const std::string& body, Endpoint endpoint = Endpoint::kChatCompletions) {
  ParsedRequest r;
  std::optional<ApiError> err = parse_named(endpoint, body, r);
  EXPECT_TRUE(err) << body;
  return err.value_or(ApiError{});
}

TEST(ToolRequest, ParsesToolsChoiceAndParallel) {
  ParsedRequest r = parse_ok(chat_body(R"("tools": )" + kTools + R"(, "parallel_tool_calls": false)"));
  ASSERT_EQ(r.tools.functions.size(), 2u);
  EXPECT_EQ(r.tools.functions[0].name, "get_weather");
  EXPECT_EQ(r.tools.functions[0].description, "Weather.");
  EXPECT_EQ(r.tools.functions[1].parameters_json, "");
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_TRUE(r.tools.parse_calls());
  // The client's key order is kept ("zeta" before "alpha"; "type" before "function").
  EXPECT_LT(r.tools.tools_json.find("zeta"), r.tools.tools_json.find("alpha"));
  EXPECT_EQ(r.tools.tools_json.rfind(R"([{"type":"function","function":{"name":"get_weather")", 0), 0u) << r.tools.tools_json;
  EXPECT_LT(r.tools.functions[0].parameters_json.find("zeta"), r.tools.functions[0].parameters_json.find("alpha"));

  r = parse_ok(chat_body(R"("tools": )" + kTools + R"(, "tool_choice": "none")"));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNone);
  EXPECT_FALSE(r.tools.parse_calls());
  r = parse_ok(chat_body(R"("tools": )" + kTools + R"(, "tool_choice": "required")"));
  EXPECT_EQ(r.tools.choice, ToolChoice::kRequired);
  r = parse_ok(chat_body(R"("tools": )" + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "ping"}})"));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named_function, "ping");
  // "Off" values without tools stay accepted, as before.
  r = parse_ok(chat_body(R"("tools": [], "tool_choice": "auto")"));
  EXPECT_FALSE(r.tools.has_tools());
  r = parse_ok(chat_body(R"("tools": null, "tool_choice": "none")"));
  EXPECT_FALSE(r.tools.parse_calls());
}

TEST(ToolRequest, ValidationErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("tools": {"type": "function"})", "tools"},
      {R"("tools": [{"type": "code_interpreter"}])", "tools[0].type"},
      {R"("tools": [{"type": "function"}])", "tools[0].function"},
      {R"("tools": [{"type": "function", "function": {"description": "x"}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "has space"}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}])", "tools[0].function.parameters"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}])", "tools[0].function.strict"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
       "tools[1].function.name"},
      {R"("tools": )" + kTools + R"(, "tool_choice": "sometimes")", "tool_choice"},
      {R"("tools": )" + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})",
       "tool_choice.function.name"},
      {R"("tools": )" + kTools + R"(, "tool_choice": {"type": "function"})", "tool_choice.function.name"},
      {R"("tool_choice": "required")", "tool_choice"},
      {R"("tools": )" + kTools + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls"},
  };
  for (const auto& [extra, param] : cases) {
    const ApiError e = parse_fails(chat_body(extra));
    EXPECT_EQ(e.http_status, 400) << extra;
    EXPECT_EQ(e.param, param) << extra << ": " << e.message;
  }
  // Completions have no tools in OpenAI's API: still refused by name.
  EXPECT_EQ(parse_fails(R"({"prompt": "a", "tools": )" + kTools + "}", Endpoint::kCompletions).code,
            "unsupported_parameter");
}

TEST(ToolRequest, HistoryToolFieldsAreKept) {
  const std::string messages = R"([{"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdefgh1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"zeta\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "abcdefgh1", "name": "get_weather", "content": "21 C"}])";
  ParsedRequest r = parse_ok(chat_body(R"("tools": )" + kTools, messages));
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "abcdefgh1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"zeta": "Paris"})");
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[2].tool_call_id, "abcdefgh1");
  EXPECT_EQ(r.messages[2].name, "get_weather");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"([{"role": "tool", "content": "x"}])", "messages[0].tool_call_id"},
      {R"([{"role": "tool", "tool_call_id": 5, "content": "x"}])", "messages[0].tool_call_id"},
      {R"([{"role": "user", "content": "x", "tool_calls": []}])", "messages[0].tool_calls"},
      {R"([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}])",
       "messages[0].tool_calls[0].id"},
      {R"([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {}}}]}])",
       "messages[0].tool_calls[0].function.arguments"},
      {R"([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}])",
       "messages[0].tool_calls[0].function.name"},
      {R"([{"role": "assistant", "tool_calls": [{"id": "a", "type": "web", "function": {"name": "f", "arguments": "{}"}}]}])",
       "messages[0].tool_calls[0].type"},
  };
  for (const auto& [msgs, param] : bad) EXPECT_EQ(parse_fails(chat_body("", msgs)).param, param) << msgs;
}

std::string published(const std::string& name) {
  std::ifstream in(std::string(KVSTASH_SHARED_DIR) + "/templates/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What the issue found: a history's tool calls were dropped before templating. Through the
// parser and Qwen2.5's template, the calls, their arguments (as an object, not a quoted string),
// the tool result and the tools in the client's key order all appear.
TEST(ToolRequest, ToolsAndHistoryReachQwenTemplate) {
  const std::string messages = R"([{"role": "system", "content": "Sys."}, {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdefgh1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"zeta\": \"Paris\", \"alpha\": 2}"}}]},
    {"role": "tool", "tool_call_id": "abcdefgh1", "content": "21 C"}])";
  ParsedRequest r = parse_ok(chat_body(R"("tools": )" + kTools, messages));
  Expected<ChatTemplate> qwen = ChatTemplate::from_jinja(published("Qwen-Qwen2.5-7B-Instruct.jinja"));
  ASSERT_TRUE(qwen) << qwen.status().to_string();
  Expected<std::string> text = qwen->render(r.messages, true, "", "", ChatExtras{r.tools.tools_json});
  ASSERT_TRUE(text) << text.status().to_string();
  EXPECT_NE(text->find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos) << *text;
  EXPECT_LT(text->find("\"zeta\": {\"type\": \"string\"}"), text->find("\"alpha\": {\"type\": \"integer\"}"));
  EXPECT_NE(text->find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"zeta\": \"Paris\", \"alpha\": 2}}\n</tool_call><|im_end|>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>"), std::string::npos);

  // The built-in chatml renders the same conversation as Qwen2.5 does when a system message is
  // given (Qwen's template only adds its default system line otherwise).
  Expected<std::string> builtin = ChatTemplate::kChatML.render(r.messages, true, "", "", ChatExtras{r.tools.tools_json});
  ASSERT_TRUE(builtin) << builtin.status().to_string();
  EXPECT_EQ(*builtin, *text);
}

// The built-in llama3 presents tools as Llama 3.1's template does in its first user message and
// writes history calls as its JSON.
TEST(ToolRequest, BuiltinLlama3MatchesLlama31OnToolConversation) {
  const std::string messages = R"([{"role": "user", "content": "weather?"},
    {"role": "assistant", "tool_calls": [{"id": "abcdefgh1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"zeta\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "abcdefgh1", "content": "21 C"}])";
  ParsedRequest r = parse_ok(chat_body(R"("tools": )" + kTools, messages));
  Expected<std::string> text = ChatTemplate::kLlama3.render(r.messages, true, "", "", ChatExtras{r.tools.tools_json});
  ASSERT_TRUE(text) << text.status().to_string();
  EXPECT_NE(text->find("Given the following functions"), std::string::npos) << *text;
  EXPECT_NE(text->find("{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\""),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
                       "{\"zeta\": \"Paris\"}}<|eot_id|>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<|start_header_id|>ipython<|end_header_id|>\n\n21 C<|eot_id|>"), std::string::npos);
  EXPECT_TRUE(text->ends_with("<|start_header_id|>assistant<|end_header_id|>\n\n")) << *text;
  // Without tools or calls the built-ins render as before.
  EXPECT_EQ(*ChatTemplate::kLlama3.render({{"user", "Hi"}}, true),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ToolRequest, CallSchemaSeam) {
  ParsedRequest r = parse_ok(chat_body(R"("tools": )" + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"));
  const nlohmann::ordered_json named = tool_call_schema(r.tools);
  EXPECT_EQ(named["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(named["properties"]["arguments"]["required"], json::array({"zeta"}));
  EXPECT_EQ(named["required"], json::array({"name", "arguments"}));
  EXPECT_EQ(named["additionalProperties"], false);
  r.tools.choice = ToolChoice::kRequired;
  const nlohmann::ordered_json any = tool_call_schema(r.tools);
  ASSERT_EQ(any["anyOf"].size(), 2u);
  EXPECT_EQ(any["anyOf"][1]["properties"]["name"]["const"], "ping");
  EXPECT_EQ(any["anyOf"][1]["properties"]["arguments"], json({{"type", "object"}}));
}

}  // namespace
}  // namespace kvstash::server
