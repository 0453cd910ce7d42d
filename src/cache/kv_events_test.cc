#include "cache/kv_events.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/test_util.h"
#include "cache/tiered_store.h"

namespace kvstash::cache {
namespace {

ChunkKey key(int i) {
  ChunkKey k;
  k.bytes[0] = static_cast<std::uint8_t>(i);
  k.bytes[1] = static_cast<std::uint8_t>(i >> 8);
  return k;
}

TEST(KvEventLog, NumbersEventsAndDropsRepeats) {
  KvEventLog log;
  log.publish({true, KvSource::kPool, key(1)});
  log.publish({true, KvSource::kPool, key(1)});     // already held: no event
  log.publish({false, KvSource::kMemory, key(1)});  // not held there: no event
  log.publish({true, KvSource::kMemory, key(1)});
  log.publish({false, KvSource::kPool, key(1)});
  EXPECT_EQ(log.last_seq(), 3u);
  auto events = log.events_after(0, 100);
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].seq, 1u);
  EXPECT_TRUE((*events)[0].change.stored);
  EXPECT_EQ((*events)[1].change.source, KvSource::kMemory);
  EXPECT_FALSE((*events)[2].change.stored);
  KvSnapshot snap = log.snapshot();
  EXPECT_EQ(snap.seq, 3u);
  EXPECT_TRUE(snap.keys[static_cast<int>(KvSource::kPool)].empty());
  ASSERT_EQ(snap.keys[static_cast<int>(KvSource::kMemory)].size(), 1u);
  EXPECT_EQ(snap.keys[static_cast<int>(KvSource::kMemory)][0], key(1));
}

TEST(KvEventLog, ResumesInsideTheRingAndReportsAGapOutsideIt) {
  KvEventLog log({.retained = 4});
  for (int i = 0; i < 10; ++i) log.publish({true, KvSource::kPool, key(i)});
  EXPECT_EQ(log.last_seq(), 10u);
  auto recent = log.events_after(6, 100);  // 7..10 are retained
  ASSERT_TRUE(recent);
  ASSERT_EQ(recent->size(), 4u);
  EXPECT_EQ(recent->front().seq, 7u);
  EXPECT_EQ(recent->front().change.key, key(6));
  EXPECT_EQ(log.events_after(5, 100).status().code(), StatusCode::kNotFound);   // 6 is gone
  EXPECT_EQ(log.events_after(11, 100).status().code(), StatusCode::kNotFound);  // beyond: another epoch
  auto none = log.events_after(10, 100);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto capped = log.events_after(6, 2);
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->size(), 2u);
}

TEST(KvEventLog, SnapshotPlusLaterEventsReplaysTheState) {
  KvEventLog log({.retained = 1000});
  for (int i = 0; i < 20; ++i) log.publish({true, KvSource::kDisk, key(i)});
  KvSnapshot snap = log.snapshot();
  for (int i = 0; i < 10; ++i) log.publish({false, KvSource::kDisk, key(i)});
  for (int i = 20; i < 25; ++i) log.publish({true, KvSource::kDisk, key(i)});
  std::set<ChunkKey> replay(snap.keys[2].begin(), snap.keys[2].end());
  auto events = log.events_after(snap.seq, 1000);
  ASSERT_TRUE(events);
  for (const KvEvent& e : *events) {
    if (e.change.stored) {
      replay.insert(e.change.key);
    } else {
      replay.erase(e.change.key);
    }
  }
  KvSnapshot now = log.snapshot();
  EXPECT_EQ(replay, std::set<ChunkKey>(now.keys[2].begin(), now.keys[2].end()));
  EXPECT_EQ(replay.size(), 15u);
}

TEST(KvEventLog, WaitWakesOnPublishAndOnClose) {
  KvEventLog log;
  std::thread publisher([&] { log.publish({true, KvSource::kPool, key(1)}); });
  EXPECT_TRUE(log.wait_after(0, std::chrono::milliseconds(60000)));
  publisher.join();
  log.close();
  EXPECT_FALSE(log.wait_after(1, std::chrono::milliseconds(60000)));  // returns at once: closed
  EXPECT_NE(log.epoch(), KvEventLog().epoch());
}

TEST(KvEventLog, MemoryTierReportsPutsEvictionsAndErases) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<MemoryTier>(300));
  TieredStore store(std::move(tiers));
  const std::vector<std::uint8_t> bytes(100, 7);
  ASSERT_TRUE(store.tier(0).put(key(1), bytes));  // held before the log is attached
  KvEventLog log;
  attach_tier_events(store, log);
  EXPECT_EQ(log.snapshot().keys[static_cast<int>(KvSource::kMemory)].size(), 1u);
  ASSERT_TRUE(store.tier(0).put(key(2), bytes));
  ASSERT_TRUE(store.tier(0).put(key(3), bytes));
  ASSERT_TRUE(store.tier(0).put(key(4), bytes));  // evicts key(1), the least recently used
  ASSERT_TRUE(store.tier(0).erase(key(3)));
  auto events = log.events_after(1, 100);
  ASSERT_TRUE(events);
  std::vector<std::pair<bool, int>> seen;
  for (const KvEvent& e : *events) seen.emplace_back(e.change.stored, e.change.key.bytes[0]);
  const std::vector<std::pair<bool, int>> expected = {{true, 2}, {true, 3}, {false, 1}, {true, 4}, {false, 3}};
  EXPECT_EQ(seen, expected);
}

TEST(KvEventLog, DiskTierReportsWhatItFoundAtStartThenItsChanges) {
  testing::ScratchDir dir;
  const Bytes chunk1 = testing::test_chunk(testing::test_meta(testing::test_key(1)));
  const Bytes chunk2 = testing::test_chunk(testing::test_meta(testing::test_key(2)));
  {
    auto disk = DiskTier::open({.dir = dir.path()});
    ASSERT_TRUE(disk);
    ASSERT_TRUE((*disk)->put(testing::test_key(1), chunk1));
  }
  // A restart: the index is rebuilt from the files, and the log learns of them at attach.
  auto disk = DiskTier::open({.dir = dir.path(), .capacity_bytes = chunk1.size() + chunk2.size()});
  ASSERT_TRUE(disk);
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(*disk));
  TieredStore store(std::move(tiers));
  KvEventLog log;
  attach_tier_events(store, log);
  KvSnapshot snap = log.snapshot();
  ASSERT_EQ(snap.keys[static_cast<int>(KvSource::kDisk)].size(), 1u);
  EXPECT_EQ(snap.keys[static_cast<int>(KvSource::kDisk)][0], testing::test_key(1));
  ASSERT_TRUE(store.tier(0).put(testing::test_key(2), chunk2));
  ASSERT_TRUE(store.tier(0).erase(testing::test_key(1)));
  auto events = log.events_after(snap.seq, 10);
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 2u);
  EXPECT_TRUE((*events)[0].change.stored);
  EXPECT_EQ((*events)[0].change.key, testing::test_key(2));
  EXPECT_FALSE((*events)[1].change.stored);
  EXPECT_EQ((*events)[1].change.key, testing::test_key(1));
}

}  // namespace
}  // namespace kvstash::cache

namespace kvstash::cache {
namespace {

TEST(KvEventLog, TryPublishNeverWaitsForASubscriber) {
  KvEventLog log;
  ASSERT_TRUE(log.try_publish(std::vector<KvChange>{{true, KvSource::kPool, key(1)}}));
  EXPECT_EQ(log.last_seq(), 1u);
  // A subscriber inside wait_after() does not hold the lock while it waits. The waiter waits far
  // longer than the publisher tries (so a waiter holding the lock would fail the test), and the
  // publisher tries for seconds, not a fixed count of tries (a waiter descheduled for a moment
  // between taking the lock and waiting on it does not fail the test).
  std::thread waiter([&] { log.wait_after(1, std::chrono::milliseconds(120000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // most likely waiting by now (not relied on)
  bool published = false;
  for (int i = 0; i < 10000 && !published; ++i) {  // at most 10 s
    published = log.try_publish(std::vector<KvChange>{{true, KvSource::kPool, key(2)}});
    if (!published) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!published) log.close();  // wakes the waiter, so the failure is reported without a 2 min wait
  waiter.join();
  EXPECT_TRUE(published);
  EXPECT_EQ(log.last_seq(), 2u);
}

}  // namespace
}  // namespace kvstash::cache
