// --share-salted (issue 13): with it on both nodes, a tenant's salted chunks are announced and a
// peer using the same salt loads them; a request with another salt (or none) never gets them,
// since the salt is part of every chunk key. Real `kvstash serve` processes on loopback.
#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

TEST_F(ShareE2ETest, SharedSaltedChunksReachOnlyTheSameSalt) {
  auto a = node("a", {"--share-salted"});
  dht_port_ = dht_port_of(*a);
  ASSERT_GT(dht_port_, 0) << a->log();
  auto e = node("e", {"--share-salted", "--trust-keys", dir_.path() + "/trust-abc"});
  ASSERT_TRUE(a->ready() && e->ready());

  const auto doc = document(40);
  const double before = std::max(0.0, a->metric(kAnnounced));
  json mine = a->complete(doc, kMaxTokens, "tenant-1");
  ASSERT_FALSE(mine.is_null()) << a->last_error();
  EXPECT_EQ(cached_of(mine), 0);
  // Announced although salted (full chunks and the tail), none kept back.
  EXPECT_GE(a->wait_metric(kAnnounced, before + kFullChunks + 1), before + kFullChunks + 1) << a->log();
  EXPECT_EQ(a->metric("kvstash_share_kept_salted_total"), 0);

  // The same salt on E: loaded from A, token for token A's answer.
  json same = e->complete(doc, kMaxTokens, "tenant-1");
  ASSERT_FALSE(same.is_null()) << e->last_error();
  EXPECT_EQ(tokens_of(same), tokens_of(mine));
  EXPECT_GE(cached_of(same), kFullChunks * 256) << e->log();
  EXPECT_GE(e->metric(kPeerHits), kFullChunks);
  EXPECT_GE(a->metric("kvstash_share_served_chunks_total"), kFullChunks);
  EXPECT_EQ(a->metric("kvstash_share_refused_salted_total"), 0);

  // Another salt, and no salt: other keys, which nobody announced. E computes them itself, with
  // the same tokens, and A serves nothing more.
  const double served = a->metric("kvstash_share_served_chunks_total");
  const double hits = e->metric(kPeerHits);
  for (const std::string salt : {"tenant-2", ""}) {
    json other = e->complete(doc, kMaxTokens, salt);
    ASSERT_FALSE(other.is_null()) << e->last_error();
    EXPECT_EQ(tokens_of(other), tokens_of(mine)) << "salt '" << salt << "'";
    EXPECT_EQ(cached_of(other), 0) << "salt '" << salt << "'";
  }
  EXPECT_EQ(e->metric(kPeerHits), hits);
  EXPECT_EQ(a->metric("kvstash_share_served_chunks_total"), served);
}

}  // namespace
}  // namespace kvstash::share::testing
