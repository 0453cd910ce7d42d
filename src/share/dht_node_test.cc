// The DHT wrapper with real OpenDHT nodes on loopback (three in this process), and the small
// parsers of the share module.
#include "share/dht_node.h"

#include <gtest/gtest.h>

#include <thread>

#include "cache/test_util.h"
#include "share/peer_client.h"

namespace kvstash::share {
namespace {

using cache::testing::test_key;

std::unique_ptr<DhtNode> start_node(std::vector<std::string> bootstrap = {}) {
  auto node = DhtNode::start({.port = 0, .bootstrap = std::move(bootstrap)});
  EXPECT_TRUE(node) << node.status().to_string();
  return node ? std::move(*node) : nullptr;
}

// Polls (bounded: 60 s) until every node knows at least `n` others.
bool wait_joined(const std::vector<DhtNode*>& nodes, std::size_t n) {
  for (int i = 0; i < 1200; ++i) {
    bool all = true;
    for (auto* d : nodes) all = all && d->known_nodes() >= n;
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(DhtNodeTest, AnAnnouncedProviderIsFoundFromAnotherNode) {
  auto first = start_node();
  ASSERT_TRUE(first);
  ASSERT_GT(first->port(), 0);
  const std::string boot = "127.0.0.1:" + std::to_string(first->port());
  auto second = start_node({boot});
  auto third = start_node({boot});
  ASSERT_TRUE(second && third);
  ASSERT_TRUE(wait_joined({first.get(), second.get(), third.get()}, 2));

  std::atomic<int> done{0}, ok{0};
  for (const char* url : {"http://127.0.0.1:1111", "http://127.0.0.1:2222"}) {
    second->announce(test_key(1), url, [&](bool stored) {
      ok += stored;
      ++done;
    });
  }
  for (int i = 0; i < 2400 && done < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));  // <= 60 s
  ASSERT_EQ(done.load(), 2);
  EXPECT_EQ(ok.load(), 2);

  const std::vector<cache::ChunkKey> keys = {test_key(1), test_key(2)};
  // The lookups return as soon as every get completes; the bound only has to outlast a loaded machine.
  const auto found = third->lookup(keys, std::chrono::milliseconds(60000));
  ASSERT_EQ(found.size(), 2u);
  std::vector<std::string> providers = found[0].providers;
  std::sort(providers.begin(), providers.end());
  EXPECT_EQ(providers, (std::vector<std::string>{"http://127.0.0.1:1111", "http://127.0.0.1:2222"}));
  EXPECT_TRUE(found[1].providers.empty());
  EXPECT_TRUE(found[1].completed);
  // Announcing again refreshes the same value rather than adding one.
  std::atomic<bool> again{false};
  second->announce(test_key(1), "http://127.0.0.1:1111", [&](bool) { again = true; });
  for (int i = 0; i < 2400 && !again; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(first->lookup(keys, std::chrono::milliseconds(60000))[0].providers.size(), 2u);
  EXPECT_FALSE(third->neighbours().empty());
}

TEST(DhtNodeTest, ALookupWithNoNetworkEndsWithinItsTimeout) {
  auto alone = start_node({"127.0.0.1:9"});  // a bootstrap node that never answers
  ASSERT_TRUE(alone);
  const std::vector<cache::ChunkKey> keys = {test_key(3)};
  const auto found = alone->lookup(keys, std::chrono::milliseconds(200));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].providers.empty());
  alone->stop();
  alone->stop();  // idempotent
  EXPECT_TRUE(alone->lookup(keys, std::chrono::milliseconds(10))[0].providers.empty());
}

TEST(ShareParsersTest, HostPortPeerUrlAndHex) {
  EXPECT_EQ(*parse_host_port("127.0.0.1:4222"), std::make_pair(std::string("127.0.0.1"), 4222));
  EXPECT_EQ(*parse_host_port("[::1]:4222"), std::make_pair(std::string("::1"), 4222));
  for (const char* bad : {"", "host", ":1", "h:0", "h:70000", "h:12x"}) EXPECT_FALSE(parse_host_port(bad)) << bad;
  EXPECT_EQ(*parse_peer_url("http://10.0.0.2:8080/"), std::make_pair(std::string("10.0.0.2"), 8080));
  for (const char* bad : {"10.0.0.2:8080", "https://h:1", "http://h", "http://h:1/path", "http://h:0"}) {
    EXPECT_FALSE(parse_peer_url(bad)) << bad;
  }
  const std::string bytes("\x00\x01\xfe\xff", 4);
  EXPECT_EQ(hex_encode(bytes), "0001feff");
  EXPECT_EQ(*hex_decode("0001FEff"), bytes);
  EXPECT_FALSE(hex_decode("abc"));
  EXPECT_FALSE(hex_decode("zz"));
}

}  // namespace
}  // namespace kvstash::share
