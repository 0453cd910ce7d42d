// The engine with the tiered KV store behind its pool: chunks computed by one engine are loaded by
// another (a new process, a restarted server) instead of being prefilled, and the output with a
// hit from any tier is token-for-token the output without any cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/tiered_store.h"
#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

class EngineStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::test_model_path("tiny-llama", gguf::TensorType::kF16));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() { delete model_; }

  void SetUp() override {
    dir_ = std::filesystem::path(KVSTASH_BINARY_DIR) / "engine-store-test" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
  }

  // A load these tests expect to hit must not be given up because a loaded (sanitizer, CI) machine
  // is slow: a deadline (the default is 2 s) is exercised by LoadPastItsDeadline only.
  static std::unique_ptr<Engine> make_engine(cache::TieredStore* store, bool prefix_cache = true,
                                             std::chrono::milliseconds load_timeout = std::chrono::minutes(10),
                                             std::size_t max_prefetched_bytes = std::size_t{1} << 30) {
    EngineOptions o;
    o.max_prefetched_bytes = max_prefetched_bytes;
    o.n_ctx = 1024;
    o.n_threads = 2;
    o.kv_store = store;
    o.chunk_tokens = 64;
    o.prefix_cache = prefix_cache;
    o.store_load_timeout = load_timeout;
    auto e = Engine::create(*model_, o);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return std::move(e.value());
  }
  // A get slower than the store's 500 ms tier_timeout skips its tier for the rest of the load (a
  // shorter hit); no test here exercises that, so a descheduled get must not change what loads.
  static cache::TieredStoreOptions patient_store() {
    cache::TieredStoreOptions o;
    o.tier_timeout = std::chrono::minutes(10);
    return o;
  }
  static std::unique_ptr<cache::TieredStore> memory_store() {
    std::vector<std::unique_ptr<cache::Tier>> tiers;
    tiers.push_back(std::make_unique<cache::MemoryTier>(64 << 20));
    return std::make_unique<cache::TieredStore>(std::move(tiers), patient_store());
  }
  std::unique_ptr<cache::TieredStore> disk_store() {
    std::vector<std::unique_ptr<cache::Tier>> tiers;
    auto disk = cache::DiskTier::open({.dir = dir_.string(), .capacity_bytes = 64 << 20});
    EXPECT_TRUE(disk.has_value()) << disk.status().to_string();
    tiers.push_back(std::move(disk.value()));
    return std::make_unique<cache::TieredStore>(std::move(tiers), patient_store());
  }
  static GenerationRequest request(int n_prompt, int salt) {
    GenerationRequest r;
    for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(static_cast<TokenId>((i * 37 + salt * 101 + 1) % model_->config().n_vocab));
    r.max_tokens = 12;
    r.stop_at_end_of_generation = false;
    return r;
  }
  static std::vector<TokenId> uncached(const GenerationRequest& r) {
    auto engine = make_engine(nullptr, false);
    return generate(*engine, r)->tokens;
  }

  static Model* model_;
  std::filesystem::path dir_;
};
Model* EngineStoreTest::model_ = nullptr;

TEST_F(EngineStoreTest, SecondEngineLoadsChunksFromMemoryTierInsteadOfPrefilling) {
  auto store_ptr = memory_store();
  cache::TieredStore& store = *store_ptr;
  auto req = request(200, 1);  // 3 full chunks of 64
  const auto expected = uncached(req);
  {
    auto a = make_engine(&store);
    auto r = generate(*a, req);
    EXPECT_EQ(r->cached_tokens, 0);
    EXPECT_EQ(r->tokens, expected);
    EXPECT_GE(a->stats().chunks_stored, 3);
  }
  store.flush();
  auto b = make_engine(&store);  // an empty pool: only the store can serve the prefix
  auto r = generate(*b, req);
  EXPECT_EQ(r->cached_tokens, 192);
  EXPECT_EQ(b->stats().prompt_tokens_from_store, 192);
  EXPECT_EQ(r->tokens, expected) << "a store hit must give exactly the uncached output";
}

// The KV held for queued requests is bounded in bytes: a finished load that would pass the bound
// is dropped, and the request recomputes with the same output.
TEST_F(EngineStoreTest, LoadPastTheByteBoundIsDroppedAndRecomputed) {
  auto store_ptr = memory_store();
  cache::TieredStore& store = *store_ptr;
  auto req = request(200, 3);
  const auto expected = uncached(req);
  {
    auto a = make_engine(&store);
    generate(*a, req);
  }
  store.flush();
  auto b = make_engine(&store, true, std::chrono::minutes(10), /*max_prefetched_bytes=*/1);
  auto r = generate(*b, req);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cached_tokens, 0);
  EXPECT_EQ(r->tokens, expected);
  EXPECT_EQ(b->stats().store_loads_dropped, 1);
  EXPECT_EQ(b->stats().prompt_tokens_from_store, 0);
}

// A prompt that ends exactly on a chunk boundary and is wholly in the store: the last chunk is
// loaded too, all of it but the block holding the last token (whose forward pass gives the first
// token's logits), so one block is computed instead of a whole chunk; and that chunk, which the
// store holds, is not stored again.
TEST_F(EngineStoreTest, ExactlyCachedPromptComputesOneBlockNotTheLastChunk) {
  auto store_ptr = memory_store();
  cache::TieredStore& store = *store_ptr;
  auto req = request(192, 7);  // exactly 3 chunks of 64
  const auto expected = uncached(req);
  {
    auto a = make_engine(&store);
    EXPECT_EQ(generate(*a, req)->tokens, expected);
    EXPECT_EQ(a->stats().chunks_stored, 3);
  }
  store.flush();
  auto b = make_engine(&store);
  auto r = generate(*b, req);
  const int block = 16;  // EngineOptions' default block size
  EXPECT_EQ(r->cached_tokens, 192 - block);
  EXPECT_EQ(b->stats().prompt_tokens_from_store, 192 - block);
  EXPECT_EQ(r->tokens, expected);
  store.flush();
  EXPECT_EQ(b->stats().chunks_stored, 0);
}

// Issue 10: a new question after the same document. The second prompt shares the first 180
// tokens of the first one, so its chunk 2 (tokens 128..191) is not the stored chunk 2; the store
// still serves that chunk's first 3 blocks (to 176) through its prefix aliases, from a restarted
// engine on the same disk: at most one block of the shared prefix is computed again, and the
// output is the uncached output.
TEST_F(EngineStoreTest, PromptSharingTheHeadOfAStoredChunkLoadsItsLeadingBlocks) {
  auto first = request(200, 8);
  auto second = first;
  second.prompt.resize(180);
  for (int i = 0; i < 30; ++i) second.prompt.push_back(static_cast<TokenId>((i * 53 + 7) % model_->config().n_vocab));
  const auto expected = uncached(second);
  {
    auto store = disk_store();
    auto a = make_engine(store.get());
    generate(*a, first);
    store->flush();
  }
  auto store = disk_store();
  auto b = make_engine(store.get());
  auto r = generate(*b, second);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cached_tokens, 176);  // chunks 0 and 1, then 3 of chunk 2's 4 blocks
  EXPECT_EQ(b->stats().prompt_tokens_from_store, 176);
  EXPECT_EQ(store->stats().aliases_followed, 1u);
  EXPECT_EQ(r->tokens, expected) << "a hit through a prefix alias must give exactly the uncached output";
}

TEST_F(EngineStoreTest, RestartedEngineServesFromDisk) {
  auto req = request(150, 2);
  const auto expected = uncached(req);
  {
    auto store = disk_store();
    auto a = make_engine(store.get());
    generate(*a, req);
    store->flush();
  }
  auto store = disk_store();  // a new process: index rebuilt from the directory
  auto b = make_engine(store.get());
  auto r = generate(*b, req);
  // 150 tokens: 2 full chunks of 64 and a stored tail of 1 block; only the last 6 tokens (the block
  // holding the last token) are computed.
  EXPECT_EQ(r->cached_tokens, 144);
  EXPECT_EQ(r->tokens, expected);
}

// Issue 10: a prompt's partial last chunk is stored too (at block granularity), and so is the KV of
// the generated tokens: the next turn of a conversation recomputes at most one block.
TEST_F(EngineStoreTest, PromptTailAndGeneratedTokensAreStoredAndReused) {
  auto store_ptr = memory_store();
  cache::TieredStore& store = *store_ptr;
  auto first = request(100, 8);  // 1 chunk of 64 + 36 tokens
  first.max_tokens = 40;
  std::vector<TokenId> answer;
  {
    auto a = make_engine(&store);
    answer = generate(*a, first)->tokens;
  }
  store.flush();
  auto next = first;  // the next turn: the prompt, the answer, a new question
  next.prompt.insert(next.prompt.end(), answer.begin(), answer.end());
  for (TokenId t : request(7, 9).prompt) next.prompt.push_back(t);
  next.max_tokens = 8;
  const auto expected = uncached(next);
  auto b = make_engine(&store);  // an empty pool: only the store can serve
  auto r = generate(*b, next);
  ASSERT_TRUE(r.has_value());
  // 100 + 40 tokens were computed before (the last answer token was not): 139 tokens = 8 full
  // blocks, all found: 64 from the chunk, 64 from the tail.
  EXPECT_EQ(r->cached_tokens, 128);
  EXPECT_EQ(r->tokens, expected);
}

TEST_F(EngineStoreTest, DamagedDiskChunkIsAMissNotWrongOutput) {
  auto req = request(150, 3);
  const auto expected = uncached(req);
  {
    auto store = disk_store();
    auto a = make_engine(store.get());
    generate(*a, req);
    store->flush();
  }
  // Flip a byte in the middle of every chunk file's payload.
  int damaged = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
    if (!e.is_regular_file()) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(e.file_size() / 2));
    f.put('\x5a' ^ static_cast<char>(e.file_size()));
    ++damaged;
  }
  ASSERT_GE(damaged, 2);
  auto store = disk_store();
  auto b = make_engine(store.get());
  auto r = generate(*b, req);
  EXPECT_EQ(r->cached_tokens, 0) << "a damaged chunk must never be served";
  EXPECT_EQ(r->tokens, expected);
  std::uint64_t rejected = 0;
  for (const auto& t : store->tier_stats()) rejected += t.stats.rejected_chunks;
  EXPECT_GE(rejected, 1u);
}

TEST_F(EngineStoreTest, SaltsNeverShareChunks) {
  auto store_ptr = memory_store();
  cache::TieredStore& store = *store_ptr;
  auto req = request(140, 4);
  req.cache_salt = "a";
  { auto e = make_engine(&store); generate(*e, req); }
  store.flush();
  req.cache_salt = "b";
  auto e = make_engine(&store);
  EXPECT_EQ(generate(*e, req)->cached_tokens, 0);
}

// A memory tier whose gets wait while the gate is closed: a store that is slow to load.
class SlowTier final : public cache::Tier {
 public:
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::atomic<int> gets_waiting{0};
  std::string name() const override { return "slow"; }
  std::size_t contains(std::span<const cache::ChunkKey> keys) override { return inner_.contains(keys); }
  Expected<cache::Bytes> get(const cache::ChunkKey& key) override {
    ++gets_waiting;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
    --gets_waiting;
    return inner_.get(key);
  }
  Status put(const cache::ChunkKey& key, std::span<const std::uint8_t> bytes) override { return inner_.put(key, bytes); }
  Status erase(const cache::ChunkKey& key) override { return inner_.erase(key); }
  cache::TierStats stats() const override { return inner_.stats(); }
  Expected<std::vector<cache::ChunkKey>> list_keys() override { return inner_.list_keys(); }
  Status clear() override { return inner_.clear(); }

 private:
  cache::MemoryTier inner_{64 << 20};
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

// Issue 10: a request whose KV loads from the store waits beside the batch, not in it: the running
// streams keep decoding while its load is stuck, and it joins with the loaded KV once it lands.
// Nothing here depends on how fast the machine is: the stream is long enough that it cannot end
// before the load is stuck (it is cancelled once the checks are done), and neither the tier nor
// the engine gives up on the load while the test holds it.
TEST_F(EngineStoreTest, LoadingRequestDoesNotStallTheRunningBatch) {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  auto slow_tier = std::make_unique<SlowTier>();
  SlowTier* slow = slow_tier.get();
  tiers.push_back(std::move(slow_tier));
  cache::TieredStoreOptions store_options;
  store_options.tier_timeout = std::chrono::seconds(600);
  store_options.load_threads = 0;
  cache::TieredStore store(std::move(tiers), store_options);
  auto cached = request(200, 5), stream = request(20, 6);
  stream.max_tokens = 1000;  // the whole context: n_ctx 1024
  const auto expected = uncached(cached);
  { auto a = make_engine(&store); generate(*a, cached); }
  store.flush();

  auto b = make_engine(&store);
  std::atomic<int> stream_tokens{0};
  std::atomic<bool> stream_done{false};
  FinishReason stream_finish = FinishReason::kNone;
  auto stream_id = b->submit(stream, [&](const TokenEvent& ev) {
    if (ev.token >= 0) ++stream_tokens;
    if (ev.finish != FinishReason::kNone) {
      stream_finish = ev.finish;
      stream_done = true;
    }
  });
  ASSERT_TRUE(stream_id.has_value()) << stream_id.status().to_string();
  while (stream_tokens < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  slow->close();
  Expected<GenerationResult> loaded = invalid_argument("not run");
  std::thread loader([&] { loaded = generate(*b, cached); });
  for (int i = 0; i < 30000 && slow->gets_waiting == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(slow->gets_waiting, 0) << "the load never started";
  const int before = stream_tokens;
  ASSERT_FALSE(stream_done) << "the stream ended before the load was stuck; the test proves nothing";
  for (int i = 0; i < 30000 && stream_tokens < before + 20 && !stream_done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(stream_tokens, before + 20) << "the running stream stopped while a load was stuck";
  EXPECT_EQ(b->stats().loading, 1);
  slow->open();
  loader.join();
  b->cancel(stream_id.value());
  while (!stream_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(stream_finish == FinishReason::kCancelled || stream_finish == FinishReason::kLength);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->cached_tokens, 192);
  EXPECT_EQ(loaded->tokens, expected);
  EXPECT_EQ(b->stats().store_loads_timed_out, 0);
}

// A load past its deadline is given up: the request recomputes, with the same output.
TEST_F(EngineStoreTest, LoadPastItsDeadlineRecomputesWithTheSameOutput) {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  auto slow_tier = std::make_unique<SlowTier>();
  SlowTier* slow = slow_tier.get();
  tiers.push_back(std::move(slow_tier));
  cache::TieredStoreOptions store_options;
  store_options.load_threads = 0;
  cache::TieredStore store(std::move(tiers), store_options);
  auto req = request(200, 7);
  const auto expected = uncached(req);
  { auto a = make_engine(&store); generate(*a, req); }
  store.flush();
  auto b = make_engine(&store, true, std::chrono::milliseconds(50));
  slow->close();
  auto r = generate(*b, req);
  slow->open();  // lets the abandoned load finish, so the engine can shut down
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cached_tokens, 0);
  EXPECT_EQ(r->tokens, expected);
  EXPECT_EQ(b->stats().store_loads_timed_out, 1);
}

// Trust flows downhill (issue 31): chunks loaded with unchecked provenance taint the sequence; its
// answer is reported unchecked and every chunk it computes on them is stored unchecked, naming the
// producer; KV computed from trusted KV only is stored as computed here.
TEST_F(EngineStoreTest, KvComputedOnUncheckedKvIsUncheckedAndSaysSo) {
  auto store = memory_store();
  cache::Tier& memory = store->tier(0);
  auto chunks_at = [&](std::uint32_t first_position) {
    std::vector<cache::ChunkHeader> out;
    const auto keys = memory.list_keys();
    for (const auto& key : *keys) {
      auto bytes = memory.get(key);
      auto header = bytes ? cache::verify_chunk(*bytes) : Expected<cache::ChunkHeader>(not_found(""));
      if (header && header->meta.kv_format != cache::kAliasKvFormat && header->meta.first_position == first_position &&
          header->meta.token_count == 64) {
        out.push_back(*header);
      }
    }
    return out;
  };
  const GenerationRequest first = request(200, 5);
  {
    auto engine = make_engine(store.get());
    auto r = generate(*engine, first);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(r->unchecked);
  }
  store->flush();
  ASSERT_EQ(chunks_at(64).size(), 1u);
  EXPECT_EQ(chunks_at(64)[0].meta.provenance.trust, cache::ChunkTrust::kComputed);

  // Chunks 0 and 1 now read as an unknown producer's, taken unchecked.
  cache::Provenance theirs;
  theirs.trust = cache::ChunkTrust::kUnchecked;
  theirs.producers = {cache::ProducerKey{}};
  theirs.producers[0][0] = 0x77;
  for (std::uint32_t at : {0u, 64u}) {
    const cache::ChunkKey key = chunks_at(at).at(0).meta.key;
    auto rewritten = cache::with_provenance(*memory.get(key), theirs);
    ASSERT_TRUE(rewritten.has_value());
    ASSERT_TRUE(memory.put(key, *rewritten));
  }

  const GenerationRequest longer = request(300, 5);  // the same 200 tokens, then chunk 3 and more
  auto engine = make_engine(store.get());
  auto r = generate(*engine, longer);
  ASSERT_TRUE(r.has_value());
  EXPECT_GE(r->cached_tokens, 192);
  EXPECT_TRUE(r->unchecked);
  EXPECT_EQ(r->tokens, uncached(longer));  // unchecked is a trust state; these floats are right
  store->flush();
  const auto derived = chunks_at(192);
  ASSERT_EQ(derived.size(), 1u);
  EXPECT_EQ(derived[0].meta.provenance.trust, cache::ChunkTrust::kUnchecked);
  EXPECT_EQ(derived[0].meta.provenance.producers, theirs.producers);

  // The pool's blocks keep the taint: the same prompt again, from the pool alone, is unchecked.
  auto again = generate(*engine, first);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->unchecked);
}

// Prompt caching: a request's pin keeps its prompt's KV in the memory tier through churn that
// evicts an unpinned prompt stored just after it, and a new engine still loads it whole, with the
// uncached output. The tier holds about four prompts; ten others pass through it.
TEST_F(EngineStoreTest, PinnedPromptSurvivesChurnThatEvictsAnUnpinnedOne) {
  std::uint64_t prompt_bytes = 0;
  {
    auto probe = memory_store();
    {
      auto e = make_engine(probe.get());
      generate(*e, request(200, 40));
    }
    probe->flush();
    prompt_bytes = probe->tier(0).stats().bytes_used;
    ASSERT_GT(prompt_bytes, 0u);
  }
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(4 * prompt_bytes));
  cache::TieredStore store(std::move(tiers), patient_store());
  auto pinned = request(200, 1), unpinned = request(200, 2);
  pinned.pins.push_back({200, std::chrono::minutes(5)});
  const auto expected_pinned = uncached(pinned), expected_unpinned = uncached(unpinned);
  {
    auto a = make_engine(&store);
    EXPECT_EQ(generate(*a, pinned)->tokens, expected_pinned);
    EXPECT_EQ(generate(*a, unpinned)->tokens, expected_unpinned);
    EXPECT_GE(a->stats().pinned_keys, 3);
    for (int salt = 10; salt < 20; ++salt) generate(*a, request(200, salt));
  }
  store.flush();
  EXPECT_GE(store.tier(0).stats().pinned_entries, 3u);
  EXPECT_GT(store.tier(0).stats().evictions, 0u);
  auto b = make_engine(&store);  // an empty pool: only the store can serve a prefix
  auto r = generate(*b, pinned);
  EXPECT_EQ(r->cached_tokens, 192) << "the pinned prompt was evicted";
  EXPECT_EQ(r->tokens, expected_pinned);
  auto u = generate(*b, unpinned);
  EXPECT_EQ(u->cached_tokens, 0) << "the churn did not evict the unpinned prompt: the test proves nothing";
  EXPECT_EQ(u->tokens, expected_unpinned);
}

// The same in the engine's own pool, with no store at all: a pool that holds about four prompts,
// a pinned one and an unpinned one, then ten others through it. The pinned prompt is still a
// whole pool hit, the unpinned one was evicted, and both outputs are the uncached ones.
TEST_F(EngineStoreTest, PinnedPromptSurvivesChurnInThePoolWithoutAStore) {
  EngineOptions o;
  o.n_ctx = 1024;
  o.n_threads = 2;
  o.max_running = 1;
  o.kv_pool_tokens = 1024 + 5 * 16;  // the minimum (n_ctx + a block) and a little
  auto e = Engine::create(*model_, o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  Engine& engine = **e;
  auto pinned = request(200, 1), unpinned = request(200, 2);
  pinned.pins.push_back({200, std::chrono::minutes(5)});
  const auto expected_pinned = uncached(pinned), expected_unpinned = uncached(unpinned);
  EXPECT_EQ(generate(engine, pinned)->tokens, expected_pinned);
  EXPECT_EQ(generate(engine, unpinned)->tokens, expected_unpinned);
  for (int salt = 10; salt < 20; ++salt) generate(engine, request(200, salt));
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.kv_blocks_pinned_keys, 12) << "200 tokens: 12 whole blocks";
  EXPECT_EQ(stats.pool_pinned_evictions, 0);
  auto r = generate(engine, pinned);
  EXPECT_EQ(r->cached_tokens, 192) << "the pinned prompt was evicted from the pool";
  EXPECT_EQ(r->tokens, expected_pinned);
  auto u = generate(engine, unpinned);
  EXPECT_EQ(u->cached_tokens, 0) << "the churn did not evict the unpinned prompt: the test proves nothing";
  EXPECT_EQ(u->tokens, expected_unpinned);
}

}  // namespace
}  // namespace kvstash
