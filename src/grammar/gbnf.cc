#include "grammar/gbnf.h"

#include <algorithm>
#include <map>
#include <utility>

namespace kvstash::grammar {
namespace {

constexpr std::uint32_t kMaxCodePoint = 0x10FFFF;

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : t_(text) {}

  Expected<Grammar> parse() {
    skip_space();
    while (i_ < t_.size()) {
      const std::size_t at = i_;
      std::string name = identifier();
      if (name.empty()) return error("expected a rule name");
      skip_space();
      if (t_.substr(i_, 3) != "::=") return error("expected '::=' after '" + name + "'");
      i_ += 3;
      const std::uint32_t id = rule_id(name);
      if (defined_.count(name)) {
        i_ = at;
        return error("rule '" + name + "' is defined twice");
      }
      defined_[name] = line();
      auto alts = alternatives(/*nested=*/false);
      if (!alts) return alts.status();
      for (Sequence& s : *alts) b_.add_alternative(id, std::move(s));
      skip_space();
    }
    if (!defined_.count("root")) return invalid_argument("GBNF: the grammar has no 'root' rule");
    for (const auto& [name, id] : ids_) {
      if (!defined_.count(name)) return invalid_argument("GBNF: rule '" + name + "' is used but never defined");
    }
    Grammar g = std::move(b_).finish();
    if (Status st = g.check(); !st) return invalid_argument("GBNF: " + st.message());
    return g;
  }

 private:
  int line() const { return 1 + static_cast<int>(std::count(t_.begin(), t_.begin() + static_cast<long>(i_), '\n')); }
  Status error(const std::string& what) const { return invalid_argument("GBNF line " + std::to_string(line()) + ": " + what); }

  void skip_space() {
    while (i_ < t_.size()) {
      if (t_[i_] == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r') {
        ++i_;
      } else {
        return;
      }
    }
  }
  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }
  std::string identifier() {
    const std::size_t start = i_;
    while (i_ < t_.size() && name_char(t_[i_])) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }
  // The next thing is "name ::=": the current rule ends here.
  bool at_definition() const {
    std::size_t j = i_;
    while (j < t_.size() && name_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t')) ++j;
    return t_.substr(j, 3) == "::=";
  }
  std::uint32_t rule_id(const std::string& name) {
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    const std::uint32_t id = name == "root" ? 0 : b_.new_rule(name);
    ids_[name] = id;
    return id;
  }

  Expected<std::vector<Sequence>> alternatives(bool nested) {
    std::vector<Sequence> alts(1);
    for (;;) {
      skip_space();
      if (i_ >= t_.size() || (!nested && at_definition())) return alts;
      const char c = t_[i_];
      if (c == ')') {
        if (!nested) return error("an unmatched ')'");
        return alts;
      }
      if (c == '|') {
        ++i_;
        alts.emplace_back();
        continue;
      }
      auto item = atom();
      if (!item) return item.status();
      auto quantified = quantifier(std::move(*item));
      if (!quantified) return quantified.status();
      append(alts.back(), *quantified);
    }
  }

  Expected<Sequence> quantifier(Sequence item) {
    if (i_ >= t_.size()) return item;
    int min = 1, max = 1;
    const char c = t_[i_];
    if (c == '*' || c == '+' || c == '?') {
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
      ++i_;
    } else if (c == '{') {
      const std::size_t close = t_.find('}', i_);
      if (close == std::string_view::npos) return error("an unclosed '{'");
      const std::string body(t_.substr(i_ + 1, close - i_ - 1));
      const std::size_t comma = body.find(',');
      try {
        min = std::stoi(body.substr(0, comma));
        max = comma == std::string::npos ? min : body.find_first_not_of(' ', comma + 1) == std::string::npos ? -1 : std::stoi(body.substr(comma + 1));
      } catch (const std::exception&) {
        return error("a bad repetition {" + body + "}");
      }
      if (min < 0 || (max >= 0 && max < min) || min > 4096 || max > 4096) return error("a bad repetition {" + body + "}");
      i_ = close + 1;
    } else {
      return item;
    }
    return Sequence{GrammarBuilder::ref(b_.repeat("repeat", item, min, max))};
  }

  // One character of a literal or class (escapes decoded) as a code point.
  Expected<std::uint32_t> character() {
    if (i_ >= t_.size()) return error("unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(t_[i_]);
    if (c == '\\') {
      if (i_ + 1 >= t_.size()) return error("a trailing '\\'");
      const char e = t_[i_ + 1];
      i_ += 2;
      int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (hex == 0) {
        switch (e) {
          case 'n': return 0x0A;
          case 'r': return 0x0D;
          case 't': return 0x09;
          case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<std::uint32_t>(e);
          default: return error(std::string("an unknown escape \\") + e);
        }
      }
      if (i_ + static_cast<std::size_t>(hex) > t_.size()) return error("a truncated escape");
      std::uint32_t v = 0;
      for (int k = 0; k < hex; ++k) {
        const char h = t_[i_++];
        const int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10 : -1;
        if (d < 0) return error("a bad hex escape");
        v = v * 16 + static_cast<std::uint32_t>(d);
      }
      if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return error("an escape that is not a character");
      return v;
    }
    // A UTF-8 sequence of the grammar's own text.
    const std::size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i_ + len > t_.size()) return error("a truncated UTF-8 sequence");
    std::uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < len; ++k) v = (v << 6) | (static_cast<unsigned char>(t_[i_ + k]) & 0x3F);
    i_ += len;
    return v;
  }

  // UTF-8 encodings of the code points [lo, hi] (no surrogates) as sequences of byte classes.
  void code_point_ranges(std::uint32_t lo, std::uint32_t hi, std::vector<Sequence>& out) {
    if (lo <= 0xDFFF && hi >= 0xD800) {
      if (lo < 0xD800) code_point_ranges(lo, 0xD7FF, out);
      if (hi > 0xDFFF) code_point_ranges(0xE000, hi, out);
      return;
    }
    for (std::uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (lo <= edge && hi > edge) {
        code_point_ranges(lo, edge, out);
        code_point_ranges(edge + 1, hi, out);
        return;
      }
    }
    same_length(utf8(lo), utf8(hi), {}, out);
  }
  void same_length(const std::string& lo, const std::string& hi, Sequence prefix, std::vector<Sequence>& out) {
    if (lo.empty()) {
      out.push_back(std::move(prefix));
      return;
    }
    auto byte_range = [this](unsigned a, unsigned z) {
      ByteClass c;
      c.add_range(static_cast<std::uint8_t>(a), static_cast<std::uint8_t>(z));
      return b_.bytes(c);
    };
    const auto l0 = static_cast<unsigned char>(lo[0]), h0 = static_cast<unsigned char>(hi[0]);
    const bool lo_rest_min = lo.find_first_not_of('\x80', 1) == std::string::npos;
    const bool hi_rest_max = hi.find_first_not_of('\xBF', 1) == std::string::npos;
    if (l0 == h0) {
      prefix.push_back(byte_range(l0, l0));
      same_length(lo.substr(1), hi.substr(1), std::move(prefix), out);
    } else if (lo_rest_min && hi_rest_max) {
      prefix.push_back(byte_range(l0, h0));
      for (std::size_t k = 1; k < lo.size(); ++k) prefix.push_back(byte_range(0x80, 0xBF));
      out.push_back(std::move(prefix));
    } else {
      Sequence low = prefix;
      low.push_back(byte_range(l0, l0));
      same_length(lo.substr(1), std::string(lo.size() - 1, '\xBF'), std::move(low), out);
      if (l0 + 1 <= h0 - 1u) {
        Sequence mid = prefix;
        mid.push_back(byte_range(l0 + 1, h0 - 1));
        for (std::size_t k = 1; k < lo.size(); ++k) mid.push_back(byte_range(0x80, 0xBF));
        out.push_back(std::move(mid));
      }
      Sequence high = std::move(prefix);
      high.push_back(byte_range(h0, h0));
      same_length(std::string(hi.size() - 1, '\x80'), hi.substr(1), std::move(high), out);
    }
  }

  Expected<Sequence> char_class() {
    ++i_;  // '['
    bool negate = false;
    if (i_ < t_.size() && t_[i_] == '^') {
      negate = true;
      ++i_;
    }
    std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
    while (i_ < t_.size() && t_[i_] != ']') {
      auto lo = character();
      if (!lo) return lo.status();
      std::uint32_t hi = *lo;
      if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
        ++i_;
        auto h = character();
        if (!h) return h.status();
        hi = *h;
        if (hi < *lo) return error("a class range that runs backwards");
      }
      ranges.emplace_back(*lo, hi);
    }
    if (i_ >= t_.size()) return error("an unclosed '['");
    ++i_;  // ']'
    std::sort(ranges.begin(), ranges.end());
    if (negate) {
      std::vector<std::pair<std::uint32_t, std::uint32_t>> complement;
      std::uint32_t next = 0;
      for (const auto& [a, z] : ranges) {
        if (a > next) complement.emplace_back(next, a - 1);
        next = std::max(next, z + 1);
      }
      if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
      ranges = std::move(complement);
    }
    std::vector<Sequence> alts;
    for (const auto& [a, z] : ranges) code_point_ranges(a, z, alts);
    if (alts.empty()) return error("a class that matches nothing");
    return Sequence{GrammarBuilder::ref(b_.rule("class", std::move(alts)))};
  }

  Expected<Sequence> atom() {
    const char c = t_[i_];
    if (c == '"') {
      ++i_;
      Sequence s;
      while (i_ < t_.size() && t_[i_] != '"') {
        auto cp = character();
        if (!cp) return cp.status();
        append(s, b_.literal(utf8(*cp)));
      }
      if (i_ >= t_.size()) return error("an unclosed string literal");
      ++i_;
      return s;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      std::vector<Sequence> alts;
      code_point_ranges(0, kMaxCodePoint, alts);
      return Sequence{GrammarBuilder::ref(b_.rule("any-char", std::move(alts)))};
    }
    if (c == '(') {
      ++i_;
      auto alts = alternatives(/*nested=*/true);
      if (!alts) return alts.status();
      if (i_ >= t_.size() || t_[i_] != ')') return error("an unclosed '('");
      ++i_;
      return Sequence{GrammarBuilder::ref(b_.rule("group", std::move(*alts)))};
    }
    if (name_char(c)) return Sequence{GrammarBuilder::ref(rule_id(identifier()))};
    return error(std::string("unexpected '") + c + "'");
  }

  std::string_view t_;
  std::size_t i_ = 0;
  GrammarBuilder b_;
  std::map<std::string, std::uint32_t> ids_;
  std::map<std::string, int> defined_;
};

}  // namespace

Expected<Grammar> parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace kvstash::grammar
