// JSON Schema's `pattern` as a grammar: a small regex subset, matched anchored at both ends (a
// string that matches whole also matches the unanchored pattern JSON Schema means, so output
// stays valid). Supported: literals, escaped punctuation, \d \w \s and their negations, . and
// bracket classes over ASCII (negations taken within printable ASCII), groups (...) and (?:...),
// alternation, and the quantifiers * + ? {n} {n,} {n,m} (lazy and possessive forms match the
// same strings). Generated characters are a subset of what each construct allows: printable
// ASCII (with " and \ escaped as JSON needs), \s as a space. Anything else (backreferences,
// lookaround, \b, \p{..}, anchors inside, non-ASCII in a class) is refused by name.
#include <string>

#include "grammar/json_rules.h"

namespace kvstash::grammar {
namespace {

// Bits 0..127: the ASCII characters a construct matches.
struct AsciiSet {
  std::uint64_t lo = 0, hi = 0;
  void add(unsigned c) { (c < 64 ? lo : hi) |= std::uint64_t{1} << (c & 63); }
  bool has(unsigned c) const { return ((c < 64 ? lo : hi) >> (c & 63)) & 1u; }
  void add_range(unsigned a, unsigned z) {
    for (unsigned c = a; c <= z; ++c) add(c);
  }
  AsciiSet printable_complement() const {
    AsciiSet out;
    for (unsigned c = 0x20; c <= 0x7E; ++c) {
      if (!has(c)) out.add(c);
    }
    return out;
  }
};

class RegexCompiler {
 public:
  RegexCompiler(GrammarBuilder& b, std::string_view p) : b_(b), p_(p) {}

  Expected<Sequence> compile() {
    if (!p_.empty() && p_.front() == '^') ++i_;
    std::size_t end = p_.size();
    if (end > i_ && p_[end - 1] == '$' && (end < 2 || p_[end - 2] != '\\')) --end;
    p_ = p_.substr(0, end);
    auto alts = alternation();
    if (!alts) return alts.status();
    if (i_ < p_.size()) return refuse(std::string("an unmatched '") + p_[i_] + "'");
    return Sequence{GrammarBuilder::ref(b_.rule("pattern", std::move(*alts)))};
  }

 private:
  Status refuse(const std::string& what) const {
    return unsupported("'pattern' uses " + what + " (at offset " + std::to_string(i_) +
                       "), which this server's regex subset does not support");
  }

  Expected<std::vector<Sequence>> alternation() {
    std::vector<Sequence> alts;
    for (;;) {
      auto seq = concatenation();
      if (!seq) return seq.status();
      alts.push_back(std::move(*seq));
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return alts;
    }
  }

  Expected<Sequence> concatenation() {
    Sequence seq;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      auto atom_seq = atom();
      if (!atom_seq) return atom_seq.status();
      auto quantified = quantifier(std::move(*atom_seq));
      if (!quantified) return quantified.status();
      append(seq, *quantified);
    }
    return seq;
  }

  Expected<Sequence> quantifier(Sequence item) {
    if (i_ >= p_.size()) return item;
    int min = 1, max = 1;
    const char c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
      ++i_;
    } else if (c == '{') {
      const std::size_t close = p_.find('}', i_);
      if (close == std::string_view::npos) return refuse("an unclosed '{'");
      const std::string body(p_.substr(i_ + 1, close - i_ - 1));
      const std::size_t comma = body.find(',');
      try {
        min = std::stoi(body.substr(0, comma));
        max = comma == std::string::npos ? min : comma + 1 == body.size() ? -1 : std::stoi(body.substr(comma + 1));
      } catch (const std::exception&) {
        return refuse("the quantifier {" + body + "}");
      }
      if (min < 0 || (max >= 0 && max < min) || min > 1000 || max > 1000) return refuse("the quantifier {" + body + "}");
      i_ = close + 1;
    } else {
      return item;
    }
    if (i_ < p_.size() && (p_[i_] == '?' || p_[i_] == '+')) ++i_;  // lazy / possessive: same strings
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) return refuse("a nested quantifier");
    return Sequence{GrammarBuilder::ref(b_.repeat("pattern-repeat", item, min, max))};
  }

  // The JSON-string bytes of a set of ASCII characters: one byte class, plus \" and \\.
  Sequence ascii(const AsciiSet& set) {
    ByteClass plain;
    std::vector<Sequence> alts;
    for (unsigned c = 0x20; c <= 0x7E; ++c) {
      if (!set.has(c)) continue;
      if (c == '"' || c == '\\') {
        alts.push_back(b_.literal(c == '"' ? "\\\"" : "\\\\"));
      } else {
        plain.add(static_cast<std::uint8_t>(c));
      }
    }
    if (plain != ByteClass{}) alts.push_back({b_.bytes(plain)});
    if (alts.size() == 1) return alts[0];
    return {GrammarBuilder::ref(b_.rule("pattern-class", std::move(alts)))};
  }

  // \d \w \s and their capitals; nullopt for other letters.
  static std::optional<AsciiSet> class_escape(char e) {
    AsciiSet s;
    switch (e | 0x20) {
      case 'd': s.add_range('0', '9'); break;
      case 'w': s.add_range('0', '9'); s.add_range('a', 'z'); s.add_range('A', 'Z'); s.add('_'); break;
      case 's': s.add(' '); break;  // a space: the one whitespace that needs no JSON escape
      default: return std::nullopt;
    }
    if (e >= 'A' && e <= 'Z') {
      if ((e | 0x20) == 's') s.add_range('\t', '\r');  // complement of all whitespace, not only ' '
      s = s.printable_complement();
    }
    return s;
  }

  Expected<AsciiSet> escape_in_class(char e) {
    if (auto s = class_escape(e)) return *s;
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) return refuse(std::string("the escape \\") + e);
    AsciiSet s;
    s.add(static_cast<unsigned char>(e));
    return s;
  }

  Expected<Sequence> bracket() {
    ++i_;  // '['
    bool negate = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    AsciiSet set;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      auto single = [&]() -> Expected<AsciiSet> {
        const unsigned char c = static_cast<unsigned char>(p_[i_]);
        if (c >= 0x80) return refuse("a non-ASCII character in a class");
        ++i_;
        if (c == '\\') {
          if (i_ >= p_.size()) return refuse("a trailing '\\'");
          return escape_in_class(p_[i_++]);
        }
        AsciiSet s;
        s.add(c);
        return s;
      };
      const std::size_t start = i_;
      auto lo = single();
      if (!lo) return lo.status();
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        const unsigned a = static_cast<unsigned char>(p_[start]);
        ++i_;
        const std::size_t hi_at = i_;
        auto hi = single();
        if (!hi) return hi.status();
        const unsigned z = static_cast<unsigned char>(p_[hi_at]);
        if (p_[start] == '\\' || p_[hi_at] == '\\' || z < a) return refuse("a class range that is not two plain characters");
        set.add_range(a, z);
      } else {
        set.lo |= lo->lo;
        set.hi |= lo->hi;
      }
    }
    if (i_ >= p_.size()) return refuse("an unclosed '['");
    ++i_;  // ']'
    if (negate) set = set.printable_complement();
    AsciiSet printable;
    printable.add_range(0x20, 0x7E);
    set.lo &= printable.lo;
    set.hi &= printable.hi;
    if (set.lo == 0 && set.hi == 0) return refuse("a class with no printable ASCII character");
    return ascii(set);
  }

  Expected<Sequence> atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return refuse("a lookaround or named group '(?'");
        }
      }
      auto alts = alternation();
      if (!alts) return alts.status();
      if (i_ >= p_.size() || p_[i_] != ')') return refuse("an unclosed '('");
      ++i_;
      return Sequence{GrammarBuilder::ref(b_.rule("pattern-group", std::move(*alts)))};
    }
    if (c == '[') return bracket();
    if (c == '.') {
      ++i_;
      AsciiSet all;
      all.add_range(0x20, 0x7E);
      return ascii(all);
    }
    if (c == '\\') {
      if (i_ + 1 >= p_.size()) return refuse("a trailing '\\'");
      const char e = p_[i_ + 1];
      if (auto s = class_escape(e)) {
        i_ += 2;
        return ascii(*s);
      }
      if (e == 'n' || e == 't' || e == 'r') {
        i_ += 2;
        return b_.literal(std::string("\\") + e);  // the character, as JSON writes it
      }
      if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) return refuse(std::string("the escape \\") + e);
      i_ += 2;
      AsciiSet s;
      s.add(static_cast<unsigned char>(e));
      return ascii(s);
    }
    if (c == '^' || c == '$') return refuse(std::string("the anchor '") + c + "' inside the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') return refuse(std::string("a quantifier '") + c + "' with nothing before it");
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20) return refuse("a control character");
    if (u < 0x80) {
      ++i_;
      AsciiSet s;
      s.add(u);
      return ascii(s);
    }
    // A UTF-8 sequence: its bytes as they are (a JSON string holds them unescaped).
    const std::size_t len = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : 2;
    if (i_ + len > p_.size()) return refuse("a truncated UTF-8 sequence");
    Sequence s = b_.literal(p_.substr(i_, len));
    i_ += len;
    return s;
  }

  GrammarBuilder& b_;
  std::string_view p_;
  std::size_t i_ = 0;
};

}  // namespace

Expected<Element> JsonRules::pattern_string(std::string_view pattern) {
  auto body = RegexCompiler(b_, pattern).compile();
  if (!body) return body.status();
  Sequence s{b_.byte('"')};
  append(s, *body);
  s.push_back(b_.byte('"'));
  return GrammarBuilder::ref(b_.rule("pattern-string", {std::move(s)}));
}

}  // namespace kvstash::grammar
