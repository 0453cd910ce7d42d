#include "server/tool_calls.h"

#include <algorithm>
#include <random>

#include "server/tool_call_syntax.h"

namespace kvstash::server {
namespace {

using nlohmann::json;
using namespace tool_syntax;

// Where the next possible call starts at or after `from`: a start marker, or for Llama 3 a bare
// JSON object opening the answer (`at_start`: nothing but whitespace came before `text`).
std::size_t next_start(ToolCallFormat format, std::string_view text, std::size_t from, bool at_start) {
  std::size_t best = std::string_view::npos;
  for (std::string_view marker : start_markers(format)) best = std::min(best, text.find(marker, from));
  // gpt-oss: the generation prompt ends in "<|start|>assistant", so the answer opens with its
  // header (" to=functions.x" or "<|channel|>"): the whole answer is harmony messages.
  if (format == ToolCallFormat::kGptOss && at_start && from == 0) return 0;
  if (format == ToolCallFormat::kLlama3 && at_start) {
    const std::size_t first = skip_ws(text, 0);
    if (first >= from && first < text.size() && text[first] == '{') best = std::min(best, first);
  }
  return best;
}

std::string_view trim_left(std::string_view s) { return s.substr(std::min(s.size(), skip_ws(s, 0))); }
std::string_view trim_right(std::string_view s) {
  const std::size_t e = s.find_last_not_of(kWhitespace);
  return e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
}

ParsedOutput parse_region(ToolCallFormat format, std::string_view text, const ToolRequest& tools, bool at_start) {
  ParsedOutput out;
  std::string content;
  std::size_t pos = 0;     // start of the text not yet placed
  std::size_t search = 0;  // where to look for the next start
  bool after_call = false;
  for (;;) {
    const std::size_t start = next_start(format, text, search, at_start);
    if (start == std::string_view::npos) break;
    std::optional<Scan> scan = parse_at(format, text, start, tools);
    if (!scan) {  // not a call: its markup stays text
      search = start + 1;
      continue;
    }
    std::string_view before = trim_right(text.substr(pos, start - pos));
    content += after_call ? trim_left(before) : before;
    content += scan->content;
    out.reasoning += scan->reasoning;
    out.calls.insert(out.calls.end(), scan->calls.begin(), scan->calls.end());
    pos = search = scan->end;
    after_call = true;
  }
  if (!after_call) {
    out.content = std::string(text);
    return out;
  }
  content += trim_left(text.substr(pos));
  if (!content.empty()) out.content = std::move(content);
  if (!tools.parallel && out.calls.size() > 1) out.calls.resize(1);
  return out;
}

// Whether the end of `text` could be the beginning of one of the format's call starts.
std::size_t possible_start_suffix(ToolCallFormat format, std::string_view text) {
  for (std::string_view marker : start_markers(format)) {
    for (std::size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n) {
      if (text.substr(text.size() - n) == marker.substr(0, n)) return text.size() - n;
    }
  }
  return std::string_view::npos;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kDeepSeek: return "deepseek";
    case ToolCallFormat::kCommandR: return "command-r";
    case ToolCallFormat::kGptOss: return "gpt-oss";
    case ToolCallFormat::kNone: break;
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(const ChatTemplate& chat_template) {
  if (!chat_template.is_jinja()) {
    return chat_template == ChatTemplate::kLlama3 ? ToolCallFormat::kLlama3 : ToolCallFormat::kHermes;
  }
  const std::string& source = chat_template.source();
  const auto has = [&](std::string_view s) { return source.find(s) != std::string::npos; };
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  // <tool_call> with XML inside (Qwen3-Coder's <function=..>, GLM's <arg_key>) is another syntax.
  if (has("<tool_call>")) return has("<function=") || has("<arg_key>") ? ToolCallFormat::kNone : ToolCallFormat::kHermes;
  if (has(kDeepSeekCallBegin)) return ToolCallFormat::kDeepSeek;
  if (has("<|START_ACTION|>")) return ToolCallFormat::kCommandR;
  if (has("<|channel|>") && has("<|call|>")) return ToolCallFormat::kGptOss;  // harmony
  // Llama 3.1+ templates: the ipython role or <|python_tag|> beside Llama 3's headers.
  if (has("<|start_header_id|>") && (has("<|python_tag|>") || has("ipython"))) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kNone;
}

std::vector<std::string> tool_call_marker_tokens(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kLlama3: return {"<|python_tag|>"};
    case ToolCallFormat::kMistral: return {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"};
    case ToolCallFormat::kDeepSeek:
      return {std::string(kDeepSeekCallsBegin), std::string(kDeepSeekCallsEnd), std::string(kDeepSeekCallBegin),
              std::string(kDeepSeekCallEnd), std::string(kDeepSeekSep)};
    case ToolCallFormat::kCommandR: return {"<|START_ACTION|>", "<|END_ACTION|>"};
    case ToolCallFormat::kGptOss: return {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"};
    case ToolCallFormat::kNone: break;
  }
  return {};
}

ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, const ToolRequest& tools) {
  return parse_region(format, text, tools, /*at_start=*/true);
}

json tool_calls_json(const std::vector<ParsedToolCall>& calls) {
  json out = json::array();
  for (const ParsedToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

std::string ToolCallStream::push(std::string_view text) {
  held_ += text;
  if (in_call_) return "";
  const std::size_t start = next_start(format_, held_, 0, /*at_start=*/!sent_text_);
  if (start != std::string::npos) {
    // From here on everything waits for finish(); whitespace before the start stays held with it
    // (trimmed if a call follows, kept if the markup turns out to be text).
    std::string out = held_.substr(0, trim_right(std::string_view(held_).substr(0, start)).size());
    held_.erase(0, out.size());
    in_call_ = true;
    if (!trim_left(out).empty()) sent_text_ = true;
    return out;
  }
  // Hold a possible start and trailing whitespace; Llama 3's bare JSON can start only the answer,
  // so before any text all whitespace is held.
  std::size_t keep = std::min(possible_start_suffix(format_, held_), held_.size());
  keep = trim_right(std::string_view(held_).substr(0, keep)).size();  // whitespace before it waits too
  std::string out = held_.substr(0, keep);
  held_.erase(0, keep);
  if (!trim_left(out).empty()) sent_text_ = true;
  return out;
}

ParsedOutput ToolCallStream::finish() {
  ParsedOutput out = parse_region(format_, held_, tools_, /*at_start=*/!sent_text_);
  held_.clear();
  if (out.content && out.content->empty()) out.content.reset();
  return out;
}

}  // namespace kvstash::server
