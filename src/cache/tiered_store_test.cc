#include "cache/tiered_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/test_util.h"

namespace kvstash::cache {
namespace {

using namespace kvstash::cache::testing;

// A memory tier whose puts wait until opened, and whose gets can be made to fail as if down.
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
  std::atomic<bool> down{false};
  std::atomic<int> gets{0};

  std::string name() const override { return name_; }
  std::size_t contains(std::span<const ChunkKey> keys) override { return down ? 0 : inner_.contains(keys); }
  Expected<Bytes> get(const ChunkKey& key) override {
    ++gets;
    if (down) return unavailable(name_ + " down");
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

struct Stack {
  MemoryTier* memory;
  GatedTier* mid;
  GatedTier* slow;
  std::unique_ptr<TieredStore> store;
};

Stack make_stack(TieredStoreOptions options = {}) {
  auto memory = std::make_unique<MemoryTier>(1 << 24);
  auto mid = std::make_unique<GatedTier>("mid");
  auto slow = std::make_unique<GatedTier>("slow");
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
  TieredStoreOptions options;
  options.write_queue_bytes = 4096;
  Stack s = make_stack(options);
  s.mid->close_gate();  // the writer blocks on its first write to mid
  auto metas = prefix_metas(20);
  for (const auto& m : metas) ASSERT_TRUE(s.store->store(m, test_payload(1000, 0)).is_ok());
  // Every store returned while the writer is stuck: the queue overflowed and dropped.
  StoreStats st = s.store->stats();
  EXPECT_GT(st.writes_dropped, 0u);
  EXPECT_LE(st.queue_bytes, options.write_queue_bytes);
  for (const auto& m : metas) EXPECT_TRUE(s.memory->get(m.key).has_value());  // tier 0 is synchronous
  s.mid->open_gate();
  s.store->flush();
  EXPECT_EQ(s.store->stats().queue_bytes, 0u);
}

TEST(TieredStore, FailingTierSkippedForTheRequest) {
  Stack s = make_stack();
  auto metas = prefix_metas(3);
  for (const auto& m : metas) ASSERT_TRUE(s.slow->inner().put(m.key, test_chunk(m)).is_ok());
  s.mid->down = true;
  auto loaded = s.store->load(metas);
  EXPECT_EQ(loaded.size(), 3u);
  EXPECT_EQ(s.mid->gets, 1);  // asked once, then skipped
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
// (up to 5 s, so a store that reads one chunk at a time fails the test instead of hanging) until a
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
        cv_.wait_for(lock, std::chrono::seconds(5), [this] { return started_ >= 2; });
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
    TieredStoreOptions options;
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
  TieredStoreOptions options;
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
    EXPECT_EQ(loaded[i].bytes, test_chunk(s->metas[i], kDiskPayload, i)) << i;
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
  for (int i = 0; i < 7; ++i) EXPECT_EQ(loaded[i].bytes, test_chunk(s->metas[i], kDiskPayload, i));
  // Nothing past the gap is promoted, even what was read ahead of it.
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
  for (int i = 0; i < 5; ++i) EXPECT_EQ(loaded[i].bytes, test_chunk(s->metas[i], kDiskPayload, i));
  EXPECT_EQ(s->disk->contains(std::vector<ChunkKey>{s->metas[5].key}), 0u);  // erased
  EXPECT_EQ(s->store->stats().chunks_rejected, 1u);
  EXPECT_EQ(s->store->tier_stats()[1].stats.rejected_chunks, 1u);
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
  for (int i = 0; i < 2; ++i) EXPECT_EQ(again[i].bytes, test_chunk(s->metas[i], kDiskPayload, i));
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

}  // namespace
}  // namespace kvstash::cache
