#include "tokenizer/flat_tables.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace kvstash::tokenizer {
namespace {

TEST(TokenIndex, FindsEveryTextAndTheFirstOfADuplicate) {
  std::vector<std::string> texts = {"a", "b", "ab", "", "b", "hello world", "ab"};
  std::mt19937 rng(5);
  for (int i = 0; i < 5000; ++i) texts.push_back("t" + std::to_string(rng()));
  TokenIndex index;
  index.build(texts);
  std::set<std::string> seen;
  for (std::size_t id = 0; id < texts.size(); ++id) {
    const auto found = index.find(texts[id], texts);
    ASSERT_TRUE(found.has_value()) << texts[id];
    if (seen.insert(texts[id]).second) {
      EXPECT_EQ(*found, static_cast<std::int32_t>(id)) << texts[id];
    } else {
      EXPECT_LT(*found, static_cast<std::int32_t>(id)) << "a duplicate keeps the first id: " << texts[id];
    }
  }
  EXPECT_EQ(*index.find("b", texts), 1);
  EXPECT_EQ(*index.find("", texts), 3);
  EXPECT_FALSE(index.find("abc", texts).has_value());
  EXPECT_FALSE(index.find("hello", texts).has_value());
  TokenIndex empty;
  EXPECT_FALSE(empty.find("a", texts).has_value());
}

TEST(PairTable, FirstInsertionWinsAndMissesAreNull) {
  struct Value {
    int rank;
  };
  PairTable<Value> table;
  table.reserve(3000);
  std::mt19937_64 rng(9);
  std::vector<std::uint64_t> keys;
  for (int i = 0; i < 3000; ++i) keys.push_back(rng() >> 1);
  for (int i = 0; i < 3000; ++i) table.insert(keys[i], Value{i});
  for (int i = 0; i < 3000; ++i) {
    const Value* v = table.find(keys[i]);
    ASSERT_NE(v, nullptr);
    EXPECT_LE(v->rank, i);  // equal unless the random key repeated
  }
  EXPECT_FALSE(table.insert(keys[0], Value{99}));
  EXPECT_EQ(table.find(keys[0])->rank, 0);
  EXPECT_EQ(table.find(12345), nullptr);
  EXPECT_LE(table.size(), 3000u);
  PairTable<Value> empty;
  EXPECT_EQ(empty.find(1), nullptr);
}

}  // namespace
}  // namespace kvstash::tokenizer
