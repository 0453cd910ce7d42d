#include "jinja/lexer.h"

#include <cstdlib>

#include "jinja/value.h"

namespace kvstash::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's string-literal escapes (Jinja2 decodes literals with "unicode-escape"); an unknown
// escape keeps its backslash.
std::size_t decode_escape(std::string_view s, std::size_t i, std::string* out) {
  // s[i] is the char after the backslash; returns the index after the escape.
  const char c = s[i];
  const auto hex = [&](std::size_t start, std::size_t count) -> long {
    if (start + count > s.size()) return -1;
    long v = 0;
    for (std::size_t k = start; k < start + count; ++k) {
      const char h = s[k];
      int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  };
  switch (c) {
    case 'n': out->push_back('\n'); return i + 1;
    case 't': out->push_back('\t'); return i + 1;
    case 'r': out->push_back('\r'); return i + 1;
    case '\\': out->push_back('\\'); return i + 1;
    case '\'': out->push_back('\''); return i + 1;
    case '"': out->push_back('"'); return i + 1;
    case 'a': out->push_back('\a'); return i + 1;
    case 'b': out->push_back('\b'); return i + 1;
    case 'f': out->push_back('\f'); return i + 1;
    case 'v': out->push_back('\v'); return i + 1;
    case '\n': return i + 1;  // a backslash-newline continues the line
    case 'x': case 'u': case 'U': {
      const std::size_t count = c == 'x' ? 2 : c == 'u' ? 4 : 8;
      const long v = hex(i + 1, count);
      if (v < 0) break;
      *out += to_utf8(std::u32string(1, static_cast<char32_t>(v)));
      return i + 1 + count;
    }
    default:
      if (c >= '0' && c <= '7') {
        int v = 0;
        std::size_t k = i;
        while (k < s.size() && k < i + 3 && s[k] >= '0' && s[k] <= '7') v = v * 8 + (s[k++] - '0');
        *out += to_utf8(std::u32string(1, static_cast<char32_t>(v)));
        return k;
      }
      break;
  }
  out->push_back('\\');
  return i;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool strip_next_text = false;  // the previous tag ended with "-"
    while (pos_ < src_.size()) {
      const std::size_t tag = find_tag(pos_);
      std::size_t text_begin = pos_;
      std::size_t text_end = tag == std::string::npos ? src_.size() : tag;
      if (strip_next_text) {
        while (text_begin < text_end && is_space(src_[text_begin])) ++text_begin;
        strip_next_text = false;
      }
      if (tag == std::string::npos) {
        emit_text(text_begin, text_end);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (modifier == '-') {
        while (text_end > text_begin && is_space(src_[text_end - 1])) --text_end;
      } else if (kind != '{' && modifier != '+') {
        // lstrip_blocks: only spaces/tabs between the line's start and the tag.
        std::size_t line_start = text_end;
        while (line_start > text_begin && (src_[line_start - 1] == ' ' || src_[line_start - 1] == '\t')) --line_start;
        const bool at_line_start = line_start == 0 || src_[line_start - 1] == '\n';
        if (at_line_start) text_end = line_start;
      }
      emit_text(text_begin, text_end);
      pos_ = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool trimmed_end = false;
      if (kind == '#') {
        trimmed_end = lex_comment_end();
      } else {
        trimmed_end = lex_tag(kind == '{');
      }
      if (trimmed_end) strip_next_text = true;
    }
    push(Token::Kind::kEnd, "");
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  int line_at(std::size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  void push(Token::Kind kind, std::string text) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line_at(pos_);
    tokens_.push_back(std::move(t));
  }

  void emit_text(std::size_t begin, std::size_t end) {
    if (end > begin) push(Token::Kind::kText, src_.substr(begin, end - begin));
  }

  // After a block or comment end without "-": trim_blocks drops one newline unless "+".
  void trim_block_newline(bool plus) {
    if (!plus && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;
  }

  // Returns whether the comment ended with "-#}".
  bool lex_comment_end() {
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw Error("unclosed comment", line_at(pos_));
    const bool minus = end > pos_ && src_[end - 1] == '-';
    const bool plus = end > pos_ && src_[end - 1] == '+';
    pos_ = end + 2;
    if (!minus) trim_block_newline(plus);
    return minus;
  }

  // Lexes a {{ }} or {% %} tag's tokens; returns whether it ended with "-".
  bool lex_tag(bool variable) {
    push(variable ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, "");
    const int start_line = line_at(pos_);
    const std::string_view close = variable ? "}}" : "%}";
    int depth = 0;  // open ( [ {: "}}" inside a dict literal does not end the tag
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) throw Error(std::string("unclosed ") + (variable ? "'{{'" : "'{%'"), start_line);
      const std::string_view rest(src_.data() + pos_, src_.size() - pos_);
      if (depth == 0) {
        for (const char* mod : {"-", "+", ""}) {
          const std::string end = std::string(mod) + std::string(close);
          if (rest.substr(0, end.size()) == end) {
            pos_ += end.size();
            push(variable ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, "");
            if (*mod == '-') return true;
            if (!variable) trim_block_newline(*mod == '+');
            return false;
          }
        }
      }
      const char c = src_[pos_];
      if (is_name_start(c)) {
        std::size_t end = pos_;
        while (end < src_.size() && (is_name_start(src_[end]) || is_digit(src_[end]))) ++end;
        push(Token::Kind::kName, src_.substr(pos_, end - pos_));
        pos_ = end;
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                     ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        bool matched = false;
        for (const char* op : kOps) {
          const std::string_view o(op);
          if (rest.substr(0, o.size()) == o) {
            push(Token::Kind::kOp, std::string(o));
            pos_ += o.size();
            if (o == "(" || o == "[" || o == "{") ++depth;
            if ((o == ")" || o == "]" || o == "}") && depth > 0) --depth;
            matched = true;
            break;
          }
        }
        if (!matched) throw Error(std::string("unexpected character '") + c + "'", line_at(pos_));
      }
    }
  }

  void lex_number() {
    std::size_t end = pos_;
    std::string digits;
    while (end < src_.size() && (is_digit(src_[end]) || src_[end] == '_')) {
      if (src_[end] != '_') digits.push_back(src_[end]);
      ++end;
    }
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      is_float = true;
      digits.push_back('.');
      ++end;
      while (end < src_.size() && is_digit(src_[end])) digits.push_back(src_[end++]);
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      std::size_t k = end + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && is_digit(src_[k])) {
        is_float = true;
        digits.append(src_, end, k - end);
        end = k;
        while (end < src_.size() && is_digit(src_[end])) digits.push_back(src_[end++]);
      }
    }
    Token t;
    t.line = line_at(pos_);
    t.text = digits;
    if (is_float) {
      t.kind = Token::Kind::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.kind = Token::Kind::kInt;
      t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
    }
    tokens_.push_back(std::move(t));
    pos_ = end;
  }

  void lex_string(char quote) {
    const int line = line_at(pos_);
    std::string value;
    std::size_t i = pos_ + 1;
    for (;;) {
      if (i >= src_.size()) throw Error("unclosed string literal", line);
      const char c = src_[i];
      if (c == quote) break;
      if (c == '\\' && i + 1 < src_.size()) {
        i = decode_escape(src_, i + 1, &value);
        continue;
      }
      value.push_back(c);
      ++i;
    }
    Token t;
    t.kind = Token::Kind::kString;
    t.text = std::move(value);
    t.line = line;
    tokens_.push_back(std::move(t));
    pos_ = i + 1;
  }

  std::string src_;
  std::size_t pos_ = 0;
  std::size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// Newlines normalised to "\n" and one trailing newline dropped, as Jinja2 reads a source.
std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(normalize_source(source)).run(); }

}  // namespace kvstash::jinja
