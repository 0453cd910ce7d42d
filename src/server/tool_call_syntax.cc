#include "server/tool_call_syntax.h"

#include <algorithm>

namespace kvstash::server::tool_syntax {
namespace {

using nlohmann::ordered_json;

bool consume(std::string_view text, std::size_t& pos, std::string_view what) {
  if (text.substr(pos, what.size()) != what) return false;
  pos += what.size();
  return true;
}

// The end of the JSON object or array that starts at `pos` (brackets balanced outside strings),
// or npos. Only the extent: the value is parsed afterwards.
std::size_t json_end(std::string_view text, std::size_t pos) {
  if (pos >= text.size() || (text[pos] != '{' && text[pos] != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// Parses the JSON value at `pos`; advances `pos` past it. Discarded on failure.
ordered_json take_json(std::string_view text, std::size_t& pos) {
  const std::size_t end = json_end(text, pos);
  if (end == std::string_view::npos) return ordered_json(ordered_json::value_t::discarded);
  ordered_json value = ordered_json::parse(text.substr(pos, end - pos), nullptr, /*allow_exceptions=*/false);
  if (!value.is_discarded()) pos = end;
  return value;
}

// A named tool_choice allows that function only: a call to another stays text.
bool declared(const ToolRequest& tools, const std::string& name) {
  if (tools.choice == ToolChoice::kNamed) return name == tools.named_function;
  return std::any_of(tools.functions.begin(), tools.functions.end(),
                     [&](const ToolFunction& f) { return f.name == name; });
}

// A call from its name and arguments (an object, or a string holding one), if the function is
// declared.
std::optional<ParsedToolCall> make_call(const ordered_json* name, const ordered_json* args, const ToolRequest& tools) {
  if (name == nullptr || !name->is_string() || args == nullptr) return std::nullopt;
  ordered_json object = *args;
  if (object.is_string()) object = ordered_json::parse(args->get<std::string>(), nullptr, false);
  if (!object.is_object()) return std::nullopt;
  ParsedToolCall call{new_tool_call_id(), name->get<std::string>(), object.dump(-1, ' ', false, ordered_json::error_handler_t::replace)};
  if (!declared(tools, call.name)) return std::nullopt;
  return call;
}

const ordered_json* member(const ordered_json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// A call object with the name under `name_key` and the arguments under one of `args_keys`.
std::optional<ParsedToolCall> call_from_object(const ordered_json& object, const char* name_key,
                                               std::initializer_list<const char*> args_keys, const ToolRequest& tools) {
  const ordered_json* args = nullptr;
  for (const char* key : args_keys) {
    if (args == nullptr) args = member(object, key);
  }
  return make_call(member(object, name_key), args, tools);
}

// A JSON array of call objects (Mistral's and Command R's lists).
bool calls_from_array(const ordered_json& list, const char* name_key, std::initializer_list<const char*> args_keys,
                      const ToolRequest& tools, std::vector<ParsedToolCall>& out) {
  if (!list.is_array() || list.empty()) return false;
  for (const ordered_json& item : list) {
    std::optional<ParsedToolCall> call = call_from_object(item, name_key, args_keys, tools);
    if (!call) return false;
    out.push_back(std::move(*call));
  }
  return true;
}


std::optional<Scan> parse_hermes(std::string_view text, std::size_t pos, const ToolRequest& tools) {
  Scan scan;
  if (!consume(text, pos, "<tool_call>")) return std::nullopt;
  pos = skip_ws(text, pos);
  const ordered_json object = take_json(text, pos);
  std::optional<ParsedToolCall> call = call_from_object(object, "name", {"arguments", "parameters"}, tools);
  if (!call) return std::nullopt;
  pos = skip_ws(text, pos);
  // The closing tag may be missing at the very end (a stop string or the end token cut it).
  if (!consume(text, pos, "</tool_call>") && pos != text.size()) return std::nullopt;
  scan.calls.push_back(std::move(*call));
  scan.end = pos;
  return scan;
}

// Llama 3.x: JSON calls separated by ';' up to the end of the output, after <|python_tag|> or as
// the whole answer.
std::optional<Scan> parse_llama3(std::string_view text, std::size_t pos, const ToolRequest& tools) {
  Scan scan;
  consume(text, pos, "<|python_tag|>");
  for (;;) {
    pos = skip_ws(text, pos);
    const ordered_json object = take_json(text, pos);
    std::optional<ParsedToolCall> call = call_from_object(object, "name", {"parameters", "arguments"}, tools);
    if (!call) return std::nullopt;
    scan.calls.push_back(std::move(*call));
    pos = skip_ws(text, pos);
    if (pos == text.size()) break;
    if (text[pos] != ';') return std::nullopt;
    ++pos;
    if (skip_ws(text, pos) == text.size()) break;
  }
  scan.end = text.size();
  return scan;
}

std::optional<Scan> parse_mistral(std::string_view text, std::size_t pos, const ToolRequest& tools) {
  Scan scan;
  if (!consume(text, pos, "[TOOL_CALLS]")) return std::nullopt;
  pos = skip_ws(text, pos);
  if (pos < text.size() && text[pos] == '[') {  // v3: a JSON list
    if (!calls_from_array(take_json(text, pos), "name", {"arguments", "parameters"}, tools, scan.calls)) return std::nullopt;
  } else {  // v11: name[ARGS]{...}, optionally name[CALL_ID]id[ARGS]{...}
    const std::size_t args = text.find("[ARGS]", pos);
    if (args == std::string_view::npos) return std::nullopt;
    std::string_view name = text.substr(pos, args - pos);
    name = name.substr(0, name.find("[CALL_ID]"));
    pos = skip_ws(text, args + 6);
    const ordered_json arguments = take_json(text, pos);
    const ordered_json name_json = std::string(name.substr(0, name.find_last_not_of(kWhitespace) + 1));
    std::optional<ParsedToolCall> call = make_call(&name_json, &arguments, tools);
    if (!call) return std::nullopt;
    scan.calls.push_back(std::move(*call));
  }
  scan.end = pos;
  return scan;
}

std::optional<Scan> parse_deepseek(std::string_view text, std::size_t pos, const ToolRequest& tools) {
  Scan scan;
  if (!consume(text, pos, kDeepSeekCallsBegin)) return std::nullopt;
  for (;;) {
    pos = skip_ws(text, pos);
    if (consume(text, pos, kDeepSeekCallsEnd) || pos == text.size()) break;
    if (!consume(text, pos, kDeepSeekCallBegin)) return std::nullopt;
    const std::size_t sep = text.find(kDeepSeekSep, pos);
    if (sep == std::string_view::npos) return std::nullopt;
    std::string head(text.substr(pos, sep - pos));
    pos = sep + kDeepSeekSep.size();
    std::string name;
    if (head == "function") {  // R1 / V3: the name, then the arguments in a ```json fence
      const std::size_t newline = text.find('\n', pos);
      if (newline == std::string_view::npos) return std::nullopt;
      name = std::string(text.substr(pos, newline - pos));
      pos = skip_ws(text, newline);
      if (!consume(text, pos, "```json")) return std::nullopt;
      pos = skip_ws(text, pos);
    } else {  // V3.1: name<sep>arguments
      name = head;
    }
    const ordered_json arguments = take_json(text, pos);
    const ordered_json name_json = name;
    std::optional<ParsedToolCall> call = make_call(&name_json, &arguments, tools);
    if (!call) return std::nullopt;
    pos = skip_ws(text, pos);
    if (head == "function" && !consume(text, pos, "```")) return std::nullopt;
    pos = skip_ws(text, pos);
    if (!consume(text, pos, kDeepSeekCallEnd) && pos != text.size()) return std::nullopt;
    scan.calls.push_back(std::move(*call));
  }
  scan.end = pos;
  return scan;
}

std::optional<Scan> parse_command_r(std::string_view text, std::size_t pos, const ToolRequest& tools) {
  Scan scan;
  if (!consume(text, pos, "<|START_ACTION|>")) return std::nullopt;
  pos = skip_ws(text, pos);
  if (!calls_from_array(take_json(text, pos), "tool_name", {"parameters"}, tools, scan.calls)) return std::nullopt;
  pos = skip_ws(text, pos);
  if (!consume(text, pos, "<|END_ACTION|>") && pos != text.size()) return std::nullopt;
  scan.end = pos;
  return scan;
}

// gpt-oss (harmony): every message to the end of the output. A header is the text before
// <|message|> ("assistant", " to=functions.NAME", "<|channel|>commentary", " <|constrain|>json");
// a body ends at <|end|> or the next <|start|> (<|call|> and <|return|> end generation and never
// reach the text).
std::optional<Scan> parse_gpt_oss(std::string_view text, std::size_t pos, const ToolRequest& tools) {
  Scan scan;
  while (pos < text.size()) {
    consume(text, pos, "<|start|>");
    const std::size_t message = text.find("<|message|>", pos);
    if (message == std::string_view::npos) return std::nullopt;
    const std::string_view header = text.substr(pos, message - pos);
    pos = message + 11;  // "<|message|>"
    const std::size_t end = std::min(text.find("<|end|>", pos), text.find("<|start|>", pos));
    const std::string_view body = text.substr(pos, std::min(end, text.size()) - pos);
    pos = end == std::string_view::npos ? text.size() : end;
    consume(text, pos, "<|end|>");
    const std::size_t channel_at = header.find("<|channel|>");
    if (channel_at == std::string_view::npos) return std::nullopt;
    std::string_view channel = header.substr(channel_at + 11);
    channel = channel.substr(0, std::min(channel.find(' '), channel.find("<|")));
    const std::size_t to = header.find("to=functions.");
    if (to != std::string_view::npos) {
      std::string_view name = header.substr(to + 13);
      name = name.substr(0, std::min({name.find(' '), name.find("<|"), name.size()}));
      std::size_t args_pos = skip_ws(body, 0);
      const ordered_json arguments = take_json(body, args_pos);
      const ordered_json name_json = std::string(name);
      std::optional<ParsedToolCall> call = make_call(&name_json, &arguments, tools);
      if (!call || skip_ws(body, args_pos) != body.size()) return std::nullopt;
      scan.calls.push_back(std::move(*call));
    } else if (channel == "analysis") {
      scan.reasoning += body;
    } else if (channel == "final" || channel == "commentary") {
      scan.content += body;
    } else {
      return std::nullopt;
    }
  }
  scan.end = text.size();
  return scan;
}

}  // namespace

std::vector<std::string_view> start_markers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return {"<tool_call>"};
    case ToolCallFormat::kLlama3: return {"<|python_tag|>"};
    case ToolCallFormat::kMistral: return {"[TOOL_CALLS]"};
    case ToolCallFormat::kDeepSeek: return {kDeepSeekCallsBegin};
    case ToolCallFormat::kCommandR: return {"<|START_ACTION|>"};
    case ToolCallFormat::kGptOss: return {"<|channel|>", "<|start|>"};
    case ToolCallFormat::kNone: break;
  }
  return {};
}

std::size_t skip_ws(std::string_view text, std::size_t pos) {
  const std::size_t p = text.find_first_not_of(kWhitespace, pos);
  return p == std::string_view::npos ? text.size() : p;
}

std::optional<Scan> parse_at(ToolCallFormat format, std::string_view text, std::size_t pos, const ToolRequest& tools) {
  switch (format) {
    case ToolCallFormat::kHermes: return parse_hermes(text, pos, tools);
    case ToolCallFormat::kLlama3: return parse_llama3(text, pos, tools);
    case ToolCallFormat::kMistral: return parse_mistral(text, pos, tools);
    case ToolCallFormat::kDeepSeek: return parse_deepseek(text, pos, tools);
    case ToolCallFormat::kCommandR: return parse_command_r(text, pos, tools);
    case ToolCallFormat::kGptOss: return parse_gpt_oss(text, pos, tools);
    case ToolCallFormat::kNone: break;
  }
  return std::nullopt;
}

}  // namespace kvstash::server::tool_syntax
