// Erasure coding: every K-subset of a 4+2 coding reconstructs the chunk; a corrupt fragment is
// identified by its hash and replaced; the signed fragment set refuses forgeries.
#include "share/erasure.h"

#include <gtest/gtest.h>

#include "cache/test_util.h"

namespace kvstash::share {
namespace {

using cache::testing::test_key;

cache::Bytes data_of(std::size_t n) {
  cache::Bytes d(n);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<std::uint8_t>((i * 131 + 7) ^ (i >> 9));
  return d;
}

TEST(ErasureTest, ParsesSchemes) {
  auto s = parse_erasure_scheme("4+2");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->k, 4);
  EXPECT_EQ(s->m, 2);
  for (const char* bad : {"", "4", "4+", "+2", "0+2", "4+0", "30+3", "a+b", "4+2+1"}) EXPECT_FALSE(parse_erasure_scheme(bad)) << bad;
}

TEST(ErasureTest, AnyFourOfSixReconstructTheChunk) {
  const ErasureScheme s{4, 2};
  for (std::size_t size : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}}) {
    const cache::Bytes data = data_of(size);
    const auto fragments = erasure_encode(s, data);
    ASSERT_EQ(fragments.size(), 6u);
    EXPECT_EQ(fragments[0].size(), (size + 3) / 4);
    int subsets = 0;
    for (int mask = 0; mask < 64; ++mask) {
      if (__builtin_popcount(mask) != 4) continue;
      std::vector<Fragment> have;
      for (int i = 5; i >= 0; --i) {  // out of order on purpose
        if (mask & (1 << i)) have.push_back({i, fragments[i]});
      }
      auto back = erasure_decode(s, have, size);
      ASSERT_TRUE(back) << back.status().to_string();
      EXPECT_EQ(*back, data) << "size " << size << " mask " << mask;
      ++subsets;
    }
    EXPECT_EQ(subsets, 15);
  }
}

TEST(ErasureTest, FewerThanKFragmentsIsAnErrorNotAGuess) {
  const ErasureScheme s{4, 2};
  const auto fragments = erasure_encode(s, data_of(100));
  std::vector<Fragment> three = {{0, fragments[0]}, {4, fragments[4]}, {5, fragments[5]}, {5, fragments[5]}};
  EXPECT_FALSE(erasure_decode(s, three, 100));
  std::vector<Fragment> bad_index = {{0, fragments[0]}, {1, fragments[1]}, {2, fragments[2]}, {9, fragments[3]}};
  EXPECT_FALSE(erasure_decode(s, bad_index, 100));
}

TEST(ErasureTest, ACorruptFragmentIsIdentifiedAndReplaced) {
  const ErasureScheme s{4, 2};
  const cache::Bytes data = data_of(4096);
  auto fragments = erasure_encode(s, data);
  const auto producer = identity::NodeIdentity::generate();
  const FragmentSet set = make_fragment_set(test_key(1), s, data.size(), fragments, producer);
  fragments[1][17] ^= 0x01;  // one holder's copy is damaged
  std::vector<Fragment> good;
  for (int i = 0; i < s.total() && static_cast<int>(good.size()) < s.k; ++i) {
    if (fragment_matches(set, i, fragments[i])) good.push_back({i, fragments[i]});
  }
  ASSERT_EQ(good.size(), 4u);
  EXPECT_EQ(good[1].index, 2);  // fragment 1 was skipped, a parity fragment took its place
  EXPECT_EQ(good[3].index, 4);
  EXPECT_EQ(*erasure_decode(s, good, data.size()), data);
  // Without the hash check the damage would go through into the chunk.
  std::vector<Fragment> blind = {{0, fragments[0]}, {1, fragments[1]}, {2, fragments[2]}, {3, fragments[3]}};
  EXPECT_NE(*erasure_decode(s, blind, data.size()), data);
}

TEST(ErasureTest, FragmentSetRoundTripsAndRefusesForgeries) {
  const ErasureScheme s{4, 2};
  const auto fragments = erasure_encode(s, data_of(333));
  const auto producer = identity::NodeIdentity::generate();
  const FragmentSet set = make_fragment_set(test_key(2), s, 333, fragments, producer);
  auto back = decode_fragment_set(encode_fragment_set(set));
  ASSERT_TRUE(back);
  EXPECT_TRUE(fragment_set_verifies(*back, test_key(2)));
  EXPECT_FALSE(fragment_set_verifies(*back, test_key(3)));
  EXPECT_EQ(back->chunk_size, 333u);
  EXPECT_EQ(back->hashes, set.hashes);
  FragmentSet forged = *back;
  forged.hashes[0][0] ^= 1;  // a holder swaps in its own fragment 0 and its hash
  EXPECT_FALSE(fragment_set_verifies(forged, test_key(2)));
  const std::string bytes = encode_fragment_set(set);
  EXPECT_FALSE(decode_fragment_set(bytes.substr(0, bytes.size() - 1)));
  EXPECT_FALSE(decode_fragment_set("KVSFRAGS"));
}

}  // namespace
}  // namespace kvstash::share
