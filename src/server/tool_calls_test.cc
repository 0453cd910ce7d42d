// The tool-call parsers on literal model outputs of each family (as the models write them, and
// broken in the ways models break them), format detection on the published templates, and the
// stream agreeing with the whole-answer parse however the output is cut into tokens.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kvstash::server {
namespace {

using nlohmann::json;

ToolRequest weather_tools(bool parallel = true) {
  ToolRequest tools;
  tools.functions = {{"get_weather", "Current weather", R"({"type":"object"})"},
                     {"search_flights", "Flights", R"({"type":"object"})"}};
  tools.tools_json = "[]";
  tools.parallel = parallel;
  return tools;
}

void expect_call(const ParsedToolCall& call, const std::string& name, const json& arguments) {
  EXPECT_EQ(call.name, name);
  EXPECT_EQ(json::parse(call.arguments), arguments) << call.arguments;
  EXPECT_EQ(call.id.size(), 9u);
  for (char c : call.id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << call.id;
}

TEST(ToolCalls, HermesOneCallWithContentBefore) {
  const ParsedOutput out = parse_tool_calls(
      ToolCallFormat::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
      weather_tools());
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "get_weather", {{"city", "Paris"}});
  ASSERT_TRUE(out.content);
  EXPECT_EQ(*out.content, "Let me check.");
}

TEST(ToolCalls, HermesParallelCallsNullContentAndUniqueIds) {
  const ParsedOutput out = parse_tool_calls(
      ToolCallFormat::kHermes,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"search_flights\", \"arguments\": {\"to\": \"ROM\", \"n\": [1, {\"x\": \"}\"}]}}\n</tool_call>",
      weather_tools());
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "get_weather", {{"city", "Paris"}});
  expect_call(out.calls[1], "search_flights", {{"to", "ROM"}, {"n", {1, {{"x", "}"}}}}});
  EXPECT_NE(out.calls[0].id, out.calls[1].id);
  EXPECT_FALSE(out.content);
  // parallel_tool_calls false: the first call only.
  const ParsedOutput one = parse_tool_calls(
      ToolCallFormat::kHermes,
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"get_weather\", "
      "\"arguments\": {}}</tool_call>",
      weather_tools(false));
  EXPECT_EQ(one.calls.size(), 1u);
}

TEST(ToolCalls, NamedChoiceTakesOnlyThatFunction) {
  ToolRequest tools = weather_tools();
  tools.choice = ToolChoice::kNamed;
  tools.named_function = "search_flights";
  const std::string text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
  ParsedOutput out = parse_tool_calls(ToolCallFormat::kHermes, text, tools);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content.value_or("<null>"), text);
  tools.named_function = "get_weather";
  out = parse_tool_calls(ToolCallFormat::kHermes, text, tools);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
}

TEST(ToolCalls, HermesArgumentsAsStringAndMissingCloseAtEnd) {
  const ParsedOutput out = parse_tool_calls(
      ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}",
      weather_tools());
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "get_weather", {{"city", "Oslo"}});
}

TEST(ToolCalls, MalformedCallsStayText) {
  const ToolRequest tools = weather_tools();
  for (const std::string text : {
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",     // cut inside the JSON
           "<tool_call>\n{\"name\": \"get_weather\" \"arguments\": {}}\n</tool_call>",     // not JSON
           "<tool_call>\n{\"name\": \"launch_rockets\", \"arguments\": {}}\n</tool_call>",  // undeclared function
           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                               // no name
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call>",   // arguments not an object
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}} trailing </tool_call>",
           "no calls at all, just <tool_call text",
       }) {
    const ParsedOutput out = parse_tool_calls(ToolCallFormat::kHermes, text, tools);
    EXPECT_TRUE(out.calls.empty()) << text;
    ASSERT_TRUE(out.content) << text;
    EXPECT_EQ(*out.content, text);
  }
  // A broken call beside a good one: the good one is a call, the broken one text.
  const ParsedOutput mixed = parse_tool_calls(
      ToolCallFormat::kHermes,
      "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Rome\"}}</tool_call>",
      tools);
  ASSERT_EQ(mixed.calls.size(), 1u);
  expect_call(mixed.calls[0], "get_weather", {{"city", "Rome"}});
  ASSERT_TRUE(mixed.content);
  EXPECT_EQ(*mixed.content, "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>");
}

TEST(ToolCalls, Llama3BareJsonPythonTagAndText) {
  const ToolRequest tools = weather_tools();
  ParsedOutput out = parse_tool_calls(ToolCallFormat::kLlama3,
                                      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", tools);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "get_weather", {{"city", "Paris"}});
  EXPECT_FALSE(out.content);
  out = parse_tool_calls(ToolCallFormat::kLlama3,
                         "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"A\"}}; "
                         "{\"type\": \"function\", \"name\": \"search_flights\", \"parameters\": {\"to\": \"B\"}}",
                         tools);
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[1], "search_flights", {{"to", "B"}});
  // JSON inside prose is not a call; nor is an object without parameters, nor trailing text.
  for (const std::string text : {"Here: {\"name\": \"get_weather\", \"parameters\": {}}",
                                 "{\"name\": \"get_weather\"}",
                                 "{\"name\": \"get_weather\", \"parameters\": {}} and more",
                                 "<|python_tag|>print(1)"}) {
    out = parse_tool_calls(ToolCallFormat::kLlama3, text, tools);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.content.value_or("<null>"), text);
  }
}

TEST(ToolCalls, MistralListAndArgsForms) {
  const ToolRequest tools = weather_tools();
  ParsedOutput out = parse_tool_calls(
      ToolCallFormat::kMistral,
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}, "
      "{\"name\": \"search_flights\", \"arguments\": {\"to\": \"ROM\"}}]",
      tools);
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "get_weather", {{"city", "Paris"}});
  expect_call(out.calls[1], "search_flights", {{"to", "ROM"}});
  out = parse_tool_calls(ToolCallFormat::kMistral,
                         "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]search_flights[CALL_ID]"
                         "a1b2c3d4e[ARGS]{\"to\": \"NCE\"}",
                         tools);
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "get_weather", {{"city", "Nice"}});
  expect_call(out.calls[1], "search_flights", {{"to", "NCE"}});
  EXPECT_EQ(out.content.value_or("<null>"), "Sure.");
  for (const std::string text : {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}",  // list not closed
                                 "[TOOL_CALLS]get_weather{\"city\": \"Nice\"}",                  // no [ARGS]
                                 "[TOOL_CALLS][]"}) {
    out = parse_tool_calls(ToolCallFormat::kMistral, text, tools);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.content.value_or("<null>"), text);
  }
}

TEST(ToolCalls, DeepSeekR1AndV31Forms) {
  const ToolRequest tools = weather_tools();
  ParsedOutput out = parse_tool_calls(
      ToolCallFormat::kDeepSeek,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search_flights\n```json\n{\"to\": \"X\"}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      tools);
  ASSERT_EQ(out.calls.size(), 2u);
  expect_call(out.calls[0], "get_weather", {{"city", "Paris"}});
  expect_call(out.calls[1], "search_flights", {{"to", "X"}});
  out = parse_tool_calls(ToolCallFormat::kDeepSeek,
                         "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Lyon\"}"
                         "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                         tools);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "get_weather", {{"city", "Lyon"}});
  EXPECT_EQ(out.content.value_or("<null>"), "Checking.");
  const std::string broken = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n{\"city\": 1}";
  out = parse_tool_calls(ToolCallFormat::kDeepSeek, broken, tools);  // no ```json fence
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content.value_or("<null>"), broken);
}

TEST(ToolCalls, CommandR7B) {
  const ToolRequest tools = weather_tools();
  ParsedOutput out = parse_tool_calls(
      ToolCallFormat::kCommandR,
      "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Bern\"}}\n]"
      "<|END_ACTION|>",
      tools);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "get_weather", {{"city", "Bern"}});
  const std::string broken = "<|START_ACTION|>[{\"tool_name\": \"get_weather\"}]<|END_ACTION|>";
  out = parse_tool_calls(ToolCallFormat::kCommandR, broken, tools);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content.value_or("<null>"), broken);
}

TEST(ToolCalls, GptOssHarmonyChannels) {
  const ToolRequest tools = weather_tools();
  // After the generation prompt "<|start|>assistant": analysis, then a call (recipient in the
  // header, as the template writes it; <|call|> ended generation).
  ParsedOutput out = parse_tool_calls(
      ToolCallFormat::kGptOss,
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather"
      "<|channel|>commentary <|constrain|>json<|message|>{\"city\": \"Oslo\"}",
      tools);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "get_weather", {{"city", "Oslo"}});
  EXPECT_EQ(out.reasoning, "Need the weather.");
  EXPECT_FALSE(out.content);
  // The recipient after the channel; then a final answer with no call.
  out = parse_tool_calls(ToolCallFormat::kGptOss,
                         "<|channel|>commentary to=functions.search_flights <|constrain|>json<|message|>{\"to\": \"X\"}",
                         tools);
  ASSERT_EQ(out.calls.size(), 1u);
  expect_call(out.calls[0], "search_flights", {{"to", "X"}});
  out = parse_tool_calls(ToolCallFormat::kGptOss,
                         "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>42.", tools);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content.value_or("<null>"), "42.");
  EXPECT_EQ(out.reasoning, "Easy.");
  // Broken: a call with bad JSON, an undeclared function, no <|message|>: all text as written.
  for (const std::string text : {
           "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": ",
           "<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{}",
           "<|channel|>final no message",
       }) {
    out = parse_tool_calls(ToolCallFormat::kGptOss, text, tools);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.content.value_or("<null>"), text);
  }
}

// The stream, fed the output in pieces of every size, sends as content exactly the whole-answer
// parse's content and ends with the same calls; no markup ever goes out before the end.
void expect_stream_agrees(ToolCallFormat format, const std::string& text, const ToolRequest& tools) {
  const ParsedOutput whole = parse_tool_calls(format, text, tools);
  for (std::size_t piece = 1; piece <= text.size(); piece = piece < 8 ? piece + 1 : piece * 2) {
    ToolCallStream stream(format, tools);
    std::string content;
    for (std::size_t i = 0; i < text.size(); i += piece) content += stream.push(text.substr(i, piece));
    if (!whole.calls.empty()) {
      for (const std::string& marker : tool_call_marker_tokens(format)) {
        EXPECT_EQ(content.find(marker), std::string::npos) << "markup leaked: " << content;
      }
    }
    const ParsedOutput end = stream.finish();
    content += end.content.value_or("");
    EXPECT_EQ(content, whole.content.value_or("")) << "piece " << piece << " of " << text;
    EXPECT_EQ(end.reasoning, whole.reasoning);
    ASSERT_EQ(end.calls.size(), whole.calls.size()) << text;
    for (std::size_t c = 0; c < end.calls.size(); ++c) {
      EXPECT_EQ(end.calls[c].name, whole.calls[c].name);
      EXPECT_EQ(end.calls[c].arguments, whole.calls[c].arguments);
    }
  }
}

TEST(ToolCalls, StreamAgreesWithWholeParse) {
  const ToolRequest tools = weather_tools();
  expect_stream_agrees(ToolCallFormat::kHermes,
                       "Let me check <b>.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}\n"
                       "</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>",
                       tools);
  expect_stream_agrees(ToolCallFormat::kHermes, "Plain answer with a < sign and trailing space  ", tools);
  expect_stream_agrees(ToolCallFormat::kHermes, "Broken <tool_call>{\"name\": 1}</tool_call> end", tools);
  expect_stream_agrees(ToolCallFormat::kLlama3, "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"P\"}}", tools);
  expect_stream_agrees(ToolCallFormat::kLlama3, "Text first {\"name\": \"get_weather\", \"parameters\": {}}", tools);
  expect_stream_agrees(ToolCallFormat::kGptOss,
                       "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant to=functions.get_weather<|channel|>"
                       "commentary json<|message|>{}",
                       tools);
  expect_stream_agrees(ToolCallFormat::kMistral, "Ok. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"N\"}", tools);
  expect_stream_agrees(ToolCallFormat::kDeepSeek,
                       "Hm.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
                       "<｜tool▁calls▁end｜>",
                       tools);
}

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(KVSTASH_SHARED_DIR) + "/templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCalls, FormatDetectedFromPublishedTemplates) {
  const std::vector<std::pair<std::string, ToolCallFormat>> cases = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistral},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolCallFormat::kDeepSeek},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolCallFormat::kDeepSeek},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", ToolCallFormat::kCommandR},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kNone},
      {"openai-gpt-oss-120b.jinja", ToolCallFormat::kGptOss},
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", ToolCallFormat::kNone},
      {"Qwen3-Coder.jinja", ToolCallFormat::kNone},  // <tool_call><function=name> XML
      {"GLM-4.6.jinja", ToolCallFormat::kNone},      // <tool_call>name<arg_key>
      {"ibm-granite-granite-4.0.jinja", ToolCallFormat::kHermes},
  };
  for (const auto& [name, format] : cases) {
    const std::string source = read_template(name);
    ASSERT_FALSE(source.empty()) << name;
    Expected<ChatTemplate> t = ChatTemplate::from_jinja(source);
    ASSERT_TRUE(t) << name << ": " << t.status().to_string();
    EXPECT_STREQ(tool_call_format_name(detect_tool_call_format(*t)), tool_call_format_name(format)) << name;
  }
  EXPECT_EQ(detect_tool_call_format(ChatTemplate::kChatML), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format(ChatTemplate::kLlama3), ToolCallFormat::kLlama3);
}

TEST(ToolCalls, JsonShapeIsOpenAIs) {
  const json calls = tool_calls_json({{"abcdefghi", "get_weather", "{\"city\":\"P\"}"}});
  EXPECT_EQ(calls, json::parse(R"([{"id": "abcdefghi", "type": "function",
                                   "function": {"name": "get_weather", "arguments": "{\"city\":\"P\"}"}}])"));
}

}  // namespace
}  // namespace kvstash::server
