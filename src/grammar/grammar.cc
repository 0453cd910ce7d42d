#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>
#include <functional>

namespace kvstash::grammar {
namespace {

// Rules that match the empty string, by fixpoint.
std::vector<bool> nullable_rules(const Grammar& g) {
  std::vector<bool> nullable(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < g.rules.size(); ++r) {
      if (nullable[r]) continue;
      for (const Sequence& alt : g.rules[r].alternatives) {
        bool all = true;
        for (const Element& e : alt) all = all && e.kind == Element::Kind::kRule && nullable[e.index];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

std::string class_to_string(const ByteClass& c) {
  std::string out = "[";
  for (unsigned b = 0; b < 256; ++b) {
    if (!c.has(static_cast<std::uint8_t>(b))) continue;
    unsigned e = b;
    while (e + 1 < 256 && c.has(static_cast<std::uint8_t>(e + 1))) ++e;
    auto one = [](unsigned x) {
      char buf[8];
      if (x >= 0x21 && x < 0x7f && x != '\\' && x != ']' && x != '-') return std::string(1, static_cast<char>(x));
      std::snprintf(buf, sizeof buf, "\\x%02X", x);
      return std::string(buf);
    };
    out += one(b);
    if (e > b) out += "-" + one(e);
    b = e;
  }
  return out + "]";
}

}  // namespace

Status Grammar::check() const {
  if (rules.empty()) return invalid_argument("the grammar has no rules");
  for (std::size_t r = 0; r < rules.size(); ++r) {
    if (rules[r].alternatives.empty()) return invalid_argument("rule '" + rules[r].name + "' has no alternatives");
    for (const Sequence& alt : rules[r].alternatives) {
      for (const Element& e : alt) {
        if ((e.kind == Element::Kind::kRule && e.index >= rules.size()) ||
            (e.kind == Element::Kind::kBytes && e.index >= classes.size())) {
          return invalid_argument("rule '" + rules[r].name + "' refers to a missing rule or byte class");
        }
      }
    }
  }
  // Left recursion: an edge r -> s where s can be the first thing r expands to.
  const std::vector<bool> nullable = nullable_rules(*this);
  std::vector<std::vector<std::uint32_t>> first(rules.size());
  for (std::size_t r = 0; r < rules.size(); ++r) {
    for (const Sequence& alt : rules[r].alternatives) {
      for (const Element& e : alt) {
        if (e.kind == Element::Kind::kBytes) break;
        first[r].push_back(e.index);
        if (!nullable[e.index]) break;
      }
    }
  }
  std::vector<int> mark(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  std::string cycle;
  std::function<bool(std::uint32_t)> visit = [&](std::uint32_t r) {
    mark[r] = 1;
    for (std::uint32_t s : first[r]) {
      if (mark[s] == 1 || (mark[s] == 0 && visit(s))) {
        if (cycle.empty()) cycle = rules[s].name;
        return true;
      }
    }
    mark[r] = 2;
    return false;
  };
  for (std::uint32_t r = 0; r < rules.size(); ++r) {
    if (mark[r] == 0 && visit(r)) return invalid_argument("rule '" + cycle + "' is left-recursive");
  }
  return {};
}

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& r : rules) {
    out += r.name + " ::=";
    for (std::size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a > 0) out += " |";
      if (r.alternatives[a].empty()) out += " \"\"";
      for (const Element& e : r.alternatives[a]) {
        out += " " + (e.kind == Element::Kind::kRule ? rules[e.index].name : class_to_string(classes[e.index]));
      }
    }
    out += "\n";
  }
  return out;
}

GrammarBuilder::GrammarBuilder() { g_.rules.push_back(Rule{"root", {}}); }

std::uint32_t GrammarBuilder::new_rule(std::string name) {
  g_.rules.push_back(Rule{std::move(name) + "-" + std::to_string(g_.rules.size()), {}});
  return static_cast<std::uint32_t>(g_.rules.size() - 1);
}

void GrammarBuilder::add_alternative(std::uint32_t rule, Sequence seq) { g_.rules[rule].alternatives.push_back(std::move(seq)); }

void GrammarBuilder::set_root(std::vector<Sequence> alternatives) { g_.rules[0].alternatives = std::move(alternatives); }

std::uint32_t GrammarBuilder::rule(std::string name, std::vector<Sequence> alternatives) {
  const std::uint32_t r = new_rule(std::move(name));
  g_.rules[r].alternatives = std::move(alternatives);
  return r;
}

Element GrammarBuilder::bytes(const ByteClass& c) {
  for (std::size_t i = 0; i < g_.classes.size(); ++i) {
    if (g_.classes[i] == c) return {Element::Kind::kBytes, static_cast<std::uint32_t>(i)};
  }
  g_.classes.push_back(c);
  return {Element::Kind::kBytes, static_cast<std::uint32_t>(g_.classes.size() - 1)};
}

Element GrammarBuilder::byte(std::uint8_t b) {
  ByteClass c;
  c.add(b);
  return bytes(c);
}

Sequence GrammarBuilder::literal(std::string_view text) {
  Sequence out;
  for (char ch : text) out.push_back(byte(static_cast<std::uint8_t>(ch)));
  return out;
}

std::uint32_t GrammarBuilder::repeat(std::string name, const Sequence& item, int min, int max) {
  Sequence seq;
  for (int i = 0; i < min; ++i) append(seq, item);
  if (max < 0) {
    // star ::= item star | ""  (right recursion: the matcher never expands it without a byte)
    const std::uint32_t star = new_rule(name + "-star");
    Sequence more = item;
    more.push_back(ref(star));
    add_alternative(star, std::move(more));
    add_alternative(star, {});
    seq.push_back(ref(star));
  } else if (max > min) {
    // opt_k ::= item opt_{k-1} | "": at most k more items.
    std::uint32_t opt = rule(name + "-opt", {item, {}});
    for (int k = 2; k <= max - min; ++k) {
      Sequence more = item;
      more.push_back(ref(opt));
      opt = rule(name + "-opt", {std::move(more), {}});
    }
    seq.push_back(ref(opt));
  }
  return rule(std::move(name), {std::move(seq)});
}

Grammar GrammarBuilder::finish() && { return std::move(g_); }

Sequence& append(Sequence& a, const Sequence& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Grammar framed(Grammar inner, std::string_view prefix, std::string_view suffix, std::string_view separator, bool many) {
  Grammar g = std::move(inner);
  // Inner's root moves to a rule of its own; every reference to it follows.
  const auto inner_root = static_cast<std::uint32_t>(g.rules.size());
  g.rules.push_back(g.rules[0]);
  g.rules.back().name = "framed-inner";
  for (Rule& rule : g.rules) {
    for (Sequence& seq : rule.alternatives) {
      for (Element& e : seq) {
        if (e.kind == Element::Kind::kRule && e.index == 0) e.index = inner_root;
      }
    }
  }
  auto literal = [&g](std::string_view text) {
    Sequence seq;
    for (unsigned char c : text) {
      ByteClass one;
      one.add(c);
      auto at = std::find(g.classes.begin(), g.classes.end(), one);
      if (at == g.classes.end()) at = g.classes.insert(g.classes.end(), one);
      seq.push_back({Element::Kind::kBytes, static_cast<std::uint32_t>(at - g.classes.begin())});
    }
    return seq;
  };
  Sequence block = literal(prefix);
  block.push_back({Element::Kind::kRule, inner_root});
  append(block, literal(suffix));
  if (!many) {
    g.rules[0] = Rule{"framed", {block}};
    return g;
  }
  // root := block more;  more := separator block more | (empty): right recursion, as repeat() writes.
  const auto more = static_cast<std::uint32_t>(g.rules.size());
  Sequence again = literal(separator);
  append(again, block);
  again.push_back({Element::Kind::kRule, more});
  g.rules.push_back(Rule{"framed-more", {again, Sequence{}}});
  Sequence root = block;
  root.push_back({Element::Kind::kRule, more});
  g.rules[0] = Rule{"framed", {root}};
  return g;
}

}  // namespace kvstash::grammar
