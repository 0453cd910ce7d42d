// extract_literals(), the semantic index's gates and the semantic entry codec, in process.
#include "server/semantic_cache.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cache/semantic_entry.h"

namespace kvstash::server {
namespace {

using Lits = std::vector<std::string>;

TEST(ExtractLiterals, NumbersWithTheirArithmeticAndQuotedStrings) {
  EXPECT_EQ(extract_literals("What is 2+3?"), (Lits{"n:2+3"}));
  EXPECT_EQ(extract_literals("What is 2 + 3 ?"), (Lits{"n:2+3"}));
  EXPECT_NE(extract_literals("What is 2+3?"), extract_literals("What is 2-3?"));
  EXPECT_NE(extract_literals("What is 2+3?"), extract_literals("What is 3+2?"));
  EXPECT_EQ(extract_literals("It costs 1,000.50 dollars."), (Lits{"n:1,000.50"}));
  EXPECT_EQ(extract_literals("Say \"hello\" and 'bye' twice"), (Lits{"q:hello", "q:bye"}));
  EXPECT_EQ(extract_literals("What's the user's name?"), Lits{});
  EXPECT_EQ(extract_literals("\xE2\x80\x9CHi\xE2\x80\x9D `x`"), (Lits{"q:Hi", "q:x"}));
  EXPECT_EQ(extract_literals("unterminated \"quote"), (Lits{"q:quote"}));
  EXPECT_EQ(extract_literals("no literals here"), Lits{});
}

std::vector<float> unit(std::vector<float> v) {
  double n = 0;
  for (float x : v) n += double(x) * x;
  for (float& x : v) x = static_cast<float>(x / std::sqrt(n));
  return v;
}

TEST(SemanticIndex, FindsNearEntriesOfItsNamespaceWithEqualLiteralsOnly) {
  SemanticCacheOptions o;
  o.threshold = 0.9f;
  o.max_entries_per_namespace = 3;
  SemanticIndex index(o);
  cache::ChunkKey ns1, ns2, r1, r2, r3;
  ns1.bytes[0] = 1;
  ns2.bytes[0] = 2;
  r1.bytes[0] = 11;
  r2.bytes[0] = 12;
  r3.bytes[0] = 13;
  ASSERT_TRUE(index.add(ns1, r1, unit({1, 0, 0, 0}), {"n:2"}));
  ASSERT_TRUE(index.add(ns1, r2, unit({0, 1, 0, 0}), {}));
  ASSERT_TRUE(index.add(ns1, r2, unit({0, 1, 0, 0}), {}));  // already there: no second entry
  EXPECT_EQ(index.size(), 2u);
  int refused = 0;
  auto near = index.find(ns1, unit({1, 0.1f, 0, 0}), {"n:2"}, &refused);
  ASSERT_EQ(near.size(), 1u);
  EXPECT_EQ(near[0].record_key, r1);
  EXPECT_GT(near[0].cosine, 0.99f);
  EXPECT_EQ(refused, 0);
  EXPECT_TRUE(index.find(ns1, unit({1, 0.1f, 0, 0}), {"n:3"}, &refused).empty());
  EXPECT_EQ(refused, 1);
  EXPECT_TRUE(index.find(ns2, unit({1, 0.1f, 0, 0}), {"n:2"}, nullptr).empty());  // another namespace
  EXPECT_TRUE(index.find(ns1, unit({1, 1, 0, 0}), {"n:2"}, nullptr).empty());     // cosine 0.71 < 0.9
  EXPECT_FALSE(index.add(ns1, r3, unit({1, 0, 0}), {}));                          // other dimensions
  ASSERT_TRUE(index.add(ns1, r3, unit({0, 0, 1, 0}), {}));
  cache::ChunkKey r4;
  r4.bytes[0] = 14;
  EXPECT_FALSE(index.add(ns1, r4, unit({0, 0, 0, 1}), {}));  // the namespace is full
}

// The index is bounded: past max_namespaces or max_bytes the least recently used namespace goes
// (new tenants are indexed, never refused forever), and the estimated memory stays within bound.
TEST(SemanticIndex, EvictsLeastRecentlyUsedNamespacesWithinItsBounds) {
  SemanticCacheOptions o;
  o.threshold = 0.9f;
  o.max_namespaces = 2;
  SemanticIndex index(o);
  cache::ChunkKey ns[3], r[3];
  for (int i = 0; i < 3; ++i) {
    ns[i].bytes[0] = static_cast<std::uint8_t>(1 + i);
    r[i].bytes[0] = static_cast<std::uint8_t>(11 + i);
  }
  ASSERT_TRUE(index.add(ns[0], r[0], unit({1, 0, 0, 0}), {}));
  ASSERT_TRUE(index.add(ns[1], r[1], unit({1, 0, 0, 0}), {}));
  EXPECT_FALSE(index.find(ns[0], unit({1, 0, 0, 0}), {}, nullptr).empty());  // ns[0] used last
  ASSERT_TRUE(index.add(ns[2], r[2], unit({1, 0, 0, 0}), {}));               // a third: ns[1] goes
  EXPECT_EQ(index.evicted(), 1u);
  EXPECT_EQ(index.size(), 2u);
  EXPECT_TRUE(index.find(ns[1], unit({1, 0, 0, 0}), {}, nullptr).empty());
  EXPECT_FALSE(index.find(ns[0], unit({1, 0, 0, 0}), {}, nullptr).empty());
  EXPECT_FALSE(index.find(ns[2], unit({1, 0, 0, 0}), {}, nullptr).empty());

  // By bytes: room for about two namespaces' initial capacity of 64-dimensional entries.
  SemanticCacheOptions b;
  b.threshold = 0.9f;
  SemanticIndex probe(b);
  std::vector<float> v(64, 0.0f);
  v[0] = 1.0f;
  ASSERT_TRUE(probe.add(ns[0], r[0], v, {}));
  const std::size_t one = probe.bytes();
  ASSERT_GT(one, 0u);
  b.max_bytes = one * 2 + one / 2;
  SemanticIndex bounded(b);
  for (int i = 0; i < 40; ++i) {
    cache::ChunkKey n, k;
    n.bytes[0] = static_cast<std::uint8_t>(i);
    n.bytes[1] = 1;
    k.bytes[0] = static_cast<std::uint8_t>(i);
    ASSERT_TRUE(bounded.add(n, k, v, {})) << i;
    EXPECT_LE(bounded.bytes(), b.max_bytes);
  }
  EXPECT_EQ(bounded.evicted(), 38u);
  EXPECT_EQ(bounded.size(), 2u);
}

TEST(SemanticEntry, RoundTripsAndRejectsDamage) {
  cache::SemanticEntry e;
  e.record_key.bytes[3] = 7;
  e.ns.bytes[5] = 9;
  e.embedding = {0.5f, -0.25f, 0.125f};
  e.literals = {"n:2+3", "q:hello"};
  e.signature[0] = 1;
  Expected<cache::Bytes> bytes = cache::encode_semantic_entry(e);
  ASSERT_TRUE(bytes);
  Expected<cache::SemanticEntry> back = cache::decode_semantic_entry(*bytes);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(*back, e);
  cache::Bytes cut(bytes->begin(), bytes->end() - 1);
  EXPECT_FALSE(cache::decode_semantic_entry(cut));
  cache::Bytes longer = *bytes;
  longer.push_back(0);
  EXPECT_FALSE(cache::decode_semantic_entry(longer));
  cache::Bytes v2 = *bytes;
  v2[4] = 2;
  EXPECT_EQ(cache::decode_semantic_entry(v2).status().code(), StatusCode::kUnsupported);
  EXPECT_NE(cache::signed_message(e), [&] {
    cache::SemanticEntry f = e;
    f.literals[0] = "n:2+4";
    return cache::signed_message(f);
  }());
}

}  // namespace
}  // namespace kvstash::server
