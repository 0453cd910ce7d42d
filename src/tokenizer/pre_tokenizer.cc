#include "tokenizer/pre_tokenizer.h"

#include <cstddef>
#include <utility>

#include <unicode/uchar.h>

#include "tokenizer/unicode.h"

namespace kvstash::tokenizer {
namespace {

// The code points of one piece [begin, end) of the text with bounds-safe accessors: past the
// piece's end reads as "no char", so lookaheads such as (?!\S) see the piece's end as the end.
class Cursor {
 public:
  Cursor(const std::vector<CodePoint>& cps, std::size_t end) : cps_(cps), end_(end) {}
  char32_t value(std::size_t i) const { return i < end_ ? cps_[i].value : 0; }
  std::uint8_t flags(std::size_t i) const { return i < end_ ? cps_[i].flags : 0; }
  bool in_range(std::size_t i) const { return i < end_; }
  std::size_t end() const { return end_; }
  bool is_letter(std::size_t i) const { return flags(i) & kLetter; }
  bool is_number(std::size_t i) const { return flags(i) & kNumber; }
  bool is_space(std::size_t i) const { return flags(i) & kWhitespace; }
  bool is_punct(std::size_t i) const { return flags(i) & kPunctuation; }
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
  std::size_t end_;
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

// \s+(?!\S)|\s+ at a whitespace char i: the whole run at the end of the piece, otherwise the
// run less its last char (which then prefixes the next word), but at least one char.
std::size_t match_space_run(const Cursor& s, std::size_t i) {
  const std::size_t end = s.skip(i, [&](std::size_t k) { return s.is_space(k); });
  const std::size_t run = end - i;
  if (run > 1 && s.in_range(end)) return run - 1;
  return run;
}

// One match of the Llama 3 / Qwen2 / Qwen3.5 regex at i (i < end); its length in chars (>= 1).
// with_marks: Qwen3.5's [\p{L}\p{M}] letters.
std::size_t match_llama3(const Cursor& s, std::size_t i, std::size_t max_digits, bool with_marks) {
  if (std::size_t n = match_contraction(s, i, /*ignore_case=*/true)) return n;
  const std::uint8_t letter_bits = with_marks ? (kLetter | kMark) : kLetter;
  const auto letter = [&](std::size_t k) { return (s.flags(k) & letter_bits) != 0; };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (letter(i)) return s.skip(i, letter) - i;
  if (!s.is_newline(i) && !s.is_number(i) && !s.is_letter(i) && letter(i + 1)) {
    return s.skip(i + 1, letter) - i;
  }
  // \p{N}{1,max_digits}
  if (s.is_number(i)) {
    std::size_t k = i;
    while (k - i < max_digits && s.is_number(k)) ++k;
    return k - i;
  }
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  {
    const auto other = [&](std::size_t k) {
      return s.in_range(k) && (s.flags(k) & (letter_bits | kNumber | kWhitespace)) == 0;
    };
    const std::size_t start = (s.value(i) == ' ' && other(i + 1)) ? i + 1 : i;
    if (other(start)) {
      std::size_t k = s.skip(start, other);
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

// The stages of multi-stage kinds: a match's length at i, or 0 when none starts there.
std::size_t match_one_number(const Cursor& s, std::size_t i) { return s.is_number(i) ? 1 : 0; }
std::size_t match_number_run(const Cursor& s, std::size_t i) {
  return s.skip(i, [&](std::size_t k) { return s.is_number(k); }) - i;
}
std::size_t match_newline(const Cursor& s, std::size_t i) { return s.is_newline(i) ? 1 : 0; }

// [\p{P}\$\+<=>\^~\|`]+
std::size_t match_falcon_punct(const Cursor& s, std::size_t i) {
  const auto punct = [&](std::size_t k) {
    const char32_t c = s.value(k);
    return s.is_punct(k) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
           c == '~' || c == '|' || c == '`';
  };
  return s.skip(i, punct) - i;
}

// [0-9][0-9][0-9]
std::size_t match_three_ascii_digits(const Cursor& s, std::size_t i) {
  for (std::size_t k = i; k < i + 3; ++k) {
    if (s.value(k) < '0' || s.value(k) > '9') return 0;
  }
  return 3;
}

// \s?X+ for a class X.
template <typename Pred>
std::size_t match_space_then_run(const Cursor& s, std::size_t i, Pred in_class) {
  std::size_t start = i;
  if (s.is_space(i) && in_class(i + 1)) start = i + 1;
  if (!in_class(start)) return 0;
  return s.skip(start, in_class) - i;
}

std::size_t match_space_letters(const Cursor& s, std::size_t i) {
  return match_space_then_run(s, i, [&](std::size_t k) { return s.is_letter(k); });
}
std::size_t match_space_punct(const Cursor& s, std::size_t i) {
  return match_space_then_run(s, i, [&](std::size_t k) { return s.is_punct(k); });
}

// [一-龥ࠀ-一가-퟿]+ : U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF.
std::size_t match_cjk(const Cursor& s, std::size_t i) {
  const auto cjk = [&](std::size_t k) {
    const char32_t c = s.value(k);
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) || (c >= 0xAC00 && c <= 0xD7FF);
  };
  return s.skip(i, cjk) - i;
}

// \s?CASED+ with CASED = general categories Lu, Ll, Lt (see the header).
std::size_t match_space_cased(const Cursor& s, std::size_t i) {
  return match_space_then_run(s, i, [&](std::size_t k) {
    if (!s.is_letter(k)) return false;
    const std::uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(s.value(k)));
    return (mask & (U_GC_LU_MASK | U_GC_LL_MASK | U_GC_LT_MASK)) != 0;
  });
}

// \s?[!-/:-~！-／：-～‘-‟　-。]+
std::size_t match_space_ascii_punct(const Cursor& s, std::size_t i) {
  return match_space_then_run(s, i, [&](std::size_t k) {
    const char32_t c = s.value(k);
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '~') || (c >= 0xFF01 && c <= 0xFF0F) ||
           (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
  });
}

// \s+$
std::size_t match_trailing_space(const Cursor& s, std::size_t i) {
  const std::size_t end = s.skip(i, [&](std::size_t k) { return s.is_space(k); });
  return end == s.end() ? end - i : 0;
}

using Stage = std::size_t (*)(const Cursor&, std::size_t);

std::size_t match_gpt2_stage(const Cursor& s, std::size_t i) { return match_gpt2(s, i); }

std::vector<Stage> stages_of(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kDigitsGpt2: return {match_one_number, match_gpt2_stage};
    case PreTokenizerKind::kFalcon: return {match_falcon_punct, match_gpt2_stage, match_three_ascii_digits};
    case PreTokenizerKind::kDeepseekCoder:
      return {match_newline, match_space_letters, match_space_punct, match_cjk, match_one_number};
    case PreTokenizerKind::kDeepseekLlm:
      return {match_newline, match_space_cased, match_space_ascii_punct, match_trailing_space, match_cjk,
              match_number_run};
    default: return {};
  }
}

struct NamedKind {
  std::string_view name;
  PreTokenizerKind kind;
};
// The names GGUF writers put in tokenizer.ggml.pre for the regexes above.
constexpr NamedKind kNames[] = {
    {"llama-bpe", PreTokenizerKind::kLlama3},    {"llama3", PreTokenizerKind::kLlama3},
    {"llama-v3", PreTokenizerKind::kLlama3},     {"falcon3", PreTokenizerKind::kLlama3},
    {"pixtral", PreTokenizerKind::kLlama3},      {"dbrx", PreTokenizerKind::kLlama3},
    {"smaug-bpe", PreTokenizerKind::kLlama3},    {"qwen2", PreTokenizerKind::kQwen2},
    {"deepseek-r1-qwen", PreTokenizerKind::kQwen2}, {"stablelm2", PreTokenizerKind::kQwen2},
    {"qwen35", PreTokenizerKind::kQwen35},       {"gpt2", PreTokenizerKind::kGpt2},
    {"gpt-2", PreTokenizerKind::kGpt2},          {"default", PreTokenizerKind::kGpt2},
    {"olmo", PreTokenizerKind::kGpt2},           {"jais", PreTokenizerKind::kGpt2},
    {"mpt", PreTokenizerKind::kGpt2},            {"starcoder", PreTokenizerKind::kDigitsGpt2},
    {"refact", PreTokenizerKind::kDigitsGpt2},   {"command-r", PreTokenizerKind::kDigitsGpt2},
    {"smollm", PreTokenizerKind::kDigitsGpt2},   {"codeshell", PreTokenizerKind::kDigitsGpt2},
    {"exaone", PreTokenizerKind::kDigitsGpt2},   {"minerva-7b", PreTokenizerKind::kDigitsGpt2},
    {"falcon", PreTokenizerKind::kFalcon},       {"deepseek-coder", PreTokenizerKind::kDeepseekCoder},
    {"deepseek-llm", PreTokenizerKind::kDeepseekLlm}, {"gemma4", PreTokenizerKind::kGemma4},
};

// One regex's split of the piece [begin, end): its matches and the gaps between them.
void split_stage(Stage stage, const std::vector<CodePoint>& cps, std::size_t begin, std::size_t end,
                 std::vector<std::pair<std::size_t, std::size_t>>* out) {
  const Cursor cursor(cps, end);
  std::size_t gap = begin;
  std::size_t i = begin;
  while (i < end) {
    const std::size_t n = stage(cursor, i);
    if (n == 0) {
      ++i;
      continue;
    }
    if (gap < i) out->emplace_back(gap, i);
    out->emplace_back(i, i + n);
    i += n;
    gap = i;
  }
  if (gap < end) out->emplace_back(gap, end);
}

}  // namespace

Expected<PreTokenizerKind> pre_tokenizer_kind(std::string_view name) {
  if (name.empty()) return PreTokenizerKind::kGpt2;
  for (const NamedKind& entry : kNames) {
    if (entry.name == name) return entry.kind;
  }
  std::string known;
  for (const std::string& n : known_pre_tokenizer_names()) known += (known.empty() ? "" : ", ") + n;
  return unsupported("pre-tokenizer '" + std::string(name) + "' is not supported (known: " + known + ")");
}

std::vector<std::string> known_pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const NamedKind& entry : kNames) names.emplace_back(entry.name);
  return names;
}

void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>* pieces) {
  if (kind == PreTokenizerKind::kGemma4) {  // "[^\n]+|[\n]+": bytes suffice
    std::size_t i = 0;
    while (i < text.size()) {
      const bool newline = text[i] == '\n';
      std::size_t j = i + 1;
      while (j < text.size() && (text[j] == '\n') == newline) ++j;
      pieces->push_back(text.substr(i, j - i));
      i = j;
    }
    return;
  }
  const std::vector<CodePoint> cps = decode_utf8(text);
  const auto byte_at = [&](std::size_t cp) { return cp < cps.size() ? cps[cp].offset : text.size(); };
  const auto emit = [&](std::size_t begin, std::size_t end) {
    pieces->push_back(text.substr(byte_at(begin), byte_at(end) - byte_at(begin)));
  };
  const std::vector<Stage> stages = stages_of(kind);
  if (stages.empty()) {  // one regex that matches everywhere: no gaps, no intermediate lists
    const Cursor cursor(cps, cps.size());
    std::size_t i = 0;
    while (i < cps.size()) {
      std::size_t n = 0;
      switch (kind) {
        case PreTokenizerKind::kLlama3: n = match_llama3(cursor, i, 3, false); break;
        case PreTokenizerKind::kQwen2: n = match_llama3(cursor, i, 1, false); break;
        case PreTokenizerKind::kQwen35: n = match_llama3(cursor, i, 1, true); break;
        default: n = match_gpt2(cursor, i); break;
      }
      emit(i, i + n);
      i += n;
    }
    return;
  }
  std::vector<std::pair<std::size_t, std::size_t>> current = {{0, cps.size()}};
  std::vector<std::pair<std::size_t, std::size_t>> next;
  for (Stage stage : stages) {
    next.clear();
    for (const auto& [begin, end] : current) split_stage(stage, cps, begin, end, &next);
    current.swap(next);
  }
  for (const auto& [begin, end] : current) emit(begin, end);
}

}  // namespace kvstash::tokenizer
