// The tiered KV store seen from outside, part 2: damaged chunks on disk and in redis, kill -9 of a
// server while it writes chunks, and cache_salt isolation in every tier. Real `kvstash serve` and
// redis-server processes, loopback only.
#include <set>

#include "cache/redis_tier.h"
#include "server/kv_store_e2e_fixture.h"

namespace kvstash::server::testing {
namespace {

// The same chunk as `bytes`, re-encoded as if another model had written it (a valid chunk in
// every other respect: its name, key, length and checksum are right).
cache::Bytes as_other_model(const cache::Bytes& bytes) {
  auto header = cache::verify_chunk(bytes);
  EXPECT_TRUE(header) << header.status().to_string();
  cache::ChunkMeta meta = header->meta;
  meta.model_fingerprint[0] ^= 0x5a;
  std::span<const std::uint8_t> payload(bytes.data() + header->header_size, header->stored_payload_size);
  auto encoded = cache::encode_chunk(meta, payload);
  EXPECT_TRUE(encoded);
  return *encoded;
}

// The chunk files one request added to a disk tier.
std::set<fs::path> new_files(const std::string& dir, const std::set<fs::path>& before) {
  std::set<fs::path> out;
  for (const auto& p : chunk_files(dir)) {
    if (!before.contains(p)) out.insert(p);
  }
  return out;
}

fs::path at_position(const std::set<fs::path>& files, std::uint32_t position) {
  for (const auto& p : files) {
    auto h = cache::parse_chunk_header(read_bytes(p));
    if (h && h->meta.first_position == position) return p;
  }
  return {};
}

TEST_F(KvStoreE2ETest, DamagedDiskChunksAreMissesRemovedAndCounted) {
  const std::string disk = dir_.path() + "/disk";
  const std::vector<std::string> flags = {"--cache-ram", "0", "--cache-disk", disk};
  const std::vector<std::vector<int>> prompts = {prompt(10), prompt(11), prompt(12)};
  std::vector<fs::path> damaged;  // chunk 2 of each prompt
  {
    auto a = serve("damage-a", flags);
    std::set<fs::path> seen;
    for (const auto& p : prompts) {
      ASSERT_FALSE(a->complete(p, kMaxTokens).is_null());
      ASSERT_TRUE(a->wait_writes_done());
      auto added = new_files(disk, seen);
      ASSERT_EQ(added.size(), 8u);  // 7 full chunks, and the partial tail (prompt + answer)
      damaged.push_back(at_position(added, 2 * kChunk));
      ASSERT_FALSE(damaged.back().empty());
      seen.insert(added.begin(), added.end());
    }
    EXPECT_EQ(a->stop(), 0);
  }
  const cache::Bytes good = read_bytes(damaged[1]);
  fs::resize_file(damaged[0], fs::file_size(damaged[0]) / 2);  // truncated
  cache::Bytes flipped = good;
  flipped.back() ^= 0x10;                                       // one payload bit
  write_bytes(damaged[1], flipped);
  write_bytes(damaged[2], as_other_model(read_bytes(damaged[2])));  // another model's chunk

  auto b = serve("damage-b", flags);
  for (const auto& p : prompts) {
    json r = b->complete(p, kMaxTokens);
    EXPECT_EQ(tokens_of(r), reference(p)) << text_of(r);
    EXPECT_EQ(cached_of(r), 2 * kChunk);  // the two intact leading chunks, nothing after the bad one
  }
  EXPECT_EQ(b->metric(tier_metric("kvstash_kv_tier_rejected_chunks_total", "disk")), 3) << b->metrics();
  // 2 good chunks per prompt; the other model's chunk is a tier hit the store then rejects.
  EXPECT_EQ(b->metric("kvstash_prompt_tokens_from_store_total"), 3 * 2 * kChunk);
  EXPECT_EQ(b->metric("kvstash_kv_store_chunks_rejected_total"), 1);
  // Each bad file was removed; the recomputed chunk was written again in its place, whole.
  ASSERT_TRUE(b->wait_writes_done());
  for (const auto& path : damaged) {
    auto h = cache::verify_chunk(read_bytes(path));
    ASSERT_TRUE(h) << path;
    EXPECT_EQ(h->meta.model_fingerprint, cache::verify_chunk(good)->meta.model_fingerprint);
  }
}

TEST_F(KvStoreE2ETest, RedisChunkFromAnotherModelIsRejectedAndCounted) {
  ASSERT_TRUE(redis_ok()) << kRedisMissing;
  RedisTestServer redis(cache::testing::free_port());
  ASSERT_TRUE(redis.ready());
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port()), disk = dir_.path() + "/disk";
  const auto p = prompt(13);
  {
    auto a = serve("redis-model-a", {"--cache-ram", "0", "--cache-disk", disk, "--cache-redis", url});
    ASSERT_FALSE(a->complete(p, kMaxTokens).is_null());
    EXPECT_EQ(a->stop(), 0);
  }
  // Replace chunk 0 in redis by another model's chunk under the same key.
  const auto files = chunk_files(disk);
  const fs::path first = at_position({files.begin(), files.end()}, 0);
  ASSERT_FALSE(first.empty());
  const cache::Bytes bytes = read_bytes(first);
  cache::RedisTier tier({.client = {.seeds = {{"127.0.0.1", redis.port()}}}});
  ASSERT_TRUE(tier.put(cache::parse_chunk_header(bytes)->meta.key, as_other_model(bytes)).is_ok());

  auto b = serve("redis-model-b", {"--cache-ram", "0", "--cache-redis", url});
  json r = b->complete(p, kMaxTokens);
  EXPECT_EQ(tokens_of(r), reference(p)) << text_of(r);
  EXPECT_EQ(cached_of(r), 0);
  EXPECT_EQ(b->metric(tier_metric("kvstash_kv_tier_rejected_chunks_total", "redis")), 1);
  EXPECT_EQ(b->metric("kvstash_kv_store_chunks_rejected_total"), 1);
}

// kill -9 while the write-behind queue writes chunks; then a torn temp file and a truncated chunk
// are planted too. After the restart, nothing damaged is loaded and what is intact is a hit.
TEST_F(KvStoreE2ETest, KillNineWhileWritingLoadsNoDamagedChunkAfterRestart) {
  const std::string disk = dir_.path() + "/disk";
  const std::vector<std::string> flags = {"--cache-ram", "0", "--cache-disk", disk};
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(prompt(20 + i, 15 * kChunk + 5));
  {
    auto a = serve("kill-a", flags);
    std::vector<std::thread> clients;
    for (const auto& p : prompts) clients.emplace_back([&a, p] { (void)a->complete(p, 64); });
    // Kill once a few chunk files are on disk and more are queued (4 x 17 chunks in all).
    for (int i = 0; i < 500 && chunk_files(disk).size() < 4; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    a->kill9();
    for (auto& t : clients) t.join();
  }
  // Damage the chunk at the highest position: a hit needs an intact first chunk, and damaging the
  // only one on disk would leave nothing to hit (which chunks the writer finished is up to timing).
  const auto by_position = files_by_position(disk);
  ASSERT_GE(by_position.size(), 2u) << "the writer had written nothing when killed";
  ASSERT_EQ(by_position.begin()->first, 0u) << "no first chunk on disk";
  const fs::path victim = std::prev(by_position.end())->second;
  fs::resize_file(victim, fs::file_size(victim) - 1);
  const fs::path torn = victim.parent_path() / ("." + victim.stem().string() + ".tmp.999999.0");
  write_bytes(torn, cache::Bytes(100, 0xab));

  auto b = serve("kill-b", flags);
  EXPECT_FALSE(fs::exists(torn));  // leftover temp files are deleted at start
  EXPECT_GE(b->metric(tier_metric("kvstash_kv_tier_rejected_chunks_total", "disk")), 1);
  int cached = 0;
  for (const auto& p : prompts) {
    json r = b->complete(p, kMaxTokens);
    EXPECT_EQ(tokens_of(r), reference(p)) << text_of(r);
    cached += cached_of(r);
  }
  EXPECT_GT(cached, 0);
  EXPECT_GT(b->metric(tier_metric("kvstash_kv_tier_hits_total", "disk")), 0);
  EXPECT_EQ(b->metric("kvstash_kv_store_chunks_rejected_total"), 0);
}

// Two salts never see each other's chunks: not in the pool, memory, disk or redis.
TEST_F(KvStoreE2ETest, CacheSaltsNeverShareChunksInAnyTier) {
  ASSERT_TRUE(redis_ok()) << kRedisMissing;
  std::vector<std::string> all = {"--cache-ram", "16MiB", "--cache-disk", dir_.path() + "/disk"};
  auto redis = std::make_unique<RedisTestServer>(cache::testing::free_port());
  ASSERT_TRUE(redis->ready());
  all.push_back("--cache-redis");
  all.push_back("redis://127.0.0.1:" + std::to_string(redis->port()));
  const auto p = prompt(30);
  const auto want = reference(p);
  {
    auto a = serve("salt-a", all);
    EXPECT_EQ(cached_of(a->complete(p, kMaxTokens, "alpha")), 0);
    json beta = a->complete(p, kMaxTokens, "beta");  // pool and memory hold alpha's KV
    EXPECT_EQ(cached_of(beta), 0);
    EXPECT_EQ(tokens_of(beta), want);
    EXPECT_EQ(cached_of(a->complete(p, kMaxTokens, "")), 0);
    EXPECT_EQ(cached_of(a->complete(p, kMaxTokens, "alpha")), 7 * kChunk);  // whole blocks from the pool
    EXPECT_EQ(a->stop(), 0);
  }
  auto expect_isolated = [&](const std::string& name, const std::vector<std::string>& flags) {
    auto s = serve(name, flags);
    json gamma = s->complete(p, kMaxTokens, "gamma");
    EXPECT_EQ(cached_of(gamma), 0) << name;
    EXPECT_EQ(tokens_of(gamma), want);
    json alpha = s->complete(p, kMaxTokens, "alpha");
    EXPECT_EQ(cached_of(alpha), 7 * kChunk) << name;
    EXPECT_EQ(tokens_of(alpha), want);
  };
  expect_isolated("salt-disk", {"--cache-ram", "0", "--cache-disk", dir_.path() + "/disk"});
  if (redis) expect_isolated("salt-redis", {"--cache-ram", "0", "--cache-redis", all.back()});
}

}  // namespace
}  // namespace kvstash::server::testing
