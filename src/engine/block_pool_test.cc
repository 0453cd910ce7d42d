#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

namespace kvstash {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  return c;
}

cache::ChunkKey key(int n) {
  cache::ChunkKey k;
  k.bytes[0] = static_cast<std::uint8_t>(n);
  k.bytes[31] = 0x5a;
  return k;
}

TEST(BlockPool, AllocatesEveryBlockOnceThenRefuses) {
  BlockPool pool(small_config(), 16, 4);
  std::set<std::int32_t> seen;
  for (int i = 0; i < 4; ++i) {
    auto b = pool.allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(seen.insert(*b).second) << "block handed out twice";
  }
  EXPECT_EQ(pool.n_available(), 0);
  auto none = pool.allocate();
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
}

TEST(BlockPool, FreedUnregisteredBlockReturnsToPool) {
  BlockPool pool(small_config(), 16, 2);
  auto a = *pool.allocate();
  pool.retain(a);
  pool.release(a);
  EXPECT_EQ(pool.n_available(), 1) << "still referenced once";
  pool.release(a);
  EXPECT_EQ(pool.n_available(), 2);
  EXPECT_EQ(pool.n_cached(), 0);
}

TEST(BlockPool, RegisteredBlockStaysCachedAndIsFoundByKey) {
  BlockPool pool(small_config(), 16, 2);
  auto a = *pool.allocate();
  pool.block_bytes(a)[0] = 0xAB;
  pool.register_block(a, key(1));
  pool.release(a);
  EXPECT_EQ(pool.n_cached(), 1);
  EXPECT_EQ(pool.n_used(), 0);
  auto hit = pool.lookup(key(1));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.block_bytes(a)[0], 0xAB) << "cached KV must survive";
  EXPECT_FALSE(pool.lookup(key(2)).has_value());
}

TEST(BlockPool, EvictsLeastRecentlyUsedCachedBlockWhenFull) {
  BlockPool pool(small_config(), 16, 2);
  auto a = *pool.allocate();
  auto b = *pool.allocate();
  pool.register_block(a, key(1));
  pool.register_block(b, key(2));
  pool.release(a);  // a is older
  pool.release(b);
  auto c = pool.allocate();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, a) << "the least recently used cached block goes first";
  EXPECT_FALSE(pool.contains(key(1)));
  EXPECT_TRUE(pool.contains(key(2)));
}

TEST(BlockPool, SharedBlockNeedsEveryReferenceReleased) {
  BlockPool pool(small_config(), 16, 1);
  auto a = *pool.allocate();
  pool.register_block(a, key(7));
  auto again = pool.lookup(key(7));  // a second sequence shares it
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(pool.ref_count(a), 2);
  pool.release(a);
  EXPECT_FALSE(pool.allocate().has_value()) << "a block still referenced must not be evicted";
  pool.release(a);
  EXPECT_TRUE(pool.allocate().has_value());
}

TEST(BlockPool, DuplicateKeyKeepsTheFirstBlock) {
  BlockPool pool(small_config(), 16, 2);
  auto a = *pool.allocate();
  auto b = *pool.allocate();
  pool.register_block(a, key(3));
  pool.register_block(b, key(3));
  pool.release(b);
  EXPECT_EQ(pool.n_cached(), 0) << "b was not registered, so it is simply free";
  EXPECT_EQ(*pool.lookup(key(3)), a);
}

// Issue 8: a released block table goes tail first, so eviction eats a cached prefix from its end
// and what stays is still a prefix (lookups stop at the first missing block).
TEST(BlockPool, ReleasedTableIsEvictedFromItsTail) {
  BlockPool pool(small_config(), 16, 4);
  std::vector<std::int32_t> table;
  for (int i = 0; i < 4; ++i) {
    table.push_back(*pool.allocate());
    pool.register_block(table.back(), key(i));
  }
  pool.release_table(table);
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(pool.n_cached(), 4);
  // Two new blocks evict two cached ones: the prefix's last two.
  auto a = pool.allocate(), b = pool.allocate();
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(pool.contains(key(0)));
  EXPECT_TRUE(pool.contains(key(1)));
  EXPECT_FALSE(pool.contains(key(2)));
  EXPECT_FALSE(pool.contains(key(3)));
}

TEST(BlockPool, RecordsEveryKeyItStartsOrStopsHolding) {
  BlockPool pool(small_config(), 16, 2);
  pool.record_key_changes(true);
  auto a = pool.allocate();
  auto b = pool.allocate();
  ASSERT_TRUE(a && b);
  pool.register_block(*a, key(1));
  pool.register_block(*b, key(1));  // already named by a: no change
  pool.register_block(*b, key(2));
  pool.unregister(*b);              // a copy-on-write: the pool forgets key 2
  pool.release(*a);                 // cached: still held
  pool.release(*b);                 // unregistered: free
  auto c = pool.allocate();         // the free block first: key 1 stays
  auto d = pool.allocate();         // evicts key 1
  ASSERT_TRUE(c && d);
  std::vector<std::pair<bool, int>> seen;
  for (const cache::KvChange& ch : pool.take_key_changes()) {
    EXPECT_EQ(ch.source, cache::KvSource::kPool);
    seen.emplace_back(ch.stored, ch.key.bytes[0]);
  }
  EXPECT_EQ(seen, (std::vector<std::pair<bool, int>>{{true, 1}, {true, 2}, {false, 2}, {false, 1}}));
  EXPECT_TRUE(pool.take_key_changes().empty());
  BlockPool quiet(small_config(), 16, 1);  // off by default
  quiet.register_block(*quiet.allocate(), key(3));
  EXPECT_TRUE(quiet.take_key_changes().empty());
}

cache::ProducerKey producer(int n) {
  cache::ProducerKey k{};
  k[0] = static_cast<std::uint8_t>(n);
  return k;
}

TEST(KvTaint, MergesAsAUnionAndMapsToProvenance) {
  const KvTaint none;
  const KvTaint x = std::make_shared<const std::vector<cache::ProducerKey>>(std::vector{producer(1)});
  const KvTaint y = std::make_shared<const std::vector<cache::ProducerKey>>(std::vector{producer(2), producer(1)});
  EXPECT_EQ(merge_taint(none, none), nullptr);
  EXPECT_EQ(merge_taint(none, x), x);
  EXPECT_EQ(merge_taint(x, none), x);
  EXPECT_EQ(merge_taint(x, x), x);
  const KvTaint xy = merge_taint(x, y);
  ASSERT_TRUE(xy);
  EXPECT_EQ(*xy, (std::vector{producer(1), producer(2)}));
  EXPECT_EQ(provenance_of(none).trust, cache::ChunkTrust::kComputed);
  const cache::Provenance p = provenance_of(xy);
  EXPECT_EQ(p.trust, cache::ChunkTrust::kUnchecked);
  EXPECT_EQ(p.producers, *xy);
  ASSERT_TRUE(taint_of(p));
  EXPECT_EQ(*taint_of(p), *xy);
  cache::Provenance verified;
  verified.trust = cache::ChunkTrust::kVerified;
  verified.producers = {producer(3)};
  EXPECT_EQ(taint_of(verified), nullptr);  // a trusted producer's KV taints nothing
  cache::Provenance legacy;
  legacy.trust = cache::ChunkTrust::kUnknown;  // a version-1 chunk: unchecked, no producer known
  ASSERT_TRUE(taint_of(legacy));
  EXPECT_TRUE(taint_of(legacy)->empty());
}

// KV derived from more unchecked producers than a chunk records ends its list with kMoreProducers:
// the list stays within the format's bound, and a ban of any producer (one not recorded too) counts.
TEST(KvTaint, MoreProducersThanRecordedMakeAnIncompleteListThatEveryBanNames) {
  KvTaint many;
  for (int n = 1; n <= 100; ++n) {
    many = merge_taint(many, std::make_shared<const std::vector<cache::ProducerKey>>(std::vector{producer(n)}));
  }
  ASSERT_TRUE(many);
  ASSERT_EQ(many->size(), cache::kMaxProvenanceProducers);
  EXPECT_EQ(many->back(), cache::kMoreProducers);
  EXPECT_EQ((*many)[0], producer(1));
  const cache::Provenance p = provenance_of(many);
  EXPECT_TRUE(p.names(producer(99)));  // not recorded, but may be among them
  cache::ChunkMeta meta;
  meta.provenance = p;
  EXPECT_TRUE(cache::encode_chunk(meta, cache::Bytes(16, 1)).has_value()) << "within the format's bound";
  // Merging more into an incomplete list changes nothing.
  const KvTaint more = std::make_shared<const std::vector<cache::ProducerKey>>(std::vector{producer(200)});
  EXPECT_EQ(merge_taint(many, more), many);
  BlockPool pool(small_config(), 16, 4);
  auto b = pool.allocate();
  ASSERT_TRUE(b);
  pool.register_block(*b, key(0));
  pool.set_taint(*b, many);
  pool.release(*b);
  EXPECT_EQ(pool.forget_derived_from(producer(150)), 1);
}

TEST(BlockPool, ForgetsTheBlocksDerivedFromABannedProducer) {
  BlockPool pool(small_config(), 16, 4);
  const KvTaint x = std::make_shared<const std::vector<cache::ProducerKey>>(std::vector{producer(7)});
  std::vector<std::int32_t> table;
  for (int i = 0; i < 3; ++i) {
    auto b = pool.allocate();
    ASSERT_TRUE(b);
    table.push_back(*b);
    pool.register_block(*b, key(i));
  }
  pool.set_taint(table[1], x);  // blocks 1 and 2 derive from producer 7; block 0 is clean
  pool.set_taint(table[2], x);
  const std::int32_t held = table[2];
  pool.retain(held);  // still referenced by a running sequence after the table goes
  pool.release_table(table);
  EXPECT_EQ(pool.n_cached(), 2);
  EXPECT_EQ(pool.forget_derived_from(producer(9)), 0);
  EXPECT_EQ(pool.forget_derived_from(producer(7)), 2);
  EXPECT_TRUE(pool.contains(key(0)));
  EXPECT_FALSE(pool.contains(key(1)));
  EXPECT_FALSE(pool.contains(key(2)));
  EXPECT_EQ(pool.n_cached(), 1);           // block 1 went back to the free list
  EXPECT_EQ(pool.n_available(), 3);        // free (3: never used; 1) + cached (0)
  EXPECT_FALSE(pool.is_registered(held));  // its holder finishes with it; it is freed on release
  pool.release(held);
  EXPECT_EQ(pool.n_available(), 4);
  auto again = pool.allocate();
  ASSERT_TRUE(again);
  EXPECT_EQ(pool.taint(*again), nullptr);  // a block handed out again starts clean
}

// Fills the pool with cached blocks registered under keys first..first+n-1 (one reference each,
// released at once: cached, least recently used first in key order).
void cache_blocks(BlockPool& pool, int first, int n) {
  for (int i = 0; i < n; ++i) {
    auto b = pool.allocate();
    ASSERT_TRUE(b.has_value()) << b.status().to_string();
    pool.register_block(*b, key(first + i));
    pool.release(*b);
  }
}

TEST(BlockPoolPins, APinnedBlockOutlivesChurnWhileUnpinnedOnesAreLeftToEvict) {
  using namespace std::chrono_literals;
  BlockPool pool(small_config(), 16, 5);
  auto t = BlockPool::PinClock::time_point{} + 1000h;
  pool.set_pin_clock(t);
  const cache::ChunkKey doc = key(1);
  EXPECT_EQ(pool.pin(std::span<const cache::ChunkKey>(&doc, 1), std::chrono::seconds(3600)), 1u);
  cache_blocks(pool, 1, 1);  // the pinned document's block: the least recently used of all
  // 15 minutes of churn: 20 unpinned documents cycled through the 4 other blocks, every one
  // evicting the least recently used unpinned block.
  for (int round = 0; round < 15; ++round) {
    t += 1min;
    pool.set_pin_clock(t);
    cache_blocks(pool, 10 + round * 20, 20);
  }
  EXPECT_TRUE(pool.contains(doc)) << "evicted under churn while unpinned blocks were left to evict";
  EXPECT_EQ(pool.n_pinned_cached(), 1);
  EXPECT_EQ(pool.pinned_evictions(), 0);
  EXPECT_FALSE(pool.contains(key(10))) << "the churn's oldest unpinned block is gone";
  // Past its TTL it is an ordinary cached block again, evicted by LRU like the others.
  t += 46min;
  pool.set_pin_clock(t);
  EXPECT_EQ(pool.n_pinned_keys(), 0);
  cache_blocks(pool, 400, 5);
  EXPECT_FALSE(pool.contains(doc));
}

TEST(BlockPoolPins, AHitRestartsTheTimeAndAFullPoolStillAllocates) {
  using namespace std::chrono_literals;
  BlockPool pool(small_config(), 16, 4);
  auto t = BlockPool::PinClock::time_point{} + 1000h;
  pool.set_pin_clock(t);
  const cache::ChunkKey keys[] = {key(1), key(2)};
  ASSERT_EQ(pool.pin(keys, std::chrono::seconds(300)), 2u);
  cache_blocks(pool, 1, 2);
  // 4 minutes on, a hit on key 1 restarts its 5 minutes; key 2's run out at 5 minutes.
  t += 4min;
  pool.set_pin_clock(t);
  auto hit = pool.lookup(key(1));
  ASSERT_TRUE(hit.has_value());
  pool.release(*hit);
  t += 2min;
  pool.set_pin_clock(t);
  EXPECT_EQ(pool.n_pinned_keys(), 1) << "key 2's pin expired, key 1's was refreshed by its hit";
  // Every cached block pinned and the free list empty: allocation evicts a pinned block rather
  // than fail (a pin never starves a running request), and counts it.
  BlockPool tight(small_config(), 16, 2);
  tight.set_pin_clock(t);
  ASSERT_EQ(tight.pin(std::span<const cache::ChunkKey>(keys, 1), std::chrono::seconds(300)), 1u);
  cache_blocks(tight, 1, 1);
  auto other = tight.allocate();
  ASSERT_TRUE(other.has_value());
  auto evicting = tight.allocate();
  ASSERT_TRUE(evicting.has_value()) << evicting.status().to_string();
  EXPECT_EQ(tight.pinned_evictions(), 1);
  EXPECT_FALSE(tight.contains(key(1)));
}

TEST(BlockPoolPins, PinsPastTheShareAreRefused) {
  BlockPool pool(small_config(), 16, 10);
  pool.set_pin_max_share(0.3);  // 3 of 10 blocks
  std::vector<cache::ChunkKey> keys;
  for (int i = 0; i < 5; ++i) keys.push_back(key(i));
  EXPECT_EQ(pool.pin(keys, std::chrono::seconds(60)), 3u);
  EXPECT_EQ(pool.pins_refused(), 2);
  EXPECT_EQ(pool.pin(std::span<const cache::ChunkKey>(keys.data(), 1), std::chrono::seconds(60)), 1u) << "a refresh is not a new pin";
  EXPECT_EQ(pool.pin(keys, std::chrono::seconds(0)), 0u) << "no TTL, no pin";
  pool.set_pin_max_share(0.0);
  EXPECT_EQ(pool.pin(std::span<const cache::ChunkKey>(&keys[4], 1), std::chrono::seconds(60)), 0u);
}

}  // namespace
}  // namespace kvstash

namespace kvstash {
namespace {

// Fresh memory is backed ahead of use, the whole storage (block_pool.h). A bounded poll, not a
// timing assertion.
TEST(BlockPool, BacksItsWholeStorageAheadOfUse) {
  ModelConfig c;
  c.n_layers = 4;
  c.n_kv_heads = 8;
  c.head_dim = 128;  // 256 KiB a block of 16 tokens
  const std::size_t block_bytes = std::size_t{4} * 2 * 8 * 128 * 16 * 2;
  BlockPool pool(c, 16, 256);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(pool.prefaulted_bytes(), 0u);  // no thread before start_prefault()
  EXPECT_FALSE(pool.prefault_done());
  pool.start_prefault();
  pool.start_prefault();  // once
  for (int i = 0; i < 3000 && pool.prefaulted_bytes() < 256 * block_bytes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(pool.prefaulted_bytes(), 256 * block_bytes);
  EXPECT_TRUE(pool.prefault_done());
  // Blocks work as ever beside it.
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(pool.allocate());
  EXPECT_FALSE(pool.allocate());
}

}  // namespace
}  // namespace kvstash
