#include "cache/redis_tier.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "cache/redis_test_server.h"
#include "cache/test_util.h"

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
  for (int i = 0; i < 200; ++i) {  // until the backoff lets a reconnect through (bounded)
    st = tier.put(test_key(7), c);
    if (st) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(*tier.get(test_key(7)), c);
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
    for (int i = 0; i < 300 && !ok; ++i) {  // bounded wait for the cluster to agree (<= 15 s)
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

}  // namespace
}  // namespace kvstash::cache
