#include "cache/memory_tier.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

namespace kvstash::cache {
namespace {

ChunkKey key_of(int i) {
  ChunkKey k;
  k.bytes[0] = static_cast<std::uint8_t>(i);
  k.bytes[1] = static_cast<std::uint8_t>(i >> 8);
  return k;
}

TEST(MemoryTier, PutGetContainsErase) {
  MemoryTier tier(1000);
  Bytes a(100, 1), b(200, 2);
  ASSERT_TRUE(tier.put(key_of(1), a).is_ok());
  ASSERT_TRUE(tier.put(key_of(2), b).is_ok());
  EXPECT_EQ(*tier.get(key_of(2)), b);
  EXPECT_EQ(tier.get(key_of(3)).status().code(), StatusCode::kNotFound);
  std::vector<ChunkKey> keys = {key_of(1), key_of(2), key_of(3), key_of(1)};
  EXPECT_EQ(tier.contains(keys), 2u);
  ASSERT_TRUE(tier.erase(key_of(1)).is_ok());
  EXPECT_EQ(tier.contains(keys), 0u);
  TierStats s = tier.stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes_used, 200u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.bytes_read, 200u);
  EXPECT_EQ(s.bytes_written, 300u);
}

TEST(MemoryTier, EvictsLeastRecentlyUsed) {
  MemoryTier tier(300);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier.put(key_of(i), Bytes(100, 0)).is_ok());
  ASSERT_TRUE(tier.get(key_of(0)).has_value());  // 1 is now the coldest
  ASSERT_TRUE(tier.put(key_of(3), Bytes(100, 0)).is_ok());
  EXPECT_TRUE(tier.get(key_of(0)).has_value());
  EXPECT_FALSE(tier.get(key_of(1)).has_value());
  EXPECT_TRUE(tier.get(key_of(2)).has_value());
  EXPECT_EQ(tier.stats().evictions, 1u);
  EXPECT_EQ(tier.put(key_of(9), Bytes(301, 0)).code(), StatusCode::kResourceExhausted);
}

TEST(MemoryTier, NeverExceedsBoundUnderRandomWorkload) {
  static constexpr std::uint64_t kCapacity = 64 * 1024;
  MemoryTier tier(kCapacity);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 3000; ++i) {
        ChunkKey key = key_of(static_cast<int>(rng() % 200));
        switch (rng() % 4) {
          case 0: case 1: (void)tier.put(key, Bytes(rng() % 9000, 0)); break;
          case 2: (void)tier.get(key); break;
          case 3: (void)tier.erase(key); break;
        }
        EXPECT_LE(tier.stats().bytes_used, kCapacity);
      }
    });
  }
  for (auto& th : threads) th.join();
  // The level reported equals the sum of what is actually held.
  std::uint64_t sum = 0;
  auto keys = tier.list_keys();
  ASSERT_TRUE(keys.has_value());
  for (const auto& key : *keys) sum += tier.get(key)->size();
  EXPECT_EQ(sum, tier.stats().bytes_used);
  EXPECT_LE(sum, kCapacity);
}

}  // namespace
}  // namespace kvstash::cache
