#include "tokenizer/pre_tokenizer.h"

#include <cstddef>

#include "tokenizer/unicode.h"

namespace kvstash::tokenizer {
namespace {

// Code points of the text with bounds-safe accessors: past the end reads as "no char".
class Cursor {
 public:
  explicit Cursor(const std::vector<CodePoint>& cps) : cps_(cps) {}
  std::size_t size() const { return cps_.size(); }
  char32_t value(std::size_t i) const { return i < cps_.size() ? cps_[i].value : 0; }
  std::uint8_t flags(std::size_t i) const { return i < cps_.size() ? cps_[i].flags : 0; }
  bool in_range(std::size_t i) const { return i < cps_.size(); }
  bool is_letter(std::size_t i) const { return flags(i) & kLetter; }
  bool is_number(std::size_t i) const { return flags(i) & kNumber; }
  bool is_space(std::size_t i) const { return flags(i) & kWhitespace; }
  // [^\s\p{L}\p{N}]: a char that is none of the three classes.
  bool is_other(std::size_t i) const { return in_range(i) && (flags(i) & (kLetter | kNumber | kWhitespace)) == 0; }
  bool is_newline(std::size_t i) const { return value(i) == '\r' || value(i) == '\n'; }

  // Index past the run of chars starting at i for which pred holds.
  template <typename Pred>
  std::size_t skip(std::size_t i, Pred pred) const {
    while (in_range(i) && pred(i)) ++i;
    return i;
  }

 private:
  const std::vector<CodePoint>& cps_;
};

char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

// 's 't 're 've 'm 'll 'd at i; returns the match's length in chars or 0.
std::size_t match_contraction(const Cursor& s, std::size_t i, bool ignore_case) {
  if (s.value(i) != '\'') return 0;
  const auto at = [&](std::size_t k) { return ignore_case ? ascii_lower(s.value(k)) : s.value(k); };
  const char32_t c1 = at(i + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  const char32_t c2 = at(i + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace char i: the whole run at the end of the text, otherwise the
// run less its last char (which then prefixes the next word), but at least one char.
std::size_t match_space_run(const Cursor& s, std::size_t i) {
  const std::size_t end = s.skip(i, [&](std::size_t k) { return s.is_space(k); });
  const std::size_t run = end - i;
  if (run > 1 && s.in_range(end)) return run - 1;
  return run;
}

// One match of the Llama 3 / Qwen2 regex at i (i < size); returns its length in chars (>= 1).
std::size_t match_llama3(const Cursor& s, std::size_t i, std::size_t max_digits) {
  if (std::size_t n = match_contraction(s, i, /*ignore_case=*/true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (s.is_letter(i)) {
    return s.skip(i, [&](std::size_t k) { return s.is_letter(k); }) - i;
  }
  if (!s.is_newline(i) && !s.is_number(i) && s.is_letter(i + 1)) {
    return s.skip(i + 1, [&](std::size_t k) { return s.is_letter(k); }) - i;
  }
  // \p{N}{1,max_digits}
  if (s.is_number(i)) {
    std::size_t k = i;
    while (k - i < max_digits && s.is_number(k)) ++k;
    return k - i;
  }
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  {
    const std::size_t start = (s.value(i) == ' ' && s.is_other(i + 1)) ? i + 1 : i;
    if (s.is_other(start)) {
      std::size_t k = s.skip(start, [&](std::size_t j) { return s.is_other(j); });
      k = s.skip(k, [&](std::size_t j) { return s.is_newline(j); });
      return k - i;
    }
  }
  if (s.is_space(i)) {
    // \s*[\r\n]+ : greedy over the whitespace run, backtracking to its last newline.
    std::size_t k = i;
    std::size_t past_last_newline = 0;
    while (s.is_space(k)) {
      if (s.is_newline(k)) past_last_newline = k + 1;
      ++k;
    }
    if (past_last_newline != 0) return past_last_newline - i;
    return match_space_run(s, i);
  }
  return 1;  // unreachable: every char is a letter, number, whitespace or other
}

// One match of the GPT-2 regex at i.
std::size_t match_gpt2(const Cursor& s, std::size_t i) {
  if (std::size_t n = match_contraction(s, i, /*ignore_case=*/false)) return n;
  const bool space = s.value(i) == ' ';
  // ' '?\p{L}+ | ' '?\p{N}+ | ' '?[^\s\p{L}\p{N}]+ : the optional space, then a run of one class.
  const auto run_of = [&](std::uint8_t cls) -> std::size_t {
    const auto in_class = [&](std::size_t k) {
      return cls == kOther ? s.is_other(k) : (s.flags(k) & cls) != 0;
    };
    std::size_t start = i;
    if (space && in_class(i + 1)) start = i + 1;
    if (!in_class(start)) return 0;
    return s.skip(start, in_class) - i;
  };
  if (std::size_t n = run_of(kLetter)) return n;
  if (std::size_t n = run_of(kNumber)) return n;
  if (std::size_t n = run_of(kOther)) return n;
  if (s.is_space(i)) return match_space_run(s, i);
  return 1;
}

}  // namespace

Expected<PreTokenizerKind> pre_tokenizer_kind(std::string_view name) {
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizerKind::kLlama3;
  if (name == "qwen2") return PreTokenizerKind::kQwen2;
  if (name == "gpt2" || name == "default" || name.empty()) return PreTokenizerKind::kGpt2;
  return unsupported("pre-tokenizer '" + std::string(name) + "' is not supported");
}

void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>* pieces) {
  const std::vector<CodePoint> cps = decode_utf8(text);
  const Cursor cursor(cps);
  std::size_t i = 0;
  while (i < cps.size()) {
    std::size_t n = 0;
    switch (kind) {
      case PreTokenizerKind::kLlama3: n = match_llama3(cursor, i, 3); break;
      case PreTokenizerKind::kQwen2: n = match_llama3(cursor, i, 1); break;
      case PreTokenizerKind::kGpt2: n = match_gpt2(cursor, i); break;
    }
    const std::size_t end = i + n;
    const std::size_t begin_byte = cps[i].offset;
    const std::size_t end_byte = end < cps.size() ? cps[end].offset : text.size();
    pieces->push_back(text.substr(begin_byte, end_byte - begin_byte));
    i = end;
  }
}

}  // namespace kvstash::tokenizer
