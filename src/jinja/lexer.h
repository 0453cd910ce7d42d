// Splits a template's source into tokens: text between tags, and the tokens inside {{ }} and
// {% %} tags. Comments {# #} are dropped. Whitespace control follows Jinja2 as Hugging Face
// configures it for chat templates (trim_blocks and lstrip_blocks on, keep_trailing_newline off):
//
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it;
//   - trim_blocks: the first newline after a block or comment tag is removed ("+%}" keeps it);
//   - lstrip_blocks: spaces and tabs between a line's start and a block or comment tag are
//     removed ("{%+" keeps them);
//   - one trailing newline of the source is dropped; "\r\n" and "\r" read as "\n".
//
// Errors (a thrown Error with the line) name the problem: an unclosed tag, comment or string.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::jinja {

// A template error: parse or render. `what()` holds the message with its line.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int line)
      : std::runtime_error(line > 0 ? message + " (line " + std::to_string(line) + ")" : message) {}
};

struct Token {
  enum class Kind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // text, name, string value (escapes decoded), or operator
  std::int64_t int_value = 0;
  double float_value = 0;
  int line = 0;
};

std::vector<Token> tokenize(std::string_view source);

}  // namespace kvstash::jinja
