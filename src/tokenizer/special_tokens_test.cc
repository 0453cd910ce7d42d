#include "tokenizer/special_tokens.h"

#include <gtest/gtest.h>

namespace kvstash::tokenizer {
namespace {

TEST(SpecialTokenMatcher, LeftmostThenLongest) {
  SpecialTokenMatcher m;
  EXPECT_TRUE(m.empty());
  m.add("<|a|>", 1);
  m.add("<|a|><|b|>", 2);
  m.add("|b", 3);
  m.add("", 4);  // ignored
  EXPECT_FALSE(m.empty());
  auto r = m.find("xx<|a|><|b|>yy", 0);
  EXPECT_EQ(r.offset, 2u);
  EXPECT_EQ(r.length, 10u);
  EXPECT_EQ(r.id, 2);
  r = m.find("x<|a|><|b", 0);
  EXPECT_EQ(r.id, 1);
  EXPECT_EQ(r.offset, 1u);
  r = m.find("x<|a|><|b", 6);
  EXPECT_EQ(r.id, 3);
  EXPECT_EQ(r.offset, 7u);
  EXPECT_EQ(m.find("<|a|", 0).length, 0u);
  EXPECT_EQ(m.find("", 0).length, 0u);
}

TEST(SpecialTokenMatcher, FirstIdWinsForRepeatedText) {
  SpecialTokenMatcher m;
  m.add("<eos>", 7);
  m.add("<eos>", 9);
  EXPECT_EQ(m.find("<eos>", 0).id, 7);
}

}  // namespace
}  // namespace kvstash::tokenizer
