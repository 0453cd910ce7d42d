// Providers that come and go (issue 13): chunks kept on disk across a restart are offered to peers
// again (the restarted node announces what its disk tier holds before any request reaches it), and
// a chunk with several providers is fetched from one that answers when another is gone. Real
// `kvstash serve` processes on loopback.
#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

TEST_F(ShareE2ETest, ChunksOnDiskFromBeforeARestartAreAnnouncedAtStart) {
  auto b = node("b", {});  // the DHT's bootstrap node, up throughout
  dht_port_ = dht_port_of(*b);
  ASSERT_GT(dht_port_, 0) << b->log();
  const std::string disk = dir_.path() + "/a-disk";
  const std::vector<std::string> a_args = {"--cache-disk", disk};

  const auto doc = document(50);
  std::vector<std::string> truth;
  {
    auto a = node("a", a_args);
    ASSERT_TRUE(a->ready());
    truth = produce(*a, doc);
    ASSERT_TRUE(a->wait_writes_done()) << a->log();
    a->terminate();
    ASSERT_EQ(a->wait_exit(), 0) << a->log();
  }

  // The same node restarted on the same disk: no request yet, its chunks are announced anew (full
  // chunks and the tail), under its new HTTP address.
  auto a = node("a", a_args, 1);
  ASSERT_TRUE(a->ready());
  EXPECT_GE(a->wait_metric("kvstash_share_startup_announced_total", kFullChunks + 1), kFullChunks + 1) << a->log();
  EXPECT_GE(a->wait_metric(kAnnounced, kFullChunks + 1), kFullChunks + 1) << a->log();

  // E, new, loads the document from the restarted A (the old address, also still in the DHT,
  // no longer answers).
  auto e = node("e", {"--trust-keys", dir_.path() + "/trust-abc"});
  ASSERT_TRUE(e->ready());
  json r = e->complete(doc, kMaxTokens);
  ASSERT_FALSE(r.is_null()) << e->last_error();
  EXPECT_EQ(tokens_of(r), truth);
  EXPECT_GE(cached_of(r), kFullChunks * 256) << e->log();
  EXPECT_GE(e->metric(kPeerHits), kFullChunks);
  EXPECT_GE(a->metric("kvstash_share_served_chunks_total"), kFullChunks);
}

TEST_F(ShareE2ETest, AChunkWithTwoProvidersIsFetchedFromTheLiveOne) {
  auto b = node("b", {});  // the DHT's bootstrap node, up throughout
  dht_port_ = dht_port_of(*b);
  ASSERT_GT(dht_port_, 0) << b->log();
  auto a = node("a", {});
  auto c = node("c", {});
  ASSERT_TRUE(a->ready() && c->ready());
  const auto doc = document(60);
  const auto truth = produce(*a, doc);
  EXPECT_EQ(produce(*c, doc), truth);  // C computes it too: every chunk has two providers

  a->kill9();  // one provider gone; its announcements stay in the DHT until their TTL
  auto e = node("e", {"--trust-keys", dir_.path() + "/trust-abc"});
  ASSERT_TRUE(e->ready());
  json r = e->complete(doc, kMaxTokens);
  ASSERT_FALSE(r.is_null()) << e->last_error();
  EXPECT_EQ(tokens_of(r), truth);
  EXPECT_GE(cached_of(r), kFullChunks * 256) << e->log();
  EXPECT_GE(e->metric(kPeerHits), kFullChunks);
  EXPECT_GE(c->metric("kvstash_share_served_chunks_total"), kFullChunks);
  // Each chunk whose dead provider came first cost one refused connection (order is the DHT's).
  std::cout << "fetches from the dead provider first: " << e->metric("kvstash_share_fetch_errors_total") << "\n";
}

}  // namespace
}  // namespace kvstash::share::testing
