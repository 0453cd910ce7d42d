// A context-free grammar over bytes, the form every constraint compiles to (JSON Schema,
// json_object, a pattern): rules of alternatives, each a sequence of byte classes (a set of
// bytes, one byte of input) and references to rules. Repetition is written as right recursion
// (GrammarBuilder::repeat), so a sentence is matched by a pushdown automaton whose stack holds
// positions in rules (token_matcher.h).
//
// The root is rule 0. check() refuses what the matcher cannot run: a reference to a missing
// rule, a rule without alternatives, and left recursion (a rule that can reach itself without
// consuming a byte would expand forever).
//
// Thread safety: a Grammar is a plain value; const methods are safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::grammar {

// A set of bytes: bit b of words[b / 64].
struct ByteClass {
  std::array<std::uint64_t, 4> words{};
  bool has(std::uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1u; }
  void add(std::uint8_t b) { words[b >> 6] |= std::uint64_t{1} << (b & 63); }
  void add_range(std::uint8_t lo, std::uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<std::uint8_t>(b));
  }
  bool operator==(const ByteClass&) const = default;
};

struct Element {
  enum class Kind : std::uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  std::uint32_t index = 0;  // into Grammar::classes (kBytes) or Grammar::rules (kRule)
  bool operator==(const Element&) const = default;
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;                    // for error messages and dumps
  std::vector<Sequence> alternatives;  // an empty sequence matches the empty string
};

struct Grammar {
  std::vector<ByteClass> classes;
  std::vector<Rule> rules;  // rules[0] is the root

  // ok, or kInvalidArgument naming the rule that is missing, empty or left-recursive.
  Status check() const;
  // A readable GBNF-like listing, for tests and debugging.
  std::string to_string() const;
};

// Builds a Grammar: interns byte classes, hands out rule ids before their bodies are known (so
// rules can refer to each other and to themselves), and writes the common shapes.
class GrammarBuilder {
 public:
  GrammarBuilder();  // reserves rule 0, the root; set_root() gives it its body
  std::uint32_t new_rule(std::string name);  // a rule with no alternatives yet
  void add_alternative(std::uint32_t rule, Sequence seq);
  void set_root(std::vector<Sequence> alternatives);
  // A rule with the given alternatives; returns its id.
  std::uint32_t rule(std::string name, std::vector<Sequence> alternatives);

  Element bytes(const ByteClass& c);
  Element byte(std::uint8_t b);
  static Element ref(std::uint32_t rule) { return {Element::Kind::kRule, rule}; }
  Sequence literal(std::string_view text);  // one element per byte
  // `item` between min and max times (max < 0: no upper bound), as a rule.
  std::uint32_t repeat(std::string name, const Sequence& item, int min, int max);

  Grammar finish() &&;

 private:
  Grammar g_;
};

// Appends b to a, in place; returns a.
Sequence& append(Sequence& a, const Sequence& b);

// `inner`'s language framed by literal text: prefix INNER suffix; with `many`, one or more such
// blocks joined by `separator`. What a tool call in a model's syntax is: `<tool_call>\n` + the
// call's JSON + `\n</tool_call>`. References to inner's root keep meaning inner's root.
Grammar framed(Grammar inner, std::string_view prefix, std::string_view suffix, std::string_view separator, bool many);

}  // namespace kvstash::grammar
