// Erasure-coded sharing seen from outside: a producer with --erasure 4+2 places each chunk's six
// fragments on six holders (one behind a relay that can corrupt what it serves), then leaves. A
// node that never saw the document rebuilds its KV from any four good fragments: with a corrupt
// fragment among them (identified and replaced), and with two holders killed.
#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

TEST_F(ShareE2ETest, FourPlusTwoFragmentsSurviveACorruptHolderAndTwoKilledOnes) {
  Relay relay;
  write_trust("trust-p", {"p"});
  const std::vector<std::string> trust = {"--trust-keys", dir_.path() + "/trust-p"};
  std::vector<std::unique_ptr<ServeProcess>> holders;
  holders.push_back(node("h1", trust));
  ASSERT_TRUE(holders[0]->ready());
  dht_port_ = dht_port_of(*holders[0]);
  ASSERT_GT(dht_port_, 0) << holders[0]->log();
  for (int i = 2; i <= 6; ++i) {
    std::vector<std::string> args = trust;
    if (i == 4) args.insert(args.end(), {"--peer-url", relay.url()});  // h4's fragments pass through the relay
    holders.push_back(node("h" + std::to_string(i), args));
    if (i == 4) relay.target(holders.back()->port());
  }
  // Fragments go only to nodes whose signed directory entry names a key P trusts.
  write_trust("trust-h", {"h1", "h2", "h3", "h4", "h5", "h6"});
  auto p = node("p", {"--erasure", "4+2", "--trust-keys", dir_.path() + "/trust-h"});
  for (auto& h : holders) ASSERT_GE(h->wait_metric("kvstash_share_dht_nodes", 2), 2) << h->log();
  ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2), 2) << p->log();

  // P computes two documents; each chunk (7 full + the tail) becomes 6 fragments on 6 holders.
  const auto doc1 = document(41), doc2 = document(42);
  json r1 = p->complete(doc1, kMaxTokens), r2 = p->complete(doc2, kMaxTokens);
  ASSERT_FALSE(r1.is_null() || r2.is_null()) << p->last_error();
  const double fragments = 2 * (kFullChunks + 1) * 6;
  EXPECT_GE(p->wait_metric("kvstash_share_fragments_placed_total", fragments, 30000), fragments) << p->metrics();
  EXPECT_EQ(p->metric("kvstash_share_fragment_place_errors_total"), 0);
  for (auto& h : holders) EXPECT_GE(h->metric("kvstash_share_fragments_accepted_total"), 2 * (kFullChunks + 1)) << h->log();
  p->kill9();  // no whole-chunk provider is left

  auto e = node("e", trust);
  ASSERT_GE(e->wait_metric("kvstash_share_dht_nodes", 2), 2) << e->log();

  // 1. h4 serves corrupt fragments: each is identified by its hash and another index is used.
  relay.corrupt_fragments(true);
  json got1 = e->complete(doc1, kMaxTokens);
  EXPECT_EQ(tokens_of(got1), tokens_of(r1)) << text_of(got1) << "\n" << e->log();
  EXPECT_GE(cached_of(got1), kFullChunks * 256);
  EXPECT_GT(relay.corrupted(), 0);
  EXPECT_GE(e->metric(rejections("fragment")), 1);
  EXPECT_GE(e->metric("kvstash_share_chunks_reconstructed_total"), kFullChunks);

  // 2. Two holders die: the four left still hold one fragment of every chunk each.
  relay.corrupt_fragments(false);
  holders[4]->kill9();
  holders[5]->kill9();
  const double rebuilt = e->metric("kvstash_share_chunks_reconstructed_total");
  json got2 = e->complete(doc2, kMaxTokens);
  EXPECT_EQ(tokens_of(got2), tokens_of(r2)) << text_of(got2) << "\n" << e->log();
  EXPECT_GE(cached_of(got2), kFullChunks * 256);
  EXPECT_GE(e->metric("kvstash_share_chunks_reconstructed_total"), rebuilt + kFullChunks);
}

}  // namespace
}  // namespace kvstash::share::testing
