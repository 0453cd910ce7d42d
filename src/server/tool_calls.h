// Turning a model's output into OpenAI tool calls, per template family. Each family writes its
// calls in its own syntax; the server tells which from the chat template's text:
//
//   hermes   (Qwen2.5, Qwen3, Hermes 2/3, the built-in chatml)  <tool_call>{"name": .., "arguments": {..}}</tool_call>
//   llama3   (Llama 3.1/3.2/3.3, the built-in llama3)  a bare {"name": .., "parameters": {..}} as the whole
//            answer, or after <|python_tag|> (several separated by ';')
//   mistral  (Nemo, Small 3.x, Devstral, Ministral)  [TOOL_CALLS][{"name": .., "arguments": {..}}, ..] or
//            [TOOL_CALLS]name[ARGS]{..} (optionally [CALL_ID]id before [ARGS]), repeated
//   deepseek (R1 distills, V3, V3.1)  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name
//            ```json {..} ```<｜tool▁call▁end｜>..., or V3.1's name<｜tool▁sep｜>{..} in the same frame
//   command-r (Command R7B)  <|START_ACTION|>[{"tool_name": .., "parameters": {..}}, ..]<|END_ACTION|>
//   gpt-oss  the harmony format: messages <|start|>assistant[ to=functions.NAME]<|channel|>CHANNEL
//            [to=functions.NAME][ <|constrain|>json]<|message|>BODY<|end|>; a message to
//            functions.NAME is a call, the final channel (and commentary to nobody) is content,
//            the analysis channel is reasoning (message.reasoning_content, as vLLM names it)
//
// A call is taken only when it parses completely and names a declared function (with a named
// tool_choice, that function); anything else, markup included, stays in the content as plain
// text (never an error). Content is the text outside the calls, whitespace next to a call
// trimmed; null when nothing is left.
// With parallel_tool_calls false only the first call is returned.
//
// ToolCallStream does the same on a stream: text before a call streams as content, text that may
// begin a call is held, and from a call's start on everything is held until the output ends, then
// parsed exactly as parse_tool_calls() does, so a stream assembles to the non-streamed answer.
//
// Thread safety: pure functions; a ToolCallStream belongs to one request.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_template.h"
#include "server/tool_request.h"

namespace kvstash::server {

enum class ToolCallFormat { kNone, kHermes, kLlama3, kMistral, kDeepSeek, kCommandR, kGptOss };

const char* tool_call_format_name(ToolCallFormat format);

// The family whose syntax the template's model writes calls in: built-in chatml is hermes,
// built-in llama3 is llama3; a Jinja template by the markup its text holds; kNone when none is
// known (Command R+'s "Action:" blocks, Kimi, GLM's XML, ...).
ToolCallFormat detect_tool_call_format(const ChatTemplate& chat_template);

// The markup texts of a format that vocabularies hold as control tokens (which render as nothing):
// the output must show them for the parser to see the calls.
std::vector<std::string> tool_call_marker_tokens(ToolCallFormat format);

struct ParsedToolCall {
  std::string id;         // 9 letters and digits (what Mistral's templates require of ids in history)
  std::string name;
  std::string arguments;  // a JSON object's text
};

struct ParsedOutput {
  std::optional<std::string> content;  // nullopt = null
  std::vector<ParsedToolCall> calls;
  std::string reasoning;               // gpt-oss's analysis channel; "" = none
};

// Parses a whole answer. `tools` gives the declared names and parallel_tool_calls.
ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, const ToolRequest& tools);

// OpenAI's message.tool_calls: [{id, type: "function", function: {name, arguments}}].
nlohmann::json tool_calls_json(const std::vector<ParsedToolCall>& calls);
// A fresh call id (9 random letters and digits).
std::string new_tool_call_id();

class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, const ToolRequest& tools) : format_(format), tools_(tools) {}

  // Adds output text; returns the content that can be sent now ("" when none).
  std::string push(std::string_view text);
  // The output ended: the held text parsed. `content` is what is still to be sent as content
  // (nullopt: nothing), `calls` the calls.
  ParsedOutput finish();

 private:
  ToolCallFormat format_;
  const ToolRequest& tools_;
  std::string held_;        // text not sent: a possible call start, or trailing whitespace
  bool in_call_ = false;    // a call began: everything is held until finish()
  bool sent_text_ = false;  // some non-whitespace content has been sent
};

}  // namespace kvstash::server
