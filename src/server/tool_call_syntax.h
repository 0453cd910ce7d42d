// The call syntaxes of the template families (tool_calls.h lists them): where a family's calls
// start, and the parser of the calls at one such start. tool_calls.cc scans whole answers and
// streams with these; nothing else uses them.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace kvstash::server::tool_syntax {

inline constexpr std::string_view kWhitespace = " \t\r\n";

// DeepSeek's markup (fullwidth bars and U+2581 in the token names).
inline constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";

// The texts that open a family's calls.
std::vector<std::string_view> start_markers(ToolCallFormat format);

// The first non-whitespace position at or after `pos` (text.size() when none).
std::size_t skip_ws(std::string_view text, std::size_t pos);

// What one parse at a start found.
struct Scan {
  std::size_t end = 0;
  std::vector<ParsedToolCall> calls;
  std::string content;    // gpt-oss: its final channel's text
  std::string reasoning;  // gpt-oss: its analysis channel's text
};

// The calls at `pos` (where a start marker, or for Llama 3 / gpt-oss the answer, begins), if
// they parse completely and name declared functions; nullopt otherwise (the text stays text).
std::optional<Scan> parse_at(ToolCallFormat format, std::string_view text, std::size_t pos, const ToolRequest& tools);

}  // namespace kvstash::server::tool_syntax
