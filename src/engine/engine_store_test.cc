// The engine with the tiered KV store behind its pool: chunks computed by one engine are loaded by
// another (a new process, a restarted server) instead of being prefilled, and the output with a
// hit from any tier is token-for-token the output without any cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

  static std::unique_ptr<Engine> make_engine(cache::TieredStore* store, bool prefix_cache = true) {
    EngineOptions o;
    o.n_ctx = 1024;
    o.n_threads = 2;
    o.kv_store = store;
    o.chunk_tokens = 64;
    o.prefix_cache = prefix_cache;
    auto e = Engine::create(*model_, o);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return std::move(e.value());
  }
  std::unique_ptr<cache::TieredStore> disk_store() {
    std::vector<std::unique_ptr<cache::Tier>> tiers;
    auto disk = cache::DiskTier::open({.dir = dir_.string(), .capacity_bytes = 64 << 20});
    EXPECT_TRUE(disk.has_value()) << disk.status().to_string();
    tiers.push_back(std::move(disk.value()));
    return std::make_unique<cache::TieredStore>(std::move(tiers));
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
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(64 << 20));
  cache::TieredStore store(std::move(tiers));
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
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(64 << 20));
  cache::TieredStore store(std::move(tiers));
  auto req = request(140, 4);
  req.cache_salt = "a";
  { auto e = make_engine(&store); generate(*e, req); }
  store.flush();
  req.cache_salt = "b";
  auto e = make_engine(&store);
  EXPECT_EQ(generate(*e, req)->cached_tokens, 0);
}

}  // namespace
}  // namespace kvstash
