// The JSON pieces schema grammars are made of, written once per grammar (JsonRules caches each
// rule it writes): whitespace, string characters, numbers, integer ranges, any JSON value, and
// patterns (a small regex subset, regex.cc). Internal to the grammar module.
//
// Every piece generates a subset of what its JSON type allows, chosen so that output always ends:
//   - whitespace: nothing, one space, or a newline and up to 32 spaces;
//   - a free string's characters: printable ASCII, JSON escapes (\uXXXX without surrogates) and
//     well-formed UTF-8 sequences; no raw control characters (JSON forbids them);
//   - numbers: at most 16 integer digits, 16 fraction digits and 2 exponent digits;
//   - integers: at most 16 digits, no leading zeros, no "-0"; bounds as exact digit ranges;
//   - any value (json_object, or a schema without a type): nested at most kMaxAnyDepth deep.
//
// Thread safety: used by one compilation at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "kvstash/status.h"

namespace kvstash::grammar {

inline constexpr int kMaxIntegerDigits = 16;  // 10^16 - 1 fits an int64 and a double exactly
inline constexpr int kMaxFractionDigits = 16;
inline constexpr int kMaxExponentDigits = 2;  // with 16 digits, below 1e116: no overflow of a double
inline constexpr int kMaxWhitespace = 32;      // spaces after a newline, at most
inline constexpr int kMaxAnyDepth = 8;         // nesting of an unconstrained value

class JsonRules {
 public:
  explicit JsonRules(GrammarBuilder& b) : b_(b) {}
  Element ws();
  Element string_char();              // one JSON string character (escapes included)
  Element string(int min_length, int max_length);  // max < 0: no bound
  Element number();
  Element boolean();
  Element null();
  // Integers in [lo, hi] (the caller clamps to kMaxIntegerDigits digits).
  Element integer(std::int64_t lo, std::int64_t hi);
  Element any_value(int depth = kMaxAnyDepth);
  Element any_object(int depth = kMaxAnyDepth);
  // A JSON string whose content matches `pattern` (anchored at both ends). Errors: kUnsupported
  // naming the construct this subset does not have.
  Expected<Element> pattern_string(std::string_view pattern);

  GrammarBuilder& builder() { return b_; }

 private:
  Element cached(const std::string& name, std::uint32_t (JsonRules::*make)());
  std::uint32_t make_ws();
  std::uint32_t make_string_char();
  std::uint32_t make_number();
  void same_length_ranges(const std::string& lo, const std::string& hi, Sequence prefix, std::vector<Sequence>& out);
  void non_negative_ranges(std::int64_t lo, std::int64_t hi, std::vector<Sequence>& out);

  GrammarBuilder& b_;
  std::map<std::string, Element> rules_;
};

}  // namespace kvstash::grammar
