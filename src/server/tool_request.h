// The tool-calling part of an OpenAI chat request: `tools`, `tool_choice`, `parallel_tool_calls`,
// and the tool fields of messages (an assistant's `tool_calls`, a tool message's `tool_call_id`).
// Parsed and validated here; every error is a 400 naming the field (param "tools[1].function.name",
// "messages[2].tool_calls[0].function.arguments", ...).
//
// What reaches the chat template (chat_template.h) is what the OpenAI API defines, never less:
// the `tools` array as the client sent it (object keys in the client's order, as Python's
// json.loads keeps them, because templates print schemas with tojson), and each message's
// tool_calls, tool_call_id and name. One conversion, as vLLM and Hugging Face's templates expect:
// a call's `arguments` (a JSON string in the API) is given to the template as the object it
// encodes, so that templates that write `arguments | tojson` do not encode it twice; arguments
// that are not a JSON object stay the string they were.
//
// Not here: turning the model's output into tool_calls (tool_calls.h) and constraining decoding
// for `required` / a named choice (the grammar module; tool_call_schema() below is its input).
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace kvstash::server {

// One call the assistant made, as a history message carries it.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // the JSON text as the API gives it (a string)
};

// One declared function.
struct ToolFunction {
  std::string name;
  std::string description;      // "" when none
  std::string parameters_json;  // its JSON schema as sent (key order kept); "" when none
};

enum class ToolChoice {
  kNone,      // the model must not call: output is never parsed for calls
  kAuto,      // the model may call (the default when tools are given)
  kRequired,  // the model must call one or more functions
  kNamed,     // the model must call `ToolRequest::named_function`
};

struct ToolRequest {
  std::vector<ToolFunction> functions;  // empty: no tools
  std::string tools_json;               // the `tools` array as sent (key order kept); "" when none
  ToolChoice choice = ToolChoice::kAuto;
  std::string named_function;           // for kNamed
  bool parallel = true;                 // parallel_tool_calls (OpenAI's default true)

  bool has_tools() const { return !functions.empty(); }
  // Whether the output is parsed for tool calls.
  bool parse_calls() const { return has_tools() && choice != ToolChoice::kNone; }
};

// OpenAI's limit on a function's name: letters, digits, '_' and '-', at most 64 of them.
inline constexpr std::size_t kMaxToolNameChars = 64;
// OpenAI's limit on the number of tools in one request.
inline constexpr std::size_t kMaxTools = 128;

// Parses `tools`, `tool_choice` and `parallel_tool_calls` of `body`. `raw_body` is the same body
// as text: the tools are read from it again with their keys in order (`body` has them sorted).
// Errors (400): tools not an array of {type: "function", function: {name, description?,
// parameters?, strict?}}, a bad or repeated name, a tool_choice naming no declared function,
// "required" or a named choice without tools.
std::optional<ApiError> parse_tool_request(const nlohmann::json& body, std::string_view raw_body, ToolRequest& out);

// A message's tool fields: for an assistant, `tool_calls` ([{id, type: "function", function:
// {name, arguments}}]); for a tool message, `tool_call_id` (required, a string); `name` on any
// message. `param` is the message's ("messages[3]"). Errors (400) name the field.
std::optional<ApiError> parse_message_tool_fields(const nlohmann::json& message, const std::string& param,
                                                  const std::string& role, std::vector<ToolCall>& tool_calls,
                                                  std::string& tool_call_id, std::string& name);

// The seam for constrained decoding of `required` and named choices: the JSON schema of one call,
// {"type": "object", "properties": {"name": {"const": NAME}, "arguments": PARAMETERS}, "required":
// ["name", "arguments"], "additionalProperties": false}, or for several functions {"anyOf": [...]}
// of those. For kNamed, only the named function. A function without parameters takes {"type":
// "object"}. How a call is wrapped in the model's syntax (tool_calls.h) is the format's concern.
// `arguments_key` names the arguments' property ("arguments"; Llama 3.x writes "parameters").
nlohmann::ordered_json tool_call_schema(const ToolRequest& tools, const std::string& arguments_key = "arguments");

}  // namespace kvstash::server
