#include "cache/redis_tier.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "cache/memory_tier.h"
#include "cache/redis_test_server.h"
#include "cache/store_options.h"
#include "cache/test_util.h"
#include "cache/tiered_store.h"

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace kvstash::cache {
namespace {

using namespace kvstash::cache::testing;

#define REQUIRE_REDIS()                                                           \
  /* A test that cannot run fails: CI installs Redis (scripts/install-deps.sh). */          \
  if (!redis_installed()) FAIL() << "redis-server not installed (apt-get install redis-server)"

RedisTierOptions options_for(std::vector<int> ports) {
  RedisTierOptions o;
  for (int p : ports) o.client.seeds.push_back({"127.0.0.1", p});
  o.client.backoff_min = std::chrono::milliseconds(20);
  o.client.backoff_max = std::chrono::milliseconds(200);
  // No test here exercises a slow server: the 200 ms connect (with AUTH) and 1 s command defaults
  // must not fire because redis-server or this process was descheduled on a loaded machine. A
  // killed server still fails at once (connection refused or reset).
  o.client.connect_timeout = std::chrono::seconds(10);
  o.client.command_timeout = std::chrono::seconds(30);
  return o;
}

// See tiered_store_test.cc: a get slower than tier_timeout (500 ms) skips the tier for the rest of
// the load; only a load that is meant to lose its tier may lose it.
TieredStoreOptions patient_store() {
  TieredStoreOptions o;
  o.tier_timeout = std::chrono::minutes(10);
  return o;
}

TEST(RedisSlot, Crc16AndHashTags) {
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);  // the CRC16-XMODEM check value
  EXPECT_EQ(redis_key_slot("foo"), 12182);       // CLUSTER KEYSLOT foo
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("user1000"));
  EXPECT_EQ(redis_key_slot("a{}b"), crc16_xmodem("a{}b") & 16383);  // empty tag: whole key
}

TEST(RedisTier, PutGetContainsEraseTtl) {
  REQUIRE_REDIS();
  RedisTestServer server(free_port());
  ASSERT_TRUE(server.ready());
  auto options = options_for({server.port()});
  options.ttl = std::chrono::seconds(3600);
  RedisTier tier(options);
  Bytes c0 = test_chunk(test_meta(test_key(0))), c1 = test_chunk(test_meta(test_key(1)), 5000, 3);
  ASSERT_TRUE(tier.put(test_key(0), c0).is_ok());
  ASSERT_TRUE(tier.put(test_key(1), c1).is_ok());
  EXPECT_EQ(*tier.get(test_key(1)), c1);
  EXPECT_EQ(tier.get(test_key(2)).status().code(), StatusCode::kNotFound);
  std::vector<ChunkKey> keys = {test_key(0), test_key(1), test_key(2)};
  EXPECT_EQ(tier.contains(keys), 2u);
  const int ttl = std::atoi(redis_query(server.port(), "TTL " + RedisTier::redis_key(test_key(0))).c_str());
  EXPECT_GT(ttl, 3000);
  ASSERT_TRUE(tier.erase(test_key(0)).is_ok());
  EXPECT_EQ(tier.contains(keys), 0u);
  auto listed = tier.list_keys();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(*listed, std::vector<ChunkKey>{test_key(1)});
  ASSERT_TRUE(tier.clear().is_ok());
  EXPECT_FALSE(tier.get(test_key(1)).has_value());
  EXPECT_EQ(tier.stats().hits, 1u);
}

TEST(RedisTier, KilledFailsFastThenReconnects) {
  REQUIRE_REDIS();
  RedisTestServer server(free_port());
  ASSERT_TRUE(server.ready());
  RedisTier tier(options_for({server.port()}));
  Bytes c = test_chunk(test_meta(test_key(7)));
  ASSERT_TRUE(tier.put(test_key(7), c).is_ok());
  server.kill();
  EXPECT_EQ(tier.get(test_key(7)).status().code(), StatusCode::kUnavailable);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(tier.get(test_key(7)).status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(tier.put(test_key(8), c).code(), StatusCode::kUnavailable);
  }
  EXPECT_GE(tier.stats().errors, 101u);
  server.start();  // same port, empty (no persistence)
  ASSERT_TRUE(server.ready());
  Status st;
  for (int i = 0; i < 3000; ++i) {  // until the backoff lets a reconnect through (bounded: 30 s)
    st = tier.put(test_key(7), c);
    if (st) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(*tier.get(test_key(7)), c);
}

// --- Issue 10: AUTH, the connection pool, pipelined lookups, a server killed during a load. ---

TEST(RedisTier, PasswordAndAclUser) {
  REQUIRE_REDIS();
  RedisTestServer server(free_port(), {"--requirepass", "s3cret", "--user", "alice", "on", ">alice-pw",
                                       "~kvstash:*", "+@all"});
  ASSERT_TRUE(server.ready());
  for (const std::string user : {"", "alice"}) {
    auto options = options_for({server.port()});
    options.client.user = user;
    options.client.password = user.empty() ? "s3cret" : "alice-pw";
    RedisTier tier(options);
    auto connected = tier.client().connect_now();
    ASSERT_TRUE(connected.has_value()) << user << ": " << connected.status().to_string();
    EXPECT_NE(connected->find("standalone"), std::string::npos) << *connected;
    EXPECT_NE(connected->find(user.empty() ? "AUTH as default" : "AUTH as alice"), std::string::npos) << *connected;
    Bytes c = test_chunk(test_meta(test_key(3)), 2000, user.size());
    ASSERT_TRUE(tier.put(test_key(3), c).is_ok()) << user;
    EXPECT_EQ(*tier.get(test_key(3)), c) << user;
    EXPECT_EQ(tier.contains(std::vector<ChunkKey>{test_key(3), test_key(4)}), 1u) << user;
    EXPECT_EQ(tier.stats().errors, 0u) << user;
  }
}

TEST(RedisTier, WrongOrMissingPasswordIsAClearStartupError) {
  REQUIRE_REDIS();
  RedisTestServer server(free_port(), {"--requirepass", "s3cret", "--user", "alice", "on", ">alice-pw", "~*", "+@all"});
  ASSERT_TRUE(server.ready());
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  for (const std::string& url : {"redis://:wrong@" + where, "redis://alice:s3cret@" + where, "redis://" + where}) {
    StoreOptions options;
    options.ram_bytes = 0;
    ASSERT_TRUE(apply_redis_flags(url, "", 2, options).is_ok());
    auto store = open_tiered_store(options);
    ASSERT_FALSE(store.has_value()) << url;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(store.status().message().find("authentication failed"), std::string::npos) << store.status().message();
    EXPECT_NE(store.status().message().find(where), std::string::npos) << store.status().message();
  }
  StoreOptions good;
  ASSERT_TRUE(apply_redis_flags("redis://alice:alice-pw@" + where, "90s", 2, good).is_ok());
  auto store = open_tiered_store(good);
  ASSERT_TRUE(store.has_value()) << store.status().to_string();
  // An unreachable server is not a startup error: the tier fails fast until it answers.
  StoreOptions down;
  ASSERT_TRUE(apply_redis_flags("redis://127.0.0.1:" + std::to_string(free_port()), "", 2, down).is_ok());
  EXPECT_TRUE(open_tiered_store(down).has_value());
}

// The pool: many threads at once, each reading back exactly its own values; never more
// connections than the pool; and a command blocked on the server does not hold up the others
// (there is no client-wide lock).
TEST(RedisTier, PoolServesManyThreadsWithoutAGlobalLock) {
  REQUIRE_REDIS();
  RedisTestServer server(free_port());
  ASSERT_TRUE(server.ready());
  auto options = options_for({server.port()});
  options.client.pool_size = 4;
  RedisTier tier(options);
  constexpr int kThreads = 8, kKeysPerThread = 25;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeysPerThread; ++k) {
        const int id = t * 1000 + k;
        const Bytes c = test_chunk(test_meta(test_key(id)), 3000 + k, id);
        if (!tier.put(test_key(id), c).is_ok()) ++failed;
        auto got = tier.get(test_key(id));
        if (!got) {
          ++failed;
        } else if (*got != c) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(failed, 0);
  EXPECT_LE(tier.client().open_connections(), 4u);
  EXPECT_GE(tier.client().open_connections(), 2u);

  // One connection blocked on the server (BLPOP on an empty list, no server-side timeout) until
  // this test pushes to the list; a GET on another connection of the pool answers meanwhile. No
  // clock is read: the BLPOP cannot end before the push, so a GET that waited for it could only
  // answer after the command timeout (30 s), with the BLPOP failed.
  auto blocked = std::async(std::launch::async, [&] {
    return tier.client().command("kvstash:empty-list", {"BLPOP", "kvstash:empty-list", "0"});
  });
  bool blocking = false;
  for (int i = 0; i < 1500 && !blocking; ++i) {  // bounded: 30 s for the BLPOP to reach the server
    blocking = redis_query(server.port(), "INFO clients").find("blocked_clients:1") != std::string::npos;
    if (!blocking) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(blocking) << "the BLPOP never blocked on the server; the test proves nothing";
  auto got = tier.get(test_key(0));
  const bool still_blocked = blocked.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  EXPECT_EQ(redis_query(server.port(), "RPUSH kvstash:empty-list x"), "1");  // releases the BLPOP
  EXPECT_EQ(blocked.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(still_blocked) << "the GET answered only after the blocked command ended";
  ASSERT_TRUE(blocked.get().has_value());
}

TEST(RedisTier, HoldsAnswersEveryKeyInOnePipeline) {
  REQUIRE_REDIS();
  RedisTestServer server(free_port());
  ASSERT_TRUE(server.ready());
  RedisTier tier(options_for({server.port()}));
  std::vector<ChunkKey> keys;
  for (int i = 0; i < 64; ++i) {
    keys.push_back(test_key(i));
    if (i % 3 != 2) {
      ASSERT_TRUE(tier.put(test_key(i), test_chunk(test_meta(test_key(i)))).is_ok());
    }
  }
  auto held = tier.holds(keys);
  ASSERT_EQ(held.size(), keys.size());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(held[i], i % 3 != 2) << i;
  EXPECT_EQ(tier.contains(keys), 2u);
  // Every EXISTS of the 64 went through one connection (the pipeline borrows one).
  EXPECT_EQ(tier.client().open_connections(), 1u);
  server.kill();
  held = tier.holds(keys);
  for (bool h : held) EXPECT_FALSE(h);
  EXPECT_GE(tier.stats().errors, 1u);
}

// A tier in front of another whose get of one key (the prefix's last chunk) waits until the test
// says the server is down (at most 60 s): a load through it cannot complete before the kill, however
// slow the thread that kills is; every other get goes straight through, so the kill still lands
// wherever the load happens to be.
class LastChunkAfterKill final : public Tier {
 public:
  LastChunkAfterKill(std::unique_ptr<Tier> inner, ChunkKey last) : inner_(std::move(inner)), last_(last) {}
  void server_down() {
    std::lock_guard lock(mu_);
    down_ = true;
    cv_.notify_all();
  }
  std::string name() const override { return inner_->name(); }
  std::size_t contains(std::span<const ChunkKey> keys) override { return inner_->contains(keys); }
  std::vector<bool> holds(std::span<const ChunkKey> keys) override { return inner_->holds(keys); }
  Expected<Bytes> get(const ChunkKey& key) override {
    if (key == last_) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(60), [this] { return down_; });
    }
    return inner_->get(key);
  }
  Status put(const ChunkKey& key, std::span<const std::uint8_t> bytes) override { return inner_->put(key, bytes); }
  Status erase(const ChunkKey& key) override { return inner_->erase(key); }
  TierStats stats() const override { return inner_->stats(); }
  Expected<std::vector<ChunkKey>> list_keys() override { return inner_->list_keys(); }
  Status clear() override { return inner_->clear(); }

 private:
  std::unique_ptr<Tier> inner_;
  const ChunkKey last_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool down_ = false;
};

// A server killed while a load runs: the load returns a run of verified chunks (maybe none), never
// a wrong byte; the tier is skipped; later plans find nothing there.
TEST(RedisTier, KilledDuringALoadIsAMissNeverWrongData) {
  REQUIRE_REDIS();
  RedisTestServer server(free_port());
  ASSERT_TRUE(server.ready());
  constexpr int kChunks = 48;
  constexpr std::size_t kPayload = 1 << 20;  // 1 MiB: a load long enough to be cut
  std::vector<ChunkMeta> metas;
  {
    std::vector<std::int32_t> tokens(kChunks * 16);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 3 + 7);
    auto keys = chunk_keys(test_model(), "f16-test-v1", "", tokens, 16);
    for (int i = 0; i < kChunks; ++i) metas.push_back(test_meta(keys[i], static_cast<std::uint32_t>(16 * i)));
  }
  RedisTier writer(options_for({server.port()}));
  for (int i = 0; i < kChunks; ++i) ASSERT_TRUE(writer.put(metas[i].key, test_chunk(metas[i], kPayload, i)).is_ok());
  for (int attempt = 0; attempt < 2; ++attempt) {  // killed at once, and killed a little later
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(std::make_unique<MemoryTier>(std::uint64_t{1} << 30));
    auto gated = std::make_unique<LastChunkAfterKill>(std::make_unique<RedisTier>(options_for({server.port()})), metas.back().key);
    LastChunkAfterKill* gate = gated.get();
    tiers.push_back(std::move(gated));
    TieredStoreOptions store_options;
    store_options.load_threads = 4;
    TieredStore store(std::move(tiers), store_options);
    std::vector<ChunkKey> keys;
    for (const auto& m : metas) keys.push_back(m.key);
    LoadPlan plan = store.plan_load(keys);
    ASSERT_EQ(plan.size(), static_cast<std::size_t>(kChunks));
    auto loading = std::async(std::launch::async, [&] { return store.load(metas, plan); });
    if (attempt == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    server.kill();
    gate->server_down();
    ASSERT_EQ(loading.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    auto loaded = loading.get();
    EXPECT_LT(loaded.size(), static_cast<std::size_t>(kChunks)) << attempt;  // cut short
    for (std::size_t i = 0; i < loaded.size(); ++i) {
      ASSERT_EQ(Bytes(loaded[i].view.payload.begin(), loaded[i].view.payload.end()), test_payload(kPayload, static_cast<int>(i)))
          << attempt << " chunk " << i;
    }
    EXPECT_GE(store.stats().tier_skips, 1u);
    store.flush();
    EXPECT_EQ(store.lookup(keys), loaded.size());  // promoted into memory; redis answers nothing
    server.start();  // empty again (no persistence): refill for the next attempt
    ASSERT_TRUE(server.ready());
    if (attempt == 0) {
      RedisTier refill(options_for({server.port()}));
      for (int i = 0; i < kChunks; ++i) ASSERT_TRUE(refill.put(metas[i].key, test_chunk(metas[i], kPayload, i)).is_ok());
    }
  }
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!redis_installed() || !redis_cli_installed()) {
      FAIL() << "redis-server / redis-cli not installed (apt-get install redis-server redis-tools)";
    }
    std::string create = "redis-cli --cluster create";
    for (int i = 0; i < 3; ++i) {
      const int port = free_cluster_port();
      servers_.push_back(std::make_unique<RedisTestServer>(
          port, std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                         dir_.path() + "/nodes-" + std::to_string(port) + ".conf",
                                         "--dir", dir_.path(), "--cluster-node-timeout", "5000"}));
      ASSERT_TRUE(servers_.back()->ready());
      ports_.push_back(port);
      create += " 127.0.0.1:" + std::to_string(port);
    }
    create += " --cluster-replicas 0 --cluster-yes >/dev/null 2>&1";
    ASSERT_EQ(std::system(create.c_str()), 0);
    bool ok = false;
    for (int i = 0; i < 1200 && !ok; ++i) {  // bounded wait for the cluster to agree (<= 60 s)
      ok = true;
      for (int p : ports_) ok = ok && redis_query(p, "CLUSTER INFO").find("cluster_state:ok") != std::string::npos;
      if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(ok) << "cluster did not reach cluster_state:ok";
  }

  ScratchDir dir_;
  std::vector<std::unique_ptr<RedisTestServer>> servers_;
  std::vector<int> ports_;
};

TEST_F(RedisClusterTest, KeysAcrossAllSlotsAndReshardIsFollowed) {
  RedisTier tier(options_for({ports_[1]}));
  ASSERT_TRUE(tier.client().cluster_mode());
  constexpr int kKeys = 300;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(tier.put(test_key(i), test_chunk(test_meta(test_key(i)), 64, i)).is_ok()) << i;
  }
  for (int p : ports_) EXPECT_GT(std::atoi(redis_query(p, "DBSIZE").c_str()), 40) << p;  // spread
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(*tier.get(test_key(i)), test_chunk(test_meta(test_key(i)), 64, i));
  auto listed = tier.list_keys();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->size(), static_cast<std::size_t>(kKeys));

  // Move the slot of key 0 to another node, by hand, the way redis-cli --cluster reshard does.
  const std::string rkey = RedisTier::redis_key(test_key(0));
  const int slot = redis_key_slot(rkey);
  int from = -1, to = -1;
  for (int p : ports_) {
    if (redis_query(p, "CLUSTER COUNTKEYSINSLOT " + std::to_string(slot)) == "1") from = p;
  }
  ASSERT_GT(from, 0);
  to = from == ports_[0] ? ports_[1] : ports_[0];
  const std::string from_id = redis_query(from, "CLUSTER MYID"), to_id = redis_query(to, "CLUSTER MYID");
  const std::string s = std::to_string(slot);
  ASSERT_EQ(redis_query(to, "CLUSTER SETSLOT " + s + " IMPORTING " + from_id), "OK");
  ASSERT_EQ(redis_query(from, "CLUSTER SETSLOT " + s + " MIGRATING " + to_id), "OK");
  // Mid-migration a new key of that slot lives on the target: the client must follow ASK.
  int other = -1;
  for (int i = 1000; i < 400000 && other < 0; ++i) {
    if (redis_key_slot(RedisTier::redis_key(test_key(i))) == slot) other = i;
  }
  ASSERT_GT(other, 0);
  Bytes other_chunk = test_chunk(test_meta(test_key(other)));
  ASSERT_TRUE(tier.put(test_key(other), other_chunk).is_ok());
  EXPECT_EQ(*tier.get(test_key(other)), other_chunk);
  ASSERT_EQ(redis_query(from, "MIGRATE 127.0.0.1 " + std::to_string(to) + " " + rkey + " 0 5000"), "OK");
  for (int p : ports_) ASSERT_EQ(redis_query(p, "CLUSTER SETSLOT " + s + " NODE " + to_id), "OK") << p;
  // The client's map still names the old owner: it must take the MOVED and find both keys.
  EXPECT_EQ(*tier.get(test_key(0)), test_chunk(test_meta(test_key(0)), 64, 0));
  EXPECT_EQ(*tier.get(test_key(other)), other_chunk);
  EXPECT_EQ(redis_query(to, "CLUSTER COUNTKEYSINSLOT " + s), "2");
  EXPECT_EQ(tier.stats().errors, 0u);
}

// The cluster answers a whole prefix in one pipeline per master, and a TieredStore plans and loads
// through it.
TEST_F(RedisClusterTest, PipelinedLookupAcrossMastersAndPlannedLoad) {
  RedisTier tier(options_for({ports_[0]}));
  std::vector<ChunkMeta> metas;
  std::vector<std::int32_t> tokens(40 * 16);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i + 11);
  auto keys = chunk_keys(test_model(), "f16-test-v1", "", tokens, 16);
  for (int i = 0; i < 40; ++i) metas.push_back(test_meta(keys[i], static_cast<std::uint32_t>(16 * i)));
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(tier.put(keys[i], test_chunk(metas[i], 512, i)).is_ok());
  auto held = tier.holds(keys);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(held[i], i < 30) << i;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<RedisTier>(options_for({ports_[2]})));
  TieredStore store(std::move(tiers), patient_store());
  LoadPlan plan = store.plan_load(keys);
  ASSERT_EQ(plan.size(), 30u);
  auto loaded = store.load(metas, plan);
  ASSERT_EQ(loaded.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(Bytes(loaded[i].view.payload.begin(), loaded[i].view.payload.end()), test_payload(512, i)) << i;
  }
  EXPECT_EQ(tier.stats().errors, 0u);
}

}  // namespace
}  // namespace kvstash::cache
