// The tiered KV store seen from outside, part 1: flags, a hit from each tier (memory, disk after a
// restart, redis shared between processes, a 3-node Redis Cluster) token for token the uncached
// output, and redis faults. Real `kvstash serve` and redis-server processes, loopback only.
#include "server/kv_store_e2e_fixture.h"

namespace kvstash::server::testing {
namespace {

TEST_F(KvStoreE2ETest, BadFlagsAreAClearErrorAndExitOne) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--chunk-tokens", "40"}, "multiple of the KV block size 16"},
      {{"--cache-ram", "4XB"}, "--cache-ram"},
      {{"--cache-disk", dir_.path() + "/d", "--cache-disk-size", "lots"}, "--cache-disk-size"},
      {{"--cache-redis", "redis://127.0.0.1:99999"}, "--cache-redis"},
  };
  for (const Case& c : cases) {
    ServeProcess p(*model_, c.args, dir_.path() + "/bad.log");
    EXPECT_FALSE(p.ready());
    EXPECT_EQ(p.wait_exit(), 1) << p.log();
    EXPECT_NE(p.log().find(c.message), std::string::npos) << p.log();
  }
}

TEST_F(KvStoreE2ETest, DefaultsToALoggedMemoryTier) {
  auto s = serve("default", {});
  EXPECT_NE(s->log().find("kv store: memory "), std::string::npos) << s->log();
  EXPECT_NE(s->log().find("default"), std::string::npos) << s->log();
  EXPECT_GT(s->metric(tier_metric("kvstash_kv_tier_capacity_bytes", "memory")), 0);
}

// The pool is small, so a second prompt evicts the first one's blocks; the repeat then finds its
// chunks in the memory tier only.
TEST_F(KvStoreE2ETest, MemoryHitIsTokenForTokenTheUncachedOutput) {
  const auto p = prompt(1), q = prompt(2);
  const auto want = reference(p);
  auto s = serve("memory", {"--cache-ram", "64MiB", "--parallel", "1", "--ctx", "304", "--kv-pool-tokens", "320"});
  EXPECT_EQ(tokens_of(s->complete(p, kMaxTokens)), want);
  ASSERT_FALSE(s->complete(q, kMaxTokens).is_null());
  json again = s->complete(p, kMaxTokens);
  EXPECT_EQ(tokens_of(again), want) << text_of(again);
  EXPECT_GT(cached_of(again), 0);
  EXPECT_GT(s->metric("kvstash_prompt_tokens_from_store_total"), 0);
  EXPECT_GT(s->metric(tier_metric("kvstash_kv_tier_hits_total", "memory")), 0);
  EXPECT_GT(s->metric(tier_metric("kvstash_kv_tier_load_seconds_count", "memory")), 0);
}

// Pins live in the server's memory: `kvstash cache stats --server` reads them from /metrics, beside
// the offline walk of the same disk directory.
TEST_F(KvStoreE2ETest, CacheStatsShowsALiveServersPins) {
  const auto p = prompt(4);
  const std::string disk = dir_.path() + "/pins-disk";
  auto s = serve("pins", {"--cache-ram", "64MiB", "--cache-disk", disk});
  json body = {{"model", s->model_id()}, {"prompt", p}, {"max_tokens", 2}, {"temperature", 0},
               {"prompt_cache_retention", "1h"}};
  auto r = s->client()->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : httplib::to_string(r.error()));
  ASSERT_TRUE(s->wait_writes_done());
  const auto run = [](const std::string& args, std::string& out) {
    FILE* pipe = ::popen((std::string(KVSTASH_BINARY_DIR) + "/kvstash cache " + args + " 2>&1").c_str(), "r");
    if (pipe == nullptr) return -1;
    char buf[512];
    out.clear();
    while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
    return WEXITSTATUS(::pclose(pipe));
  };
  const std::string url = "http://127.0.0.1:" + std::to_string(s->port());
  std::string out;
  ASSERT_EQ(run("stats --cache-disk " + disk + " --server " + url, out), 0) << out;
  EXPECT_NE(out.find("disk: entries="), std::string::npos) << out;  // the offline walk
  for (const std::string tier : {"memory", "disk"}) {
    const std::size_t at = out.find(tier + " (live, " + url + "): ");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    // The prompt's full chunks, pinned for its hour in both tiers.
    EXPECT_NE(line.find("pinned_entries=7 "), std::string::npos) << line;
    EXPECT_EQ(line.find("pinned_bytes=0 "), std::string::npos) << line;
  }
  EXPECT_EQ(run("verify --server " + url, out), 2) << out;  // --server is for stats only
  EXPECT_NE(out.find("stats only"), std::string::npos) << out;
  EXPECT_EQ(run("stats --server http://127.0.0.1:1", out), 1) << out;  // nothing listens there
}

// Also the restart case: a new process on the same --cache-disk serves the repeat from disk.
TEST_F(KvStoreE2ETest, RestartOnTheSameDiskServesFromDiskTokenForToken) {
  const auto p = prompt(3);
  const auto want = reference(p);
  const std::vector<std::string> flags = {"--cache-ram", "0", "--cache-disk", dir_.path() + "/disk"};
  {
    auto a = serve("disk-a", flags);
    json first = a->complete(p, kMaxTokens);
    EXPECT_EQ(tokens_of(first), want);
    EXPECT_EQ(cached_of(first), 0);
    EXPECT_EQ(a->stop(), 0);  // SIGTERM: queued chunk writes are finished first
  }
  EXPECT_GE(chunk_files(dir_.path() + "/disk").size(), 7u);
  auto b = serve("disk-b", flags);
  json again = b->complete(p, kMaxTokens);
  EXPECT_EQ(tokens_of(again), want) << text_of(again);
  EXPECT_EQ(cached_of(again), 7 * kChunk);
  EXPECT_EQ(b->metric("kvstash_prompt_tokens_from_store_total"), 7 * kChunk);
  EXPECT_EQ(b->metric(tier_metric("kvstash_kv_tier_hits_total", "disk")), 7);
  EXPECT_GT(b->metric(tier_metric("kvstash_kv_tier_read_bytes_total", "disk")), 0);
}

TEST_F(KvStoreE2ETest, SharedThroughOneRedisTokenForToken) {
  ASSERT_TRUE(redis_ok()) << kRedisMissing;
  RedisTestServer redis(cache::testing::free_port());
  ASSERT_TRUE(redis.ready());
  expect_shared_through_redis("redis://127.0.0.1:" + std::to_string(redis.port()), 4);
}

TEST_F(KvStoreE2ETest, SharedThroughAThreeNodeRedisCluster) {
  ASSERT_TRUE(redis_ok() && cache::testing::redis_cli_installed()) << kRedisMissing;
  std::vector<std::unique_ptr<RedisTestServer>> nodes;
  std::string create = "redis-cli --cluster create", url = "redis://";
  for (int i = 0; i < 3; ++i) {
    const int port = cache::testing::free_cluster_port();
    nodes.push_back(std::make_unique<RedisTestServer>(
        port, std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                       dir_.path() + "/nodes-" + std::to_string(port) + ".conf", "--dir",
                                       dir_.path(), "--cluster-node-timeout", "5000"}));
    ASSERT_TRUE(nodes.back()->ready());
    create += " 127.0.0.1:" + std::to_string(port);
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(port);
  }
  ASSERT_EQ(std::system((create + " --cluster-replicas 0 --cluster-yes >/dev/null 2>&1").c_str()), 0);
  bool ok = false;
  for (int i = 0; i < 300 && !ok; ++i) {  // bounded wait for the cluster to agree (<= 15 s)
    ok = true;
    for (auto& n : nodes) {
      ok = ok && cache::testing::redis_query(n->port(), "CLUSTER INFO").find("cluster_state:ok") != std::string::npos;
    }
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(ok);
  expect_shared_through_redis(url, 5);
  // The chunks are spread over the masters (7 keys, 3 nodes: at least two hold some).
  int holding = 0;
  for (auto& n : nodes) holding += std::atoi(cache::testing::redis_query(n->port(), "DBSIZE").c_str()) > 0;
  EXPECT_GE(holding, 2);
}

// Redis unreachable at start, then started, then killed mid-run, then restarted: every request is
// answered (the client's 30 s timeout bounds it; a down node fails fast), each outage is logged
// once, counted, and the tier reconnects.
TEST_F(KvStoreE2ETest, RedisDownKilledAndRestartedNeverFailsARequest) {
  ASSERT_TRUE(redis_ok()) << kRedisMissing;
  const int port = cache::testing::free_port();
  const std::string node = "127.0.0.1:" + std::to_string(port);
  auto s = serve("redis-faults", {"--cache-ram", "0", "--cache-redis", "redis://" + node});
  int seed = 100;
  auto answered = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const auto p = prompt(seed++, 3 * kChunk + 1);
      // Null unless HTTP 200 with a body (no tokens at all is fine: an EOS came first).
      if (s->complete(p, 4).is_null()) return false;
    }
    return true;
  };
  EXPECT_TRUE(answered(3));
  EXPECT_GT(s->metric(tier_metric("kvstash_kv_tier_errors_total", "redis")), 0);
  EXPECT_EQ(count_substr(s->log(), "redis " + node + " unavailable"), 1) << s->log();

  auto redis = std::make_unique<RedisTestServer>(port);
  ASSERT_TRUE(redis->ready());
  auto stored = [&] { return std::atoi(cache::testing::redis_query(port, "DBSIZE").c_str()); };
  // A bounded wait (<= 7.5 s) for the reconnect: the backoff doubles to at most 5 s.
  auto until_stored = [&] {
    for (int i = 0; i < 150 && stored() == 0; ++i) {
      ASSERT_TRUE(answered(1)) << s->last_error();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  until_stored();
  EXPECT_GT(stored(), 0);
  EXPECT_EQ(count_substr(s->log(), "redis " + node + " reconnected"), 1) << s->log();

  redis->kill();
  const double errors_before = s->metric(tier_metric("kvstash_kv_tier_errors_total", "redis"));
  EXPECT_TRUE(answered(3));
  EXPECT_GT(s->metric(tier_metric("kvstash_kv_tier_errors_total", "redis")), errors_before);
  EXPECT_EQ(count_substr(s->log(), "redis " + node + " unavailable"), 2) << s->log();

  redis->start();
  ASSERT_TRUE(redis->ready());
  until_stored();
  EXPECT_GT(stored(), 0);
  EXPECT_EQ(count_substr(s->log(), "redis " + node + " reconnected"), 2) << s->log();
}

}  // namespace
}  // namespace kvstash::server::testing
