#include "router/policy.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace kvstash::router {
namespace {

WorkerKvInfo layout(int chunk_tokens = 64) {
  WorkerKvInfo info;
  for (int i = 0; i < 32; ++i) info.fingerprint[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i * 7);
  info.kv_format = "f16-blk16-v1";
  info.block_size = 16;
  info.chunk_tokens = chunk_tokens;
  return info;
}

std::vector<std::int32_t> tokens(int n, int seed = 1) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = 3 + (i * 31 + seed * 17) % 200;
  return out;
}

void hold(PrefixIndex& index, cache::KvSource source, const std::vector<cache::ChunkKey>& keys, std::size_t n) {
  for (std::size_t i = 0; i < n && i < keys.size(); ++i) index.apply({true, source, keys[i]});
}

TEST(RequestKeys, FollowTheEnginesChains) {
  const WorkerKvInfo info = layout();
  const auto t = tokens(200);
  RequestKeys k = compute_request_keys(info, t, "");
  EXPECT_EQ(k.max_blocks, (200 - 1) / 16);  // 12: the last token is always computed
  ASSERT_EQ(k.block_keys.size(), 12u);
  EXPECT_EQ(k.chunk_keys.size(), 3u);  // 192 reusable tokens / 64
  EXPECT_EQ(k.block_keys, cache::chunk_keys(info.fingerprint, info.kv_format, "", std::span(t).first(192), 16));
  // The salt is in every key.
  RequestKeys salted = compute_request_keys(info, t, "tenant-a");
  EXPECT_NE(salted.block_keys.front(), k.block_keys.front());
  EXPECT_NE(salted.chunk_keys.back(), k.chunk_keys.back());
  EXPECT_TRUE(compute_request_keys(info, tokens(16), "").block_keys.empty());  // 15 reusable tokens: no block
}

TEST(PrefixIndex, CountsEachTokenOnceAtItsFastestPlace) {
  const WorkerKvInfo info = layout();
  const RequestKeys k = compute_request_keys(info, tokens(200), "");
  PrefixIndex index;
  EXPECT_EQ(index.match(info, k).total(), 0);
  hold(index, cache::KvSource::kPool, k.block_keys, 5);      // 80 tokens in the pool
  hold(index, cache::KvSource::kMemory, k.chunk_keys, 1);    // chunk 0: covered by the pool already
  hold(index, cache::KvSource::kDisk, k.chunk_keys, 3);      // chunks 0..2 on disk
  PrefixMatch m = index.match(info, k);
  EXPECT_EQ(m.pool_tokens, 80);
  EXPECT_EQ(m.memory_tokens, 0);
  EXPECT_EQ(m.disk_tokens, 192 - 80);
  // A gap in the pool's run ends it: block 5 missing, block 6 held.
  index.apply({true, cache::KvSource::kPool, k.block_keys[6]});
  EXPECT_EQ(index.match(info, k).pool_tokens, 80);
}

TEST(PrefixIndex, FindsAStoredTailWhereTheRunOfChunksEnds) {
  const WorkerKvInfo info = layout();
  const RequestKeys k = compute_request_keys(info, tokens(150), "");  // 9 blocks: 2 chunks + a 1-block tail
  ASSERT_EQ(k.chunk_keys.size(), 2u);
  PrefixIndex index;
  hold(index, cache::KvSource::kMemory, k.chunk_keys, 2);
  index.apply({true, cache::KvSource::kMemory, k.block_keys[8]});  // the tail: keyed by its last block
  EXPECT_EQ(index.match(info, k).memory_tokens, 144);
  // Without the second chunk, the tail is unreachable.
  index.apply({false, cache::KvSource::kMemory, k.chunk_keys[1]});
  EXPECT_EQ(index.match(info, k).memory_tokens, 64);
  // Where the run ends (chunk 1), the head of a stored chunk that diverges later: its prefix alias
  // at block 6 (the third of chunk 1) stands for blocks 4..6, as the engine would load them.
  index.apply({true, cache::KvSource::kDisk, k.block_keys[6]});
  const PrefixMatch m = index.match(info, k);
  EXPECT_EQ(m.memory_tokens, 64);
  EXPECT_EQ(m.disk_tokens, 48);
}

TEST(Policy, CacheAwareScoresHeldTokensByPlaceMinusLoad) {
  ScoreWeights w;  // pool 1, memory 0.9, disk 0.7
  w.load = 0.5;
  std::vector<Candidate> c(3);
  c[0] = {"a", {0, 0, 0}, 0, 0};
  c[1] = {"b", {160, 0, 0}, 100, 1};  // 160 - 50 = 110
  c[2] = {"c", {0, 160, 0}, 0, 0};    // 144
  EXPECT_DOUBLE_EQ(score(w, c[1]), 110);
  Choice ch = choose_worker(Policy::kCacheAware, w, c, 0, 0);
  EXPECT_EQ(ch.index, 2u);
  EXPECT_STREQ(ch.decision, "cache_hit");
  c[2].load_tokens = 200;  // 144 - 100 = 44 < 110
  EXPECT_EQ(choose_worker(Policy::kCacheAware, w, c, 0, 0).index, 1u);
  w.load = 0;  // load ignored: the memory tier's 144 < the pool's 160
  EXPECT_EQ(choose_worker(Policy::kCacheAware, w, c, 0, 0).index, 1u);
}

TEST(Policy, TiesGoToTheLeastLoadedThenInTurn) {
  ScoreWeights w;
  w.load = 0;  // every score 0: a tie
  std::vector<Candidate> c = {{"a", {}, 30, 1}, {"b", {}, 10, 2}, {"c", {}, 10, 1}};
  Choice ch = choose_worker(Policy::kCacheAware, w, c, 0, 0);
  EXPECT_EQ(ch.index, 2u);  // load 10 and fewer open requests
  EXPECT_STREQ(ch.decision, "least_loaded");
  std::vector<Candidate> idle = {{"a", {}, 0, 0}, {"b", {}, 0, 0}, {"c", {}, 0, 0}};
  std::vector<std::size_t> picks;
  for (std::uint64_t turn = 0; turn < 6; ++turn) picks.push_back(choose_worker(Policy::kCacheAware, w, idle, turn, 0).index);
  EXPECT_EQ(picks, (std::vector<std::size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(choose_worker(Policy::kLeastLoaded, w, c, 0, 0).index, 2u);
  EXPECT_EQ(choose_worker(Policy::kRoundRobin, w, c, 4, 0).index, 1u);
}

TEST(Policy, PrefixHashKeepsAPrefixOnOneWorkerAndMovesOnlyItsShareWhenOneGoes) {
  const WorkerKvInfo info = layout();
  std::vector<Candidate> four = {{"http://a:1", {}, 0, 0}, {"http://b:1", {}, 0, 0}, {"http://c:1", {}, 0, 0}, {"http://d:1", {}, 0, 0}};
  std::vector<Candidate> three(four.begin(), four.begin() + 3);  // d is gone
  int moved = 0, counts[4] = {0, 0, 0, 0};
  for (int seed = 0; seed < 200; ++seed) {
    const auto t = tokens(40, seed);
    const std::uint64_t h = prefix_hash_of(compute_request_keys(info, t, ""), t, "");
    const std::size_t a = choose_worker(Policy::kPrefixHash, {}, four, 0, h).index;
    EXPECT_EQ(choose_worker(Policy::kPrefixHash, {}, four, 99, h).index, a);  // not by turn
    const std::size_t b = choose_worker(Policy::kPrefixHash, {}, three, 0, h).index;
    ++counts[a];
    if (a != 3) {
      EXPECT_EQ(a, b);  // rendezvous hashing: only d's prefixes move
    } else {
      ++moved;
    }
  }
  for (int n : counts) EXPECT_GT(n, 20);  // spread over all four
  EXPECT_EQ(moved, counts[3]);
}

}  // namespace
}  // namespace kvstash::router

namespace kvstash::router {
namespace {

TEST(Policy, PrefixHashLooksPastASharedSystemPrompt) {
  const WorkerKvInfo info = layout();
  const auto system = tokens(64, 99);
  std::set<std::uint64_t> hashes;
  for (int user = 0; user < 8; ++user) {
    std::vector<std::int32_t> t = system;
    const auto own = tokens(300, user);
    t.insert(t.end(), own.begin(), own.end());
    const std::uint64_t h = prefix_hash_of(compute_request_keys(info, t, ""), t, "");
    hashes.insert(h);
    // The conversation's next turn (a longer prompt with the same start) keeps its hash.
    std::vector<std::int32_t> longer = t;
    longer.insert(longer.end(), own.begin(), own.begin() + 50);
    EXPECT_EQ(prefix_hash_of(compute_request_keys(info, longer, ""), longer, ""), h);
  }
  EXPECT_EQ(hashes.size(), 8u);
}

}  // namespace
}  // namespace kvstash::router
