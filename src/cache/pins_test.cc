// Pins in the memory and disk tiers and through the TieredStore: a pinned document survives churn
// that evicts everything else, its TTL restarts on each hit, it is evicted normally once the TTL has
// passed, and pins never take more than their share of a tier. Time is a fake clock: 15 minutes of
// churn take no wall-clock time.
#include "cache/pins.h"

#include <gtest/gtest.h>

#include <memory>

#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/test_util.h"
#include "cache/tiered_store.h"

namespace kvstash::cache {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

struct FakeClock {
  std::chrono::steady_clock::time_point now{std::chrono::hours(1000)};
  PinClock fn() {
    return [this] { return now; };
  }
};

ChunkKey key_of(int doc, int chunk) {
  ChunkKey k;
  k.bytes[0] = static_cast<std::uint8_t>(doc);
  k.bytes[1] = static_cast<std::uint8_t>(chunk);
  k.bytes[2] = 0x5a;
  return k;
}

constexpr int kChunksPerDoc = 4;
constexpr std::uint64_t kChunkBytes = 1000;

std::vector<ChunkKey> doc_keys(int doc) {
  std::vector<ChunkKey> keys;
  for (int c = 0; c < kChunksPerDoc; ++c) keys.push_back(key_of(doc, c));
  return keys;
}

// The test: a tier sized for 4 documents, 1 pinned (1 h TTL) and 20 unpinned cycled
// through for 15 minutes (a round every 30 s), the pinned one a hit every 5 minutes.
void churn_keeps_the_pinned_document(Tier& tier, FakeClock& clock, const std::function<void(int)>& put_doc) {
  put_doc(0);
  ASSERT_EQ(tier.pin(doc_keys(0), std::chrono::hours(1)), static_cast<std::size_t>(kChunksPerDoc));
  EXPECT_EQ(tier.stats().pinned_entries, static_cast<std::uint64_t>(kChunksPerDoc));
  for (int round = 0; round < 30; ++round) {
    for (int doc = 1; doc <= 20; ++doc) put_doc(doc);
    clock.now += seconds(30);
    if (round % 10 == 9) {  // a request that reads the pinned document
      for (const ChunkKey& k : doc_keys(0)) ASSERT_TRUE(tier.get(k).has_value()) << "round " << round;
    }
  }
  const auto keys = doc_keys(0);
  EXPECT_EQ(tier.contains(keys), keys.size()) << "the pinned document was evicted by the churn";
  EXPECT_GT(tier.stats().evictions, 500u) << "the churn did not evict: it proved nothing";
  // Unpinned documents were evicted in LRU order as usual: the oldest of the last round is gone.
  EXPECT_EQ(tier.contains(doc_keys(1)), 0u);
  EXPECT_EQ(tier.contains(doc_keys(20)), static_cast<std::size_t>(kChunksPerDoc));
  // Past the TTL (counted from the last hit), the document is an ordinary cold one.
  clock.now += std::chrono::hours(1) + seconds(1);
  for (int doc = 1; doc <= 20; ++doc) put_doc(doc);
  EXPECT_EQ(tier.contains(keys), 0u) << "the pin outlived its TTL";
  EXPECT_EQ(tier.stats().pinned_entries, 0u);
  EXPECT_GE(tier.stats().pins_expired, static_cast<std::uint64_t>(kChunksPerDoc));
}

TEST(Pins, MemoryTierKeepsThePinnedDocumentThroughChurnAndDropsItAfterItsTtl) {
  FakeClock clock;
  MemoryTier tier(4 * kChunksPerDoc * kChunkBytes, PinOptions{.max_share = 0.5, .clock = clock.fn()});
  churn_keeps_the_pinned_document(tier, clock, [&](int doc) {
    for (const ChunkKey& k : doc_keys(doc)) ASSERT_TRUE(tier.put(k, Bytes(kChunkBytes, static_cast<std::uint8_t>(doc))).is_ok());
  });
}

TEST(Pins, DiskTierKeepsThePinnedDocumentThroughChurnAndDropsItAfterItsTtl) {
  FakeClock clock;
  testing::ScratchDir dir;
  // A disk chunk must be a whole encoded chunk: the sizes come from the codec.
  auto chunk = [](const ChunkKey& k) { return testing::test_chunk(testing::test_meta(k), kChunkBytes); };
  const std::uint64_t size = chunk(key_of(0, 0)).size();
  auto tier = DiskTier::open({.dir = dir.path(), .capacity_bytes = 4 * kChunksPerDoc * size,
                              .pins = PinOptions{.max_share = 0.5, .clock = clock.fn()}});
  ASSERT_TRUE(tier.has_value()) << tier.status().to_string();
  churn_keeps_the_pinned_document(**tier, clock, [&](int doc) {
    for (const ChunkKey& k : doc_keys(doc)) ASSERT_TRUE((*tier)->put(k, chunk(k)).is_ok());
  });
}

TEST(Pins, ThePinnedShareIsBoundedAndARefusedPinChangesNothing) {
  FakeClock clock;
  MemoryTier tier(10 * kChunkBytes, PinOptions{.max_share = 0.3, .clock = clock.fn()});
  for (int c = 0; c < 4; ++c) ASSERT_TRUE(tier.put(key_of(1, c), Bytes(kChunkBytes, 1)).is_ok());
  // 3 of the 4 fit in 30 % of 10 chunks.
  EXPECT_EQ(tier.pin(doc_keys(1), minutes(5)), 3u);
  TierStats s = tier.stats();
  EXPECT_EQ(s.pinned_entries, 3u);
  EXPECT_EQ(s.pinned_bytes, 3 * kChunkBytes);
  EXPECT_EQ(s.pins_refused, 1u);
  // Filling the tier twice over keeps the three pinned chunks and evicts the unpinned fourth.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(tier.put(key_of(2, i), Bytes(kChunkBytes, 2)).is_ok());
  EXPECT_TRUE(tier.get(key_of(1, 0)).has_value());
  EXPECT_TRUE(tier.get(key_of(1, 2)).has_value());
  EXPECT_FALSE(tier.get(key_of(1, 3)).has_value());
  EXPECT_LE(tier.stats().bytes_used, 10 * kChunkBytes);
}

TEST(Pins, APinOfAChunkNotHeldYetTakesHoldWhenItIsPut) {
  FakeClock clock;
  MemoryTier tier(4 * kChunkBytes, PinOptions{.max_share = 0.5, .clock = clock.fn()});
  EXPECT_EQ(tier.pin(std::vector<ChunkKey>{key_of(1, 0)}, minutes(5)), 1u);
  EXPECT_EQ(tier.stats().pin_intents, 1u);
  EXPECT_EQ(tier.stats().pinned_entries, 0u);
  ASSERT_TRUE(tier.put(key_of(1, 0), Bytes(kChunkBytes, 1)).is_ok());
  EXPECT_EQ(tier.stats().pinned_entries, 1u);
  EXPECT_EQ(tier.stats().pin_intents, 0u);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(tier.put(key_of(2, i), Bytes(kChunkBytes, 2)).is_ok());
  EXPECT_TRUE(tier.get(key_of(1, 0)).has_value());
  // An intent whose deadline passes before its chunk comes pins nothing.
  EXPECT_EQ(tier.pin(std::vector<ChunkKey>{key_of(3, 0)}, minutes(5)), 1u);
  clock.now += minutes(6);
  ASSERT_TRUE(tier.put(key_of(3, 0), Bytes(kChunkBytes, 3)).is_ok());
  EXPECT_FALSE(tier.stats().pinned_entries > 0 && tier.stats().pinned_bytes > kChunkBytes);
  for (int i = 10; i < 20; ++i) ASSERT_TRUE(tier.put(key_of(2, i), Bytes(kChunkBytes, 2)).is_ok());
  EXPECT_FALSE(tier.get(key_of(3, 0)).has_value());
}

TEST(Pins, AHitRestartsTheTtl) {
  FakeClock clock;
  MemoryTier tier(4 * kChunkBytes, PinOptions{.max_share = 0.5, .clock = clock.fn()});
  ASSERT_TRUE(tier.put(key_of(1, 0), Bytes(kChunkBytes, 1)).is_ok());
  ASSERT_EQ(tier.pin(std::vector<ChunkKey>{key_of(1, 0)}, minutes(5)), 1u);
  for (int i = 0; i < 4; ++i) {  // a hit every 4 minutes keeps a 5-minute pin alive for 16 minutes
    clock.now += minutes(4);
    ASSERT_TRUE(tier.get(key_of(1, 0)).has_value()) << i;
    for (int j = 0; j < 6; ++j) ASSERT_TRUE(tier.put(key_of(2, i * 6 + j), Bytes(kChunkBytes, 2)).is_ok());
  }
  EXPECT_EQ(tier.stats().pinned_entries, 1u);
  clock.now += minutes(5) + seconds(1);
  for (int j = 0; j < 6; ++j) ASSERT_TRUE(tier.put(key_of(3, j), Bytes(kChunkBytes, 3)).is_ok());
  EXPECT_FALSE(tier.get(key_of(1, 0)).has_value());
}

TEST(Pins, TheStorePinsEveryLocalTierAndCutsTheTtlToTheOperatorsMaximum) {
  FakeClock clock;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<MemoryTier>(4 * kChunkBytes, PinOptions{.max_share = 0.5, .clock = clock.fn()}));
  tiers.push_back(std::make_unique<MemoryTier>(8 * kChunkBytes, PinOptions{.max_share = 0.5, .clock = clock.fn()}));
  TieredStoreOptions o;
  o.max_pin_ttl = minutes(2);
  TieredStore store(std::move(tiers), o);
  for (std::size_t t = 0; t < 2; ++t) ASSERT_TRUE(store.tier(t).put(key_of(1, 0), Bytes(kChunkBytes, 1)).is_ok());
  EXPECT_EQ(store.pin(std::vector<ChunkKey>{key_of(1, 0)}, std::chrono::hours(1)), 1u);
  for (std::size_t t = 0; t < 2; ++t) EXPECT_EQ(store.tier(t).stats().pinned_entries, 1u) << "tier " << t;
  clock.now += minutes(2) + seconds(1);  // the operator's 2 minutes, not the client's hour
  for (std::size_t t = 0; t < 2; ++t) EXPECT_EQ(store.tier(t).stats().pinned_entries, 0u) << "tier " << t;
  EXPECT_EQ(store.pin(std::vector<ChunkKey>{key_of(1, 0)}, seconds(0)), 0u);
}

}  // namespace
}  // namespace kvstash::cache
