// The token matcher: masks agree with matching each token's bytes on its own, end tokens are
// never in a mask, accepting states are exactly the complete sentences, left recursion is
// refused, and the state table's bound is an error, not a wrong token.
#include "grammar/token_matcher.h"

#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar/test_support.h"

namespace kvstash::grammar {
namespace {

TEST(TokenMatcher, MasksAgreeWithMatchingEachToken) {
  auto vocab = test::test_vocabulary();
  auto g = CompiledGrammar::create(json_object_grammar(), vocab, "json_object");
  ASSERT_TRUE(g);
  // Along a few generations, at every state: the mask is exactly the tokens whose bytes advance.
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    test::Generated out = test::generate(**g, seed, 60);
    MatcherState state = (*g)->initial_state();
    std::vector<std::uint64_t> mask;
    for (std::size_t i = 0; i <= out.text.size(); ++i) {
      ASSERT_TRUE((*g)->allowed_tokens(state, mask));
      for (std::size_t t = 0; t < vocab->size(); ++t) {
        const bool in_mask = (mask[t / 64] >> (t % 64)) & 1u;
        const bool advances = !vocab->bytes(static_cast<TokenIndex>(t)).empty() &&
                              (*g)->advance(state, static_cast<TokenIndex>(t)).has_value();
        ASSERT_EQ(in_mask, advances) << "token " << t << " after \"" << out.text.substr(0, i) << "\"";
      }
      if (i == out.text.size()) break;
      auto next = (*g)->advance_bytes(state, out.text.substr(i, 1));
      ASSERT_TRUE(next);
      state = *next;
    }
  }
  EXPECT_GT((*g)->stats().cached_masks, 0u);
}

TEST(TokenMatcher, AcceptsExactlyCompleteSentences) {
  GrammarBuilder b;
  // root ::= "a" x | "ab";  x ::= "c" x | ""   (right recursion: a*c* style repetition)
  const std::uint32_t x = b.new_rule("x");
  Sequence more = b.literal("c");
  more.push_back(GrammarBuilder::ref(x));
  b.add_alternative(x, more);
  b.add_alternative(x, {});
  Sequence a = b.literal("a");
  a.push_back(GrammarBuilder::ref(x));
  b.set_root({a, b.literal("ab")});
  auto g = CompiledGrammar::create(std::move(b).finish(), TokenVocabulary::create({"a", "b", "c", "cc", "abc", "ab", ""}, {6}), "t");
  ASSERT_TRUE(g);
  const CompiledGrammar& m = **g;
  EXPECT_FALSE(m.accepts(m.initial_state()));
  for (const char* ok : {"a", "ab", "ac", "acccccccccccccccccccccc"}) {
    auto s = m.advance_bytes(m.initial_state(), ok);
    ASSERT_TRUE(s) << ok;
    EXPECT_TRUE(m.accepts(*s)) << ok;
  }
  EXPECT_FALSE(m.advance_bytes(m.initial_state(), "abc"));
  EXPECT_FALSE(m.advance_bytes(m.initial_state(), "b"));
  // A long repetition does not grow the state set: the tail call keeps the stack flat.
  const std::size_t states = m.stats().states;
  ASSERT_TRUE(m.advance_bytes(m.initial_state(), std::string(500, 'c').insert(0, "a")));
  EXPECT_EQ(m.stats().states, states);
  std::vector<std::uint64_t> mask;
  ASSERT_TRUE(m.allowed_tokens(m.initial_state(), mask));
  EXPECT_EQ(mask[0], 0b100001u);  // "a" (0) and "ab" (5); "abc" (4) leaves the grammar after "ab"
}

TEST(TokenMatcher, RefusesLeftRecursion) {
  GrammarBuilder b;
  const std::uint32_t r = b.new_rule("list");
  Sequence left{GrammarBuilder::ref(r)};
  append(left, b.literal("x"));
  b.add_alternative(r, left);
  b.add_alternative(r, b.literal("x"));
  b.set_root({{GrammarBuilder::ref(r)}});
  auto g = CompiledGrammar::create(std::move(b).finish(), test::test_vocabulary(), "t");
  ASSERT_FALSE(g);
  EXPECT_NE(g.status().message().find("left-recursive"), std::string::npos);
}

TEST(TokenMatcher, AFullStateTableIsAnError) {
  CompiledGrammarOptions small;
  small.max_states = 40;
  auto schema = compile_json_schema_text((R"({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                                                          "$ref": "#/$defs/n"})"));
  ASSERT_TRUE(schema) << schema.status().to_string();
  auto g = CompiledGrammar::create(std::move(*schema), test::test_vocabulary(), "nested", small);
  ASSERT_TRUE(g);
  // Each "[" opens one more level: new stacks, new states, until the bound.
  auto s = (*g)->advance_bytes((*g)->initial_state(), std::string(200, '['));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kvstash::grammar
