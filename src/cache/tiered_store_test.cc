#include "cache/tiered_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <future>
#include <thread>

#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/test_util.h"

namespace kvstash::cache {
namespace {

using namespace kvstash::cache::testing;

// A memory tier whose puts wait until opened, whose gets can be held, or made to fail as if down.
class GatedTier final : public Tier {
 public:
  explicit GatedTier(std::string name) : name_(std::move(name)), inner_(1 << 30) {}
  void close_gate() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void open_gate() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::atomic<bool> down{false};       // holds nothing, gets fail
  std::atomic<bool> gets_fail{false};  // claims its keys, but every get fails as if it went down
  std::atomic<int> gets{0};
  std::atomic<int> holds_calls{0};
  // Held gets wait until released (at most 60 s, then they fail: a bound, so a store that waits on
  // them fails its test instead of hanging it).
  void hold_gets() {
    std::lock_guard lock(mu_);
    gets_held_ = true;
  }
  void release_gets() {
    std::lock_guard lock(mu_);
    gets_held_ = false;
    cv_.notify_all();
  }

  std::string name() const override { return name_; }
  bool remote() const override { return remote_; }
  bool remote_ = false;  // plays a peers tier (Tier::remote())
  std::size_t contains(std::span<const ChunkKey> keys) override { return down ? 0 : inner_.contains(keys); }
  std::vector<bool> holds(std::span<const ChunkKey> keys) override {
    ++holds_calls;
    return down ? std::vector<bool>(keys.size(), false) : inner_.holds(keys);
  }
  Expected<Bytes> get(const ChunkKey& key) override {
    ++gets;
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(60), [this] { return !gets_held_; })) return unavailable(name_ + " held");
    }
    if (down || gets_fail) return unavailable(name_ + " down");
    return inner_.get(key);
  }
  Status put(const ChunkKey& key, std::span<const std::uint8_t> bytes) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
    return inner_.put(key, bytes);
  }
  Status erase(const ChunkKey& key) override { return inner_.erase(key); }
  TierStats stats() const override { return inner_.stats(); }
  Expected<std::vector<ChunkKey>> list_keys() override { return inner_.list_keys(); }
  Status clear() override { return inner_.clear(); }
  MemoryTier& inner() { return inner_; }

 private:
  std::string name_;
  MemoryTier inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  bool gets_held_ = false;
};

// A prefix of n chunks under namespace ns: its metas, keys derived by the real key chain.
std::vector<ChunkMeta> prefix_metas(int n, const std::string& ns = "") {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n) * 16);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 5 + 1);
  auto keys = chunk_keys(test_model(), "f16-test-v1", ns, tokens, 16);
  std::vector<ChunkMeta> metas;
  for (int i = 0; i < n; ++i) metas.push_back(test_meta(keys[i], static_cast<std::uint32_t>(16 * i)));
  return metas;
}

// A get slower than tier_timeout (500 ms by default) skips its tier for the rest of the load: on a
// loaded machine (sanitizers, CI) a descheduled get would shorten a run these tests count. Only
// tests that mean to exercise it use the default.
TieredStoreOptions patient(TieredStoreOptions options = {}) {
  options.tier_timeout = std::chrono::minutes(10);
  return options;
}

struct Stack {
  MemoryTier* memory;
  GatedTier* mid;
  GatedTier* slow;
  std::unique_ptr<TieredStore> store;
};

// slow_is_remote: the slow tier plays a peers tier (Tier::remote()).
Stack make_stack(TieredStoreOptions options = patient(), bool slow_is_remote = false) {
  auto memory = std::make_unique<MemoryTier>(1 << 24);
  auto mid = std::make_unique<GatedTier>("mid");
  auto slow = std::make_unique<GatedTier>("slow");
  slow->remote_ = slow_is_remote;
  Stack s{memory.get(), mid.get(), slow.get(), nullptr};
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(memory));
  tiers.push_back(std::move(mid));
  tiers.push_back(std::move(slow));
  s.store = std::make_unique<TieredStore>(std::move(tiers), options);
  return s;
}

TEST(TieredStore, StoreWritesEveryTierAndLoadsBack) {
  Stack s = make_stack();
  auto metas = prefix_metas(3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.store->store(metas[i], test_payload(500, i)).is_ok());
  s.store->flush();
  for (const auto& m : metas) {
    EXPECT_TRUE(s.memory->get(m.key).has_value());
    EXPECT_TRUE(s.mid->inner().get(m.key).has_value());
    EXPECT_TRUE(s.slow->inner().get(m.key).has_value());
  }
  auto loaded = s.store->load(metas);
  ASSERT_EQ(loaded.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(loaded[i].tier_index, 0u);
    EXPECT_EQ(Bytes(loaded[i].view.payload.begin(), loaded[i].view.payload.end()), test_payload(500, i));
  }
}

TEST(TieredStore, LongestContiguousRunAcrossTiersAndPromotion) {
  Stack s = make_stack();
  auto metas = prefix_metas(5);
  // chunk 0 in memory, 1 in slow, 2 in mid, 3 nowhere, 4 in memory (unreachable past the gap).
  ASSERT_TRUE(s.memory->put(metas[0].key, test_chunk(metas[0])).is_ok());
  ASSERT_TRUE(s.slow->inner().put(metas[1].key, test_chunk(metas[1])).is_ok());
  ASSERT_TRUE(s.mid->inner().put(metas[2].key, test_chunk(metas[2])).is_ok());
  ASSERT_TRUE(s.memory->put(metas[4].key, test_chunk(metas[4])).is_ok());
  std::vector<ChunkKey> keys;
  for (const auto& m : metas) keys.push_back(m.key);
  EXPECT_EQ(s.store->lookup(keys), 3u);
  auto loaded = s.store->load(metas);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].tier_index, 0u);
  EXPECT_EQ(loaded[1].tier_index, 2u);
  EXPECT_EQ(loaded[2].tier_index, 1u);
  s.store->flush();
  // Promoted: chunk 1 into memory and mid, chunk 2 into memory; nothing pushed down.
  EXPECT_TRUE(s.memory->get(metas[1].key).has_value());
  EXPECT_TRUE(s.mid->inner().get(metas[1].key).has_value());
  EXPECT_TRUE(s.memory->get(metas[2].key).has_value());
  EXPECT_FALSE(s.slow->inner().get(metas[2].key).has_value());
  auto again = s.store->load(metas);
  ASSERT_EQ(again.size(), 3u);
  for (const auto& c : again) EXPECT_EQ(c.tier_index, 0u);
}

TEST(TieredStore, CorruptChunkInSlowTierErasedCountedNotReturned) {
  Stack s = make_stack();
  auto metas = prefix_metas(2);
  ASSERT_TRUE(s.memory->put(metas[0].key, test_chunk(metas[0])).is_ok());
  Bytes bad = test_chunk(metas[1]);
  bad[bad.size() - 3] ^= 0x40;
  ASSERT_TRUE(s.slow->inner().put(metas[1].key, bad).is_ok());
  auto loaded = s.store->load(metas);
  EXPECT_EQ(loaded.size(), 1u);
  EXPECT_FALSE(s.slow->inner().get(metas[1].key).has_value());  // erased
  EXPECT_FALSE(s.memory->get(metas[1].key).has_value());        // not promoted
  EXPECT_EQ(s.store->tier_stats()[2].stats.rejected_chunks, 1u);
  EXPECT_EQ(s.store->stats().chunks_rejected, 1u);
}

TEST(TieredStore, WrongModelOrFormatOnDiskIsAMissAndRemoved) {
  ScratchDir dir;
  auto disk = DiskTier::open({.dir = dir.path()});
  ASSERT_TRUE(disk.has_value());
  DiskTier* disk_ptr = disk->get();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<MemoryTier>(1 << 20));
  tiers.push_back(std::move(*disk));
  TieredStore store(std::move(tiers));
  auto metas = prefix_metas(2);
  ChunkMeta other_model = metas[0];
  other_model.model_fingerprint = test_model(9);
  ChunkMeta other_format = metas[1];
  other_format.kv_format = "q8-test-v1";
  ASSERT_TRUE(disk_ptr->put(metas[0].key, test_chunk(other_model)).is_ok());
  ASSERT_TRUE(disk_ptr->put(metas[1].key, test_chunk(other_format)).is_ok());
  EXPECT_TRUE(store.load(metas).empty());
  EXPECT_EQ(disk_ptr->contains(std::vector<ChunkKey>{metas[0].key}), 0u);
  std::vector<ChunkMeta> second(metas.begin() + 1, metas.end());
  EXPECT_TRUE(store.load(second).empty());
  EXPECT_EQ(disk_ptr->stats().entries, 0u);
  EXPECT_EQ(store.tier_stats()[1].stats.rejected_chunks, 2u);
}

TEST(TieredStore, FullWriteQueueDropsInsteadOfBlocking) {
  TieredStoreOptions options = patient();
  options.write_queue_bytes = 4096;
  Stack s = make_stack(options);
  s.mid->close_gate();  // the writer blocks on its first write to mid
  auto metas = prefix_metas(20);
  for (const auto& m : metas) ASSERT_TRUE(s.store->store(m, test_payload(1000, 0)).is_ok());
  // Every store returned while mid's writer is stuck: its queue overflowed and dropped.
  StoreStats st = s.store->stats();
  EXPECT_GT(st.writes_dropped, 0u);
  EXPECT_LE(st.queue_bytes, 3 * options.write_queue_bytes);  // one bound per tier
  // Tier 0 has its own writer: it is written while mid is stuck (bounded wait: 60 s).
  bool memory_written = false;
  for (int i = 0; i < 6000 && !memory_written; ++i) {
    memory_written = s.memory->stats().entries > 0 && s.store->stats().queue_bytes <= 2 * options.write_queue_bytes;
    if (!memory_written) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(memory_written);
  s.mid->open_gate();
  s.store->flush();
  EXPECT_EQ(s.store->stats().queue_bytes, 0u);
}

TEST(TieredStore, FailingTierSkippedForTheRequest) {
  Stack s = make_stack();
  auto metas = prefix_metas(3);
  for (const auto& m : metas) ASSERT_TRUE(s.slow->inner().put(m.key, test_chunk(m)).is_ok());
  // mid claims every chunk (so the plan sends the gets there) but fails them all.
  for (const auto& m : metas) ASSERT_TRUE(s.mid->inner().put(m.key, test_chunk(m)).is_ok());
  s.mid->gets_fail = true;
  TieredStoreOptions one_at_a_time = patient();
  one_at_a_time.load_threads = 0;  // no read-ahead: exactly one get reaches mid before the skip
  Stack t = make_stack(one_at_a_time);
  for (const auto& m : metas) ASSERT_TRUE(t.slow->inner().put(m.key, test_chunk(m)).is_ok());
  for (const auto& m : metas) ASSERT_TRUE(t.mid->inner().put(m.key, test_chunk(m)).is_ok());
  t.mid->gets_fail = true;
  auto loaded = t.store->load(metas);
  EXPECT_EQ(loaded.size(), 3u);
  for (const auto& c : loaded) EXPECT_EQ(c.tier_index, 2u);
  EXPECT_EQ(t.mid->gets, 1);  // asked once, then skipped
  EXPECT_EQ(t.store->stats().tier_skips, 1u);
  // With gets read ahead, more than one may have reached mid; it is still skipped, and the run
  // still comes whole from slow.
  loaded = s.store->load(metas);
  EXPECT_EQ(loaded.size(), 3u);
  EXPECT_EQ(s.store->stats().tier_skips, 1u);
}

TEST(TieredStore, NamespacesNeverSeeEachOther) {
  Stack s = make_stack();
  auto a = prefix_metas(2, "tenant-a");
  auto b = prefix_metas(2, "tenant-b");
  for (const auto& m : a) ASSERT_TRUE(s.store->store(m, test_payload(100, 1)).is_ok());
  s.store->flush();
  EXPECT_EQ(s.store->load(a).size(), 2u);
  EXPECT_TRUE(s.store->load(b).empty());
  std::vector<ChunkKey> keys_b = {b[0].key, b[1].key};
  EXPECT_EQ(s.store->lookup(keys_b), 0u);
  for (int i = 0; i < 2; ++i) EXPECT_NE(a[i].key, b[i].key);
}

// A memory tier that records how many gets run at once. With wait_for_company, the first get waits
// (up to 60 s, so a store that reads one chunk at a time fails the test instead of hanging) until a
// second get has started.
class ConcurrencyTier final : public Tier {
 public:
  explicit ConcurrencyTier(bool wait_for_company) : wait_for_company_(wait_for_company), inner_(1 << 30) {}
  std::string name() const override { return "counting"; }
  std::size_t contains(std::span<const ChunkKey> keys) override { return inner_.contains(keys); }
  Expected<Bytes> get(const ChunkKey& key) override {
    {
      std::unique_lock lock(mu_);
      ++in_flight_;
      ++started_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      cv_.notify_all();
      if (wait_for_company_ && started_ == 1) {
        cv_.wait_for(lock, std::chrono::seconds(60), [this] { return started_ >= 2; });
      }
    }
    auto bytes = inner_.get(key);
    std::lock_guard lock(mu_);
    --in_flight_;
    return bytes;
  }
  Status put(const ChunkKey& key, std::span<const std::uint8_t> bytes) override { return inner_.put(key, bytes); }
  Status erase(const ChunkKey& key) override { return inner_.erase(key); }
  TierStats stats() const override { return inner_.stats(); }
  Expected<std::vector<ChunkKey>> list_keys() override { return inner_.list_keys(); }
  Status clear() override { return inner_.clear(); }
  int max_in_flight() {
    std::lock_guard lock(mu_);
    return max_in_flight_;
  }

 private:
  const bool wait_for_company_;
  MemoryTier inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0, started_ = 0, max_in_flight_ = 0;  // guarded by mu_
};

TEST(TieredStore, LoadKeepsSeveralGetsInFlightAndOneWhenToldTo) {
  for (std::size_t threads : {std::size_t{4}, std::size_t{0}}) {
    auto counting = std::make_unique<ConcurrencyTier>(/*wait_for_company=*/threads > 0);
    ConcurrencyTier* counting_ptr = counting.get();
    auto metas = prefix_metas(8);
    for (const auto& m : metas) ASSERT_TRUE(counting->put(m.key, test_chunk(m)).is_ok());
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(std::make_unique<MemoryTier>(1 << 24));
    tiers.push_back(std::move(counting));
    TieredStoreOptions options = patient();  // the first get waits for the second to start
    options.load_threads = threads;
    TieredStore store(std::move(tiers), options);
    auto loaded = store.load(metas);
    EXPECT_EQ(loaded.size(), 8u) << threads;
    if (threads > 0) {
      EXPECT_GE(counting_ptr->max_in_flight(), 2);
    } else {
      EXPECT_EQ(counting_ptr->max_in_flight(), 1);
    }
  }
}

// A memory tier in front of a disk tier holding n chunks of distinct 4 KiB payloads.
struct DiskStack {
  ScratchDir dir;
  MemoryTier* memory = nullptr;
  DiskTier* disk = nullptr;
  std::unique_ptr<TieredStore> store;
  std::vector<ChunkMeta> metas;
};

constexpr std::size_t kDiskPayload = 4096;

std::unique_ptr<DiskStack> make_disk_stack(int n) {
  auto s = std::make_unique<DiskStack>();
  auto disk = DiskTier::open({.dir = s->dir.path()});
  EXPECT_TRUE(disk.has_value());
  s->disk = disk->get();
  auto memory = std::make_unique<MemoryTier>(1 << 26);
  s->memory = memory.get();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(memory));
  tiers.push_back(std::move(*disk));
  TieredStoreOptions options = patient();
  options.load_threads = 3;
  options.load_depth = 5;
  s->store = std::make_unique<TieredStore>(std::move(tiers), options);
  s->metas = prefix_metas(n);
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(s->disk->put(s->metas[i].key, test_chunk(s->metas[i], kDiskPayload, i)).is_ok());
  }
  return s;
}

TEST(TieredStore, ParallelDiskLoadReturnsExactlyTheStoredBytesInOrder) {
  auto s = make_disk_stack(40);
  auto loaded = s->store->load(s->metas);
  ASSERT_EQ(loaded.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(loaded[i].tier_index, 1u) << i;
    EXPECT_EQ(*loaded[i].bytes, test_chunk(s->metas[i], kDiskPayload, i)) << i;
    EXPECT_EQ(Bytes(loaded[i].view.payload.begin(), loaded[i].view.payload.end()), test_payload(kDiskPayload, i));
    EXPECT_EQ(loaded[i].view.header.meta.first_position, s->metas[i].first_position);
  }
  s->store->flush();
  for (const auto& m : s->metas) EXPECT_TRUE(s->memory->get(m.key).has_value());  // all promoted
}

TEST(TieredStore, ParallelDiskLoadStopsAtFirstMissingChunk) {
  auto s = make_disk_stack(20);
  ASSERT_TRUE(s->disk->erase(s->metas[7].key).is_ok());
  auto loaded = s->store->load(s->metas);
  ASSERT_EQ(loaded.size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(*loaded[i].bytes, test_chunk(s->metas[i], kDiskPayload, i));
  // Nothing past the gap is promoted, even what was read ahead of it (promotions are written
  // behind: flush first).
  s->store->flush();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s->memory->get(s->metas[i].key).has_value(), i < 7) << i;
  EXPECT_EQ(s->store->stats().chunks_loaded, 7u);
}

TEST(TieredStore, ParallelDiskLoadStopsAtFirstCorruptChunk) {
  auto s = make_disk_stack(20);
  // Chunk 5: another model's chunk, a whole file the disk tier serves and the store rejects.
  ChunkMeta other = s->metas[5];
  other.model_fingerprint = test_model(9);
  ASSERT_TRUE(s->disk->put(s->metas[5].key, test_chunk(other, kDiskPayload, 5)).is_ok());
  auto loaded = s->store->load(s->metas);
  ASSERT_EQ(loaded.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(*loaded[i].bytes, test_chunk(s->metas[i], kDiskPayload, i));
  EXPECT_EQ(s->disk->contains(std::vector<ChunkKey>{s->metas[5].key}), 0u);  // erased
  EXPECT_EQ(s->store->stats().chunks_rejected, 1u);
  EXPECT_EQ(s->store->tier_stats()[1].stats.rejected_chunks, 1u);
  s->store->flush();
  for (int i = 5; i < 20; ++i) EXPECT_FALSE(s->memory->get(s->metas[i].key).has_value()) << i;
  for (int i = 6; i < 20; ++i) {  // read ahead perhaps, but neither rejected nor removed
    EXPECT_EQ(s->disk->contains(std::vector<ChunkKey>{s->metas[i].key}), 1u) << i;
  }

  // Chunk 2 damaged in its file (one payload bit): the disk tier reports kCorrupt; the run ends.
  const std::string path = s->disk->path_of(s->metas[2].key);
  Bytes flipped = test_chunk(s->metas[2], kDiskPayload, 2);
  flipped[flipped.size() - 1] ^= 0x10;
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(flipped.data(), 1, flipped.size(), f), flipped.size());
    std::fclose(f);
  }
  ASSERT_TRUE(s->memory->clear().is_ok());
  auto again = s->store->load(s->metas);
  ASSERT_EQ(again.size(), 2u);
  s->store->flush();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(*again[i].bytes, test_chunk(s->metas[i], kDiskPayload, i));
  EXPECT_EQ(s->disk->contains(std::vector<ChunkKey>{s->metas[2].key}), 0u);
  EXPECT_FALSE(s->memory->get(s->metas[2].key).has_value());
}

// Issue 8: a prefix's head must outlive its tail in every tier, or eviction leaves chunks that can
// never be reached (loads stop at the first missing chunk). One tier of room for 4 chunks, a
// prefix of 4, then one more chunk: the prefix loses its last chunk, not its first.
std::size_t leading_after_one_more_chunk(TieredStore& store, const std::vector<ChunkMeta>& prefix) {
  auto other = prefix_metas(1, "someone-else");
  EXPECT_TRUE(store.store(other[0], test_payload(256, 9)).is_ok());
  store.flush();
  std::vector<ChunkKey> keys;
  for (const auto& m : prefix) keys.push_back(m.key);
  return store.lookup(keys);
}

std::uint64_t chunk_size() { return encode_chunk(prefix_metas(1)[0], test_payload(256, 0)).value().size(); }

TEST(TieredStore, StoredPrefixIsEvictedFromItsTailInMemory) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<MemoryTier>(4 * chunk_size()));
  TieredStore store(std::move(tiers));
  auto metas = prefix_metas(4);
  std::vector<ChunkKey> keys;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(store.store(metas[i], test_payload(256, i), keys).is_ok());
    keys.push_back(metas[i].key);
  }
  EXPECT_EQ(leading_after_one_more_chunk(store, metas), 3u);
}

TEST(TieredStore, LoadedPrefixIsEvictedFromItsTailInMemory) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<MemoryTier>(4 * chunk_size()));
  TieredStore store(std::move(tiers));
  auto metas = prefix_metas(4);
  // Stored without their predecessors (head oldest), then loaded: the load turns the order around.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(store.store(metas[i], test_payload(256, i)).is_ok());
  ASSERT_EQ(store.load(metas).size(), 4u);
  EXPECT_EQ(leading_after_one_more_chunk(store, metas), 3u);
}

TEST(TieredStore, StoredPrefixIsEvictedFromItsTailOnDiskAlsoAfterRestart) {
  const std::string dir = std::string(KVSTASH_BINARY_DIR) + "/tiered-store-test/tail-first";
  std::filesystem::remove_all(dir);
  auto metas = prefix_metas(4);
  {
    auto disk = DiskTier::open({.dir = dir, .capacity_bytes = 4 * chunk_size()});
    ASSERT_TRUE(disk.has_value());
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(std::move(disk.value()));
    TieredStore store(std::move(tiers));
    std::vector<ChunkKey> keys;
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(store.store(metas[i], test_payload(256, i), keys).is_ok());
      keys.push_back(metas[i].key);
    }
  }
  // A restart rebuilds the LRU order from the files' mtimes.
  auto disk = DiskTier::open({.dir = dir, .capacity_bytes = 4 * chunk_size()});
  ASSERT_TRUE(disk.has_value());
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(disk.value()));
  TieredStore store(std::move(tiers));
  EXPECT_EQ(leading_after_one_more_chunk(store, metas), 3u);
}

// Issue 10: one plan per request. Each tier is asked once for the whole prefix, and a load given
// the plan asks no tier again.
TEST(TieredStore, PlanAsksEachTierOnceAndLoadDoesNotPlanAgain) {
  Stack s = make_stack();
  auto metas = prefix_metas(6);
  // chunks 0, 1 in memory; 2, 3 in mid; 4 in slow; 5 nowhere.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(s.memory->put(metas[i].key, test_chunk(metas[i])).is_ok());
  for (int i = 2; i < 4; ++i) ASSERT_TRUE(s.mid->inner().put(metas[i].key, test_chunk(metas[i])).is_ok());
  ASSERT_TRUE(s.slow->inner().put(metas[4].key, test_chunk(metas[4])).is_ok());
  std::vector<ChunkKey> keys;
  for (const auto& m : metas) keys.push_back(m.key);
  LoadPlan plan = s.store->plan_load(keys);
  ASSERT_EQ(plan.size(), 5u);
  EXPECT_EQ(plan.full_chunks, 5u);
  EXPECT_EQ(plan.tiers, (std::vector<std::size_t>{0, 0, 1, 1, 2}));
  EXPECT_FALSE(plan.tail.has_value());
  EXPECT_EQ(s.mid->holds_calls, 1);
  EXPECT_EQ(s.slow->holds_calls, 1);
  auto loaded = s.store->load(metas, plan);
  ASSERT_EQ(loaded.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(loaded[i].tier_index, plan.tiers[i]) << i;
  EXPECT_EQ(s.mid->holds_calls, 1);  // not planned again
  EXPECT_EQ(s.slow->holds_calls, 1);
  // A shorter expected list (the engine has room for fewer chunks) loads just those.
  std::vector<ChunkMeta> first_three(metas.begin(), metas.begin() + 3);
  EXPECT_EQ(s.store->load(first_three, plan).size(), 3u);
  // A plan for other keys loads nothing.
  auto other = prefix_metas(2, "someone-else");
  EXPECT_TRUE(s.store->load(other, plan).empty());
}

// The prompt's partial last chunk (tail) is found in the same round trips as the full chunks: the
// longest stored candidate wins, and only after a complete run of full chunks.
TEST(TieredStore, PlanFindsTheLongestStoredTail) {
  Stack s = make_stack();
  auto metas = prefix_metas(2);
  for (const auto& m : metas) ASSERT_TRUE(s.mid->inner().put(m.key, test_chunk(m)).is_ok());
  std::vector<ChunkMeta> tails;
  for (int i = 0; i < 3; ++i) tails.push_back(test_meta(test_key(900 + i), 32));
  ASSERT_TRUE(s.slow->inner().put(tails[0].key, test_chunk(tails[0])).is_ok());
  ASSERT_TRUE(s.slow->inner().put(tails[1].key, test_chunk(tails[1])).is_ok());
  std::vector<ChunkKey> keys = {metas[0].key, metas[1].key};
  std::vector<TailCandidate> candidates = {{tails[0].key, 2}, {tails[1].key, 2}, {tails[2].key, 2}};
  LoadPlan plan = s.store->plan_load(keys, candidates);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan.full_chunks, 2u);
  ASSERT_TRUE(plan.tail.has_value());
  EXPECT_EQ(*plan.tail, 1u);
  EXPECT_EQ(plan.keys.back(), tails[1].key);
  EXPECT_EQ(plan.tiers.back(), 2u);
  EXPECT_EQ(s.mid->holds_calls, 1);
  EXPECT_EQ(s.slow->holds_calls, 1);
  std::vector<ChunkMeta> expected = {metas[0], metas[1], tails[1]};
  auto loaded = s.store->load(expected, plan);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[2].view.header.meta.key, tails[1].key);
  // Chunk 1 gone from every tier (the load promoted it into memory: written behind, so flush
  // first): no tail (it would not follow the run).
  s.store->flush();
  ASSERT_TRUE(s.memory->erase(metas[1].key).is_ok());
  ASSERT_TRUE(s.mid->inner().erase(metas[1].key).is_ok());
  plan = s.store->plan_load(keys, candidates);
  EXPECT_EQ(plan.size(), 1u);
  EXPECT_FALSE(plan.tail.has_value());
}

// Prefix aliases: a chunk stored with the block-chain keys of its leading blocks can be loaded by
// a prompt that shares only those blocks. Here chunk 1 (4 blocks of 4 tokens) is stored; a prompt
// that diverges in its 4th block finds chunk 0 by key and chunk 1's first 3 blocks through the
// alias of block 3, planned where its own run of full chunks ends (at 1), in a second round.
TEST(TieredStore, PrefixAliasLoadsTheLeadingBlocksOfAStoredChunk) {
  Stack s = make_stack();
  auto metas = prefix_metas(2);
  const std::vector<ChunkKey> block_keys = {test_key(801), test_key(802), test_key(803)};
  ASSERT_TRUE(s.store->store(metas[0], test_payload(256, 0)).is_ok());
  ASSERT_TRUE(s.store->store(metas[1], test_payload(256, 1), std::vector<ChunkKey>{metas[0].key}, block_keys).is_ok());
  s.store->flush();
  for (const ChunkKey& k : block_keys) EXPECT_TRUE(s.memory->holds(std::vector<ChunkKey>{k})[0]);

  const ChunkKey other_chunk = test_key(899);  // the new prompt's chunk 1: not stored
  std::vector<ChunkKey> keys = {metas[0].key, other_chunk};
  std::vector<ChunkMeta> tails;
  std::vector<TailCandidate> candidates;
  for (int k = 1; k <= 3; ++k) {
    ChunkMeta t = metas[1];
    t.key = k < 3 ? block_keys[static_cast<std::size_t>(k - 1)] : test_key(850);  // block 3 diverges
    t.token_count = static_cast<std::uint32_t>(4 * k);
    tails.push_back(t);
    candidates.push_back({t.key, 1});
  }
  LoadPlan plan = s.store->plan_load(keys, candidates);
  ASSERT_EQ(plan.full_chunks, 1u);
  ASSERT_TRUE(plan.tail.has_value());
  EXPECT_EQ(*plan.tail, 1u);  // blocks 1..2 through the alias of block 2
  std::vector<ChunkMeta> expected = {metas[0], tails[1]};
  auto loaded = s.store->load(expected, plan);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_TRUE(loaded[1].via_alias);
  EXPECT_EQ(loaded[1].use_tokens, 8u);
  EXPECT_EQ(loaded[1].view.header.meta.key, metas[1].key);  // the chunk itself, whole and verified
  EXPECT_EQ(loaded[1].view.header.meta.token_count, 16u);
  EXPECT_EQ(std::vector<std::uint8_t>(loaded[1].view.payload.begin(), loaded[1].view.payload.end()), test_payload(256, 1));
  EXPECT_EQ(s.store->stats().aliases_followed, 1u);

  // Without the run's chunk 0 the tail would not follow anything: not planned.
  s.store->flush();
  ASSERT_TRUE(s.memory->erase(metas[0].key).is_ok());
  ASSERT_TRUE(s.mid->inner().erase(metas[0].key).is_ok());
  ASSERT_TRUE(s.slow->inner().erase(metas[0].key).is_ok());
  plan = s.store->plan_load(keys, candidates);
  EXPECT_TRUE(plan.empty());
}

// An alias whose chunk is gone is a miss (and is dropped), never an error or a wrong chunk; an
// alias never stands in for a different length than it was made for.
TEST(TieredStore, PrefixAliasWithoutItsChunkIsAMiss) {
  Stack s = make_stack();
  auto metas = prefix_metas(1);
  const std::vector<ChunkKey> block_keys = {test_key(811), test_key(812), test_key(813)};
  ASSERT_TRUE(s.store->store(metas[0], test_payload(256, 3), {}, block_keys).is_ok());
  s.store->flush();
  auto tail = [&](int k) {
    ChunkMeta t = metas[0];
    t.key = block_keys[static_cast<std::size_t>(k - 1)];
    t.token_count = static_cast<std::uint32_t>(4 * k);
    return t;
  };
  // Asked as a longer tail than the alias stands for (block 1's alias as 2 blocks): not served.
  ChunkMeta wrong = tail(1);
  wrong.token_count = 8;
  LoadPlan plan = s.store->plan_load({}, std::vector<TailCandidate>{{wrong.key, 0}});
  ASSERT_TRUE(plan.tail.has_value());
  EXPECT_TRUE(s.store->load(std::vector<ChunkMeta>{wrong}, plan).empty());
  // The right length is served.
  plan = s.store->plan_load({}, std::vector<TailCandidate>{{block_keys[1], 0}});
  auto loaded = s.store->load(std::vector<ChunkMeta>{tail(2)}, plan);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].use_tokens, 8u);
  // The chunk erased from every tier: the alias leads nowhere, the load finds nothing, and the
  // alias is dropped from the tiers that held it.
  s.store->flush();  // the load's promotions and touches
  ASSERT_TRUE(s.memory->erase(metas[0].key).is_ok());
  ASSERT_TRUE(s.mid->inner().erase(metas[0].key).is_ok());
  ASSERT_TRUE(s.slow->inner().erase(metas[0].key).is_ok());
  plan = s.store->plan_load({}, std::vector<TailCandidate>{{block_keys[2], 0}});
  ASSERT_TRUE(plan.tail.has_value());
  EXPECT_TRUE(s.store->load(std::vector<ChunkMeta>{tail(3)}, plan).empty());
  EXPECT_FALSE(s.memory->holds(std::vector<ChunkKey>{block_keys[2]})[0]);
  EXPECT_FALSE(s.mid->inner().holds(std::vector<ChunkKey>{block_keys[2]})[0]);
  EXPECT_EQ(s.store->stats().aliases_followed, 1u);
}

// The slow tier's gets are held (they cannot answer before the deadline however fast or slow the
// machine is) and released only after the load returned; the deadline leaves the memory chunk,
// which needs no held get, ample time however loaded the machine is.
TEST(TieredStore, LoadStopsAtItsDeadline) {
  Stack s = make_stack();
  auto metas = prefix_metas(3);
  ASSERT_TRUE(s.memory->put(metas[0].key, test_chunk(metas[0])).is_ok());
  for (int i = 1; i < 3; ++i) ASSERT_TRUE(s.slow->inner().put(metas[i].key, test_chunk(metas[i])).is_ok());
  s.slow->hold_gets();
  struct ReleaseAtExit {  // a failed ASSERT must not leave read-ahead gets held in the store's destructor
    GatedTier* tier;
    ~ReleaseAtExit() { tier->release_gets(); }
  } release_at_exit{s.slow};
  std::vector<ChunkKey> keys;
  for (const auto& m : metas) keys.push_back(m.key);
  LoadPlan plan = s.store->plan_load(keys);
  ASSERT_EQ(plan.size(), 3u);
  const auto start = std::chrono::steady_clock::now();
  auto loaded = s.store->load(metas, plan, start + std::chrono::seconds(1));
  const auto took = std::chrono::steady_clock::now() - start;
  s.slow->release_gets();
  EXPECT_EQ(loaded.size(), 1u);  // the memory chunk; the held ones missed the deadline
  // A load that waited for the held gets would return only when they give up (60 s).
  EXPECT_LT(took, std::chrono::seconds(30));
  EXPECT_EQ(s.store->stats().load_deadlines, 1u);
}

// Issue 10: no tier i/o on the caller's thread. Tier 0's puts block; store() still returns at
// once, and the chunks are found (from tier 0's queue) until the writer gets through.
TEST(TieredStore, StoreNeverWritesOnTheCallersThreadAndReadsItsOwnWrites) {
  auto gated = std::make_unique<GatedTier>("gated");
  GatedTier* gated_ptr = gated.get();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(gated));
  tiers.push_back(std::make_unique<MemoryTier>(1 << 20));
  TieredStore store(std::move(tiers));
  gated_ptr->close_gate();
  auto metas = prefix_metas(3);
  auto stored = std::async(std::launch::async, [&] {
    std::vector<ChunkKey> keys;
    for (int i = 0; i < 3; ++i) {
      if (!store.store(metas[i], test_payload(300, i), keys).is_ok()) return false;
      keys.push_back(metas[i].key);
    }
    return true;
  });
  // did not block (the gate stays closed: a store() that waited on it would never return)
  ASSERT_EQ(stored.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_TRUE(stored.get());
  std::vector<ChunkKey> keys;
  for (const auto& m : metas) keys.push_back(m.key);
  EXPECT_EQ(store.lookup(keys), 3u);
  auto loaded = store.load(metas);
  ASSERT_EQ(loaded.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(loaded[i].tier_index, 0u);
    EXPECT_EQ(Bytes(loaded[i].view.payload.begin(), loaded[i].view.payload.end()), test_payload(300, i));
  }
  EXPECT_EQ(gated_ptr->inner().stats().entries, 0u);  // not written yet
  gated_ptr->open_gate();
  store.flush();
  EXPECT_EQ(gated_ptr->inner().stats().entries, 3u);
  EXPECT_EQ(store.load(metas).size(), 3u);
}

// A chunk loaded from a slower tier is read back from tier 0's queue until tier 0's writer has put
// it, as a stored one is: the next load does not ask the slower tier again (a response record
// fetched from a peer was fetched a second time by the next request when the promotion's write
// lagged).
TEST(TieredStore, PromotedChunkIsReadFromTierZerosQueueBeforeItIsWritten) {
  auto front = std::make_unique<GatedTier>("front");
  auto slow = std::make_unique<GatedTier>("slow");
  GatedTier* front_ptr = front.get();
  GatedTier* slow_ptr = slow.get();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(front));
  tiers.push_back(std::move(slow));
  TieredStore store(std::move(tiers));
  auto metas = prefix_metas(2);
  for (const auto& m : metas) ASSERT_TRUE(slow_ptr->inner().put(m.key, test_chunk(m)).is_ok());
  front_ptr->close_gate();  // the promotions wait in tier 0's queue
  struct OpenAtExit {  // a failed ASSERT must not leave the writer blocked in the store's destructor
    GatedTier* tier;
    ~OpenAtExit() { tier->open_gate(); }
  } open_at_exit{front_ptr};

  auto first = store.load(metas);
  ASSERT_EQ(first.size(), 2u);
  for (const auto& c : first) EXPECT_EQ(c.tier_index, 1u);
  EXPECT_EQ(slow_ptr->gets.load(), 2);

  std::vector<ChunkKey> keys;
  for (const auto& m : metas) keys.push_back(m.key);
  const LoadPlan plan = store.plan_load(keys);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan.tiers, (std::vector<std::size_t>{0, 0}));
  auto again = store.load(metas, plan);
  ASSERT_EQ(again.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(again[i].tier_index, 0u);
    EXPECT_EQ(Bytes(again[i].view.payload.begin(), again[i].view.payload.end()),
              Bytes(first[i].view.payload.begin(), first[i].view.payload.end()));
  }
  EXPECT_EQ(slow_ptr->gets.load(), 2);  // not asked again
  EXPECT_EQ(front_ptr->inner().stats().entries, 0u);  // still not written
  // What a peer serving this node's tier 0 reads meanwhile (share/chunk_service.cc).
  for (int i = 0; i < 2; ++i) {
    const SharedBytes queued = store.queued(metas[i].key);
    ASSERT_TRUE(queued);
    EXPECT_EQ(*queued, *first[i].bytes);
  }

  front_ptr->open_gate();
  store.flush();
  EXPECT_FALSE(store.queued(metas[0].key));  // written: tier 0 serves it now
  EXPECT_EQ(front_ptr->inner().stats().entries, 2u);
  EXPECT_EQ(store.load(metas).size(), 2u);
  EXPECT_EQ(slow_ptr->gets.load(), 2);
}

}  // namespace
}  // namespace kvstash::cache

namespace kvstash::cache {
namespace {

// Issue 31: a remote tier (the peers) whose gets hang never delays a load from the local tiers,
// a local-only plan never asks it, and when its bounded queue is full a get of it is a miss at
// once, not a wait.
TEST(TieredStore, AStalledRemoteTierNeverDelaysLocalLoads) {
  TieredStoreOptions o = patient();
  o.remote_threads = 1;
  o.remote_queue = 1;
  o.remote_lane_threads = 1;
  o.remote_lane_queue = 0;
  Stack s = make_stack(o, /*slow_is_remote=*/true);
  auto local = prefix_metas(4, "local");
  auto remote = prefix_metas(4, "remote");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s.memory->put(local[i].key, test_chunk(local[i])).is_ok());
  for (const auto& m : remote) ASSERT_TRUE(s.slow->inner().put(m.key, test_chunk(m)).is_ok());
  s.slow->hold_gets();

  // Loads that wait on the remote tier: the first takes its one thread, the next its queue slot.
  const auto deadline = TieredStore::Clock::now() + std::chrono::seconds(20);
  std::vector<std::future<std::size_t>> stalled;
  for (int i = 0; i < 2; ++i) {
    stalled.push_back(std::async(std::launch::async, [&, i] {
      std::vector<ChunkMeta> one = {remote[static_cast<std::size_t>(i)]};
      return s.store->load(one, s.store->plan_load(std::vector<ChunkKey>{one[0].key}), deadline).size();
    }));
  }
  for (int i = 0; i < 500 && (s.slow->gets.load() < 1 || s.store->stats().remote_queued != 1); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(s.store->stats().remote_queued, 1u);

  // A local load meanwhile: whole, at once (the gets are held for 60 s).
  const auto start = TieredStore::Clock::now();
  EXPECT_EQ(s.store->load(local).size(), 4u);
  // A local-only plan never asks the remote tier.
  const int holds_before = s.slow->holds_calls.load();
  std::vector<ChunkKey> keys;
  for (const auto& m : remote) keys.push_back(m.key);
  EXPECT_TRUE(s.store->plan_load(keys, {}, PlanScope::kLocal).empty());
  EXPECT_EQ(s.slow->holds_calls.load(), holds_before);
  // The remote queue is full: a load planned on the remote tier is a miss at once.
  std::vector<ChunkMeta> third = {remote[2]};
  EXPECT_EQ(s.store->load(third, s.store->plan_load(std::vector<ChunkKey>{third[0].key}), deadline).size(), 0u);
  EXPECT_GE(s.store->stats().remote_dropped, 1u);
  // The remote lane has one thread and no queue: a second job is refused, not queued.
  std::promise<void> release_lane;
  auto lane_held = release_lane.get_future().share();
  std::atomic<int> ran{0};
  EXPECT_TRUE(s.store->run_remote([lane_held, &ran](bool run) {
    if (run) lane_held.wait();
    ++ran;
  }));
  for (int i = 0; i < 500 && s.store->stats().remote_queued > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the lane's thread took the job
  EXPECT_FALSE(s.store->run_remote([&ran](bool) { ++ran; }));
  EXPECT_EQ(s.store->stats().remote_lane_dropped, 1u);
  EXPECT_LT(std::chrono::duration<double>(TieredStore::Clock::now() - start).count(), 5.0);

  release_lane.set_value();
  s.slow->release_gets();
  for (auto& f : stalled) EXPECT_EQ(f.get(), 1u);  // the held gets do finish once released
  for (int i = 0; i < 500 && ran.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace kvstash::cache
