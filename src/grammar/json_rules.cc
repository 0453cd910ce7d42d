#include "grammar/json_rules.h"

#include <algorithm>

namespace kvstash::grammar {
namespace {

ByteClass range(std::uint8_t lo, std::uint8_t hi) {
  ByteClass c;
  c.add_range(lo, hi);
  return c;
}

ByteClass hex_digits() {
  ByteClass c = range('0', '9');
  c.add_range('a', 'f');
  c.add_range('A', 'F');
  return c;
}

int digit_count(std::int64_t v) { return static_cast<int>(std::to_string(v).size()); }

std::int64_t pow10(int n) {
  std::int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

}  // namespace

Element JsonRules::cached(const std::string& name, std::uint32_t (JsonRules::*make)()) {
  if (auto it = rules_.find(name); it != rules_.end()) return it->second;
  const Element e = GrammarBuilder::ref((this->*make)());
  rules_.emplace(name, e);
  return e;
}

Element JsonRules::ws() { return cached("ws", &JsonRules::make_ws); }
Element JsonRules::string_char() { return cached("char", &JsonRules::make_string_char); }
Element JsonRules::number() { return cached("number", &JsonRules::make_number); }

std::uint32_t JsonRules::make_ws() {
  Sequence newline{b_.byte('\n'), GrammarBuilder::ref(b_.repeat("indent", {b_.byte(' ')}, 0, kMaxWhitespace))};
  return b_.rule("ws", {{}, {b_.byte(' ')}, newline});
}

std::uint32_t JsonRules::make_string_char() {
  ByteClass plain = range(0x20, 0x7E);
  plain.words['"' >> 6] &= ~(std::uint64_t{1} << ('"' & 63));
  plain.words['\\' >> 6] &= ~(std::uint64_t{1} << ('\\' & 63));
  ByteClass escapes;
  for (char c : std::string("\"\\/bfnrt")) escapes.add(static_cast<std::uint8_t>(c));
  const Element hex = b_.bytes(hex_digits());
  ByteClass first_hex = range('0', '9');  // \uXXXX, but never a surrogate (D800-DFFF)
  first_hex.add_range('a', 'c');
  first_hex.add_range('A', 'C');
  ByteClass ef = range('e', 'f');
  ef.add_range('E', 'F');
  ByteClass d;
  d.add('d');
  d.add('D');
  const Element cont = b_.bytes(range(0x80, 0xBF));
  ByteClass three_plain = range(0xE1, 0xEC);
  three_plain.add_range(0xEE, 0xEF);
  std::vector<Sequence> alts = {
      {b_.bytes(plain)},
      {b_.byte('\\'), b_.bytes(escapes)},
      {b_.byte('\\'), b_.byte('u'), b_.bytes(first_hex), hex, hex, hex},
      {b_.byte('\\'), b_.byte('u'), b_.bytes(ef), hex, hex, hex},
      {b_.byte('\\'), b_.byte('u'), b_.bytes(d), b_.bytes(range('0', '7')), hex, hex},
      // Well-formed UTF-8 (RFC 3629): no overlongs, no surrogates, nothing past U+10FFFF.
      {b_.bytes(range(0xC2, 0xDF)), cont},
      {b_.byte(0xE0), b_.bytes(range(0xA0, 0xBF)), cont},
      {b_.bytes(three_plain), cont, cont},
      {b_.byte(0xED), b_.bytes(range(0x80, 0x9F)), cont},
      {b_.byte(0xF0), b_.bytes(range(0x90, 0xBF)), cont, cont},
      {b_.bytes(range(0xF1, 0xF3)), cont, cont, cont},
      {b_.byte(0xF4), b_.bytes(range(0x80, 0x8F)), cont, cont},
  };
  return b_.rule("char", std::move(alts));
}

Element JsonRules::string(int min_length, int max_length) {
  const std::string name = "string-" + std::to_string(min_length) + "-" + std::to_string(max_length);
  if (auto it = rules_.find(name); it != rules_.end()) return it->second;
  const Element chars = GrammarBuilder::ref(b_.repeat("chars", {string_char()}, min_length, max_length));
  const Element e = GrammarBuilder::ref(b_.rule("string", {{b_.byte('"'), chars, b_.byte('"')}}));
  rules_.emplace(name, e);
  return e;
}

std::uint32_t JsonRules::make_number() {
  const Element digit = b_.bytes(range('0', '9'));
  const Element int_part = GrammarBuilder::ref(b_.rule(
      "int", {{b_.byte('0')}, {b_.bytes(range('1', '9')), GrammarBuilder::ref(b_.repeat("digits", {digit}, 0, kMaxIntegerDigits - 1))}}));
  const Element minus = GrammarBuilder::ref(b_.rule("minus", {{}, {b_.byte('-')}}));
  const Element frac = GrammarBuilder::ref(
      b_.rule("frac", {{}, {b_.byte('.'), GrammarBuilder::ref(b_.repeat("frac-digits", {digit}, 1, kMaxFractionDigits))}}));
  ByteClass e;
  e.add('e');
  e.add('E');
  ByteClass sign;
  sign.add('+');
  sign.add('-');
  const Element exp_sign = GrammarBuilder::ref(b_.rule("exp-sign", {{}, {b_.bytes(sign)}}));
  const Element exp = GrammarBuilder::ref(b_.rule(
      "exp", {{}, {b_.bytes(e), exp_sign, GrammarBuilder::ref(b_.repeat("exp-digits", {digit}, 1, kMaxExponentDigits))}}));
  return b_.rule("number", {{minus, int_part, frac, exp}});
}

Element JsonRules::boolean() {
  if (auto it = rules_.find("boolean"); it != rules_.end()) return it->second;
  const Element e = GrammarBuilder::ref(b_.rule("boolean", {b_.literal("true"), b_.literal("false")}));
  rules_.emplace("boolean", e);
  return e;
}

Element JsonRules::null() {
  if (auto it = rules_.find("null"); it != rules_.end()) return it->second;
  const Element e = GrammarBuilder::ref(b_.rule("null", {b_.literal("null")}));
  rules_.emplace("null", e);
  return e;
}

// Numbers with the digits of lo and hi (same length), each alternative a run of digit classes.
void JsonRules::same_length_ranges(const std::string& lo, const std::string& hi, Sequence prefix, std::vector<Sequence>& out) {
  const std::size_t n = lo.size();
  const Element any_digit = b_.bytes(range('0', '9'));
  if (n == 0) {
    out.push_back(std::move(prefix));
    return;
  }
  if (lo == hi) {
    out.push_back(append(prefix, b_.literal(lo)));
    return;
  }
  const bool lo_rest_zero = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_rest_nine = hi.find_first_not_of('9', 1) == std::string::npos;
  if (lo_rest_zero && hi_rest_nine) {
    prefix.push_back(b_.bytes(range(static_cast<std::uint8_t>(lo[0]), static_cast<std::uint8_t>(hi[0]))));
    for (std::size_t i = 1; i < n; ++i) prefix.push_back(any_digit);
    out.push_back(std::move(prefix));
    return;
  }
  if (lo[0] == hi[0]) {
    prefix.push_back(b_.byte(static_cast<std::uint8_t>(lo[0])));
    same_length_ranges(lo.substr(1), hi.substr(1), std::move(prefix), out);
    return;
  }
  Sequence low = prefix;
  low.push_back(b_.byte(static_cast<std::uint8_t>(lo[0])));
  same_length_ranges(lo.substr(1), std::string(n - 1, '9'), std::move(low), out);
  if (lo[0] + 1 <= hi[0] - 1) {
    Sequence mid = prefix;
    mid.push_back(b_.bytes(range(static_cast<std::uint8_t>(lo[0] + 1), static_cast<std::uint8_t>(hi[0] - 1))));
    for (std::size_t i = 1; i < n; ++i) mid.push_back(any_digit);
    out.push_back(std::move(mid));
  }
  Sequence high = std::move(prefix);
  high.push_back(b_.byte(static_cast<std::uint8_t>(hi[0])));
  same_length_ranges(std::string(n - 1, '0'), hi.substr(1), std::move(high), out);
}

void JsonRules::non_negative_ranges(std::int64_t lo, std::int64_t hi, std::vector<Sequence>& out) {
  for (int d = digit_count(lo); d <= digit_count(hi); ++d) {
    const std::int64_t a = std::max(lo, d == 1 ? 0 : pow10(d - 1));
    const std::int64_t z = std::min(hi, pow10(d) - 1);
    if (a <= z) same_length_ranges(std::to_string(a), std::to_string(z), {}, out);
  }
}

Element JsonRules::integer(std::int64_t lo, std::int64_t hi) {
  const std::string name = "integer-" + std::to_string(lo) + "-" + std::to_string(hi);
  if (auto it = rules_.find(name); it != rules_.end()) return it->second;
  std::vector<Sequence> alts;
  if (hi >= 0) non_negative_ranges(std::max<std::int64_t>(lo, 0), hi, alts);
  if (lo < 0) {
    std::vector<Sequence> negative;
    non_negative_ranges(hi < 0 ? -hi : 1, -lo, negative);
    for (Sequence& s : negative) {
      s.insert(s.begin(), b_.byte('-'));
      alts.push_back(std::move(s));
    }
  }
  const Element e = GrammarBuilder::ref(b_.rule("integer", std::move(alts)));
  rules_.emplace(name, e);
  return e;
}

Element JsonRules::any_object(int depth) {
  const std::string name = "any-object-" + std::to_string(depth);
  if (auto it = rules_.find(name); it != rules_.end()) return it->second;
  const Element value = any_value(depth - 1);
  const Sequence kv{string(0, -1), ws(), b_.byte(':'), ws(), value, ws()};
  Sequence more{b_.byte(','), ws()};
  append(more, kv);
  Sequence members = kv;
  members.push_back(GrammarBuilder::ref(b_.repeat("members", more, 0, -1)));
  const Element members_opt = GrammarBuilder::ref(b_.rule("members-opt", {{}, members}));
  const Element e = GrammarBuilder::ref(b_.rule("object", {{b_.byte('{'), ws(), members_opt, b_.byte('}')}}));
  rules_.emplace(name, e);
  return e;
}

Element JsonRules::any_value(int depth) {
  const std::string name = "any-value-" + std::to_string(depth);
  if (auto it = rules_.find(name); it != rules_.end()) return it->second;
  std::vector<Sequence> alts = {{string(0, -1)}, {number()}, {boolean()}, {null()}};
  if (depth > 0) {
    alts.push_back({any_object(depth)});
    const Element item = any_value(depth - 1);
    Sequence more{b_.byte(','), ws(), item, ws()};
    const Element items_opt = GrammarBuilder::ref(
        b_.rule("items-opt", {{}, {item, ws(), GrammarBuilder::ref(b_.repeat("items", more, 0, -1))}}));
    alts.push_back({GrammarBuilder::ref(b_.rule("array", {{b_.byte('['), ws(), items_opt, b_.byte(']')}}))});
  }
  const Element e = GrammarBuilder::ref(b_.rule("value", std::move(alts)));
  rules_.emplace(name, e);
  return e;
}

}  // namespace kvstash::grammar
