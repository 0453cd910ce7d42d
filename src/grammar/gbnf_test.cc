// GBNF grammars: a JSON grammar written in GBNF generates JSON under random choices; literals,
// Unicode classes, negation, repetition counts and comments match what they say; malformed
// grammars are refused naming the line and the problem.
#include "grammar/gbnf.h"

#include <gtest/gtest.h>

#include "grammar/test_support.h"

namespace kvstash::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> compile(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g) << g.status().to_string();
  if (!g) return nullptr;
  auto c = CompiledGrammar::create(std::move(*g), test::test_vocabulary(), text);
  EXPECT_TRUE(c) << c.status().to_string();
  return c ? *c : nullptr;
}

bool accepts(const CompiledGrammar& g, const std::string& text) {
  auto s = g.advance_bytes(g.initial_state(), text);
  return s && g.accepts(*s);
}

const char* kJson = R"(
# JSON (escapes \u0000-\uCFFF only: a lone surrogate escape is not JSON that parsers accept)
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-cA-C] [0-9a-fA-F]{3}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]{1,10})? ([eE] [-+]? [0-9]{1,2})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

TEST(Gbnf, AJsonGrammarGeneratesJson) {
  auto g = compile(kJson);
  ASSERT_TRUE(g);
  int ended = 0;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    test::Generated out = test::generate(*g, seed, 3000);
    ASSERT_TRUE(out.error.empty()) << out.error;
    if (!out.ended) continue;
    ++ended;
    EXPECT_TRUE(nlohmann::json::parse(out.text, nullptr, false).is_object()) << out.text;
  }
  EXPECT_GE(ended, 10);
  EXPECT_TRUE(accepts(*g, "{\"a\": [1, -2.5e3, \"x\\u00e9\", true, {}], \"\xC3\xA9\": null}"));
  EXPECT_FALSE(accepts(*g, "{\"a\": 01}"));
  EXPECT_FALSE(accepts(*g, "{\"a\x01\": 1}"));
}

TEST(Gbnf, ClassesLiteralsAndRepetition) {
  auto g = compile(R"(root ::= greeting " " [a-zA-Z\u00e0-\u00ff]{2,4} "!"?  # trailing comment
greeting ::= "hi" | "h\u00e9llo" | [\U0001F600-\U0001F64F])");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(*g, "hi ab"));
  EXPECT_TRUE(accepts(*g, "h\xC3\xA9llo \xC3\xA0\xC3\xBFzz!"));
  EXPECT_TRUE(accepts(*g, "\xF0\x9F\x98\x80 abc"));
  EXPECT_FALSE(accepts(*g, "hi a"));
  EXPECT_FALSE(accepts(*g, "hi abcde"));
  EXPECT_FALSE(accepts(*g, "\xF0\x9F\x99\x90 ab"));  // U+1F650, past the range
  auto any_but = compile(R"(root ::= [^a-c\u4e2d]+)");
  ASSERT_TRUE(any_but);
  EXPECT_TRUE(accepts(*any_but, "xyz\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(*any_but, "xbz"));
  EXPECT_FALSE(accepts(*any_but, "\xE4\xB8\xAD"));       // U+4E2D excluded
  EXPECT_FALSE(accepts(*any_but, "\xED\xA0\x80"));       // a surrogate is never a character
  EXPECT_FALSE(accepts(*any_but, "\xC0\xAF"));           // nor an overlong encoding
  auto dot = compile(R"(root ::= "<" . ">")");
  EXPECT_TRUE(accepts(*dot, "<\xE4\xB8\xAD>"));
  EXPECT_FALSE(accepts(*dot, "<ab>"));
}

TEST(Gbnf, MalformedGrammarsAreRefusedNamingTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"root ::= item", "'item' is used but never defined"},
      {"start ::= \"a\"", "no 'root' rule"},
      {"root ::= list\nlist ::= list \"x\" | \"x\"", "left-recursive"},
      {"root ::= \"a\"\n\nroot ::= \"b\"", "defined twice"},
      {"root ::= \"abc", "unclosed string"},
      {"root ::= [a-", "line 1"},
      {"root ::= (\"a\"", "unclosed '('"},
      {"root ::= \"a\"\nx ::= \"\\q\"", "line 2: an unknown escape"},
      {"root ::= \"a\"{3,1}", "bad repetition"},
      {"root = \"a\"", "expected '::='"},
  };
  for (const auto& [text, mention] : cases) {
    auto g = parse_gbnf(text);
    ASSERT_FALSE(g) << text;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(mention), std::string::npos) << text << " -> " << g.status().message();
  }
}

}  // namespace
}  // namespace kvstash::grammar
