// --trust any with spot checks, seen from outside: node E uses chunks of producers it does not
// know only after recomputing them (--spot-check 1: every one). An honest producer running another
// SIMD path passes (the KV differs by float rounding only, within the tolerance; the largest
// difference is printed for docs/p2p-sharing.md); a relay that alters KV and signs it with its own
// valid key fails, is banned, and its next chunks are refused outright. Every answer is still the
// producer's own greedy output.
//
// A prompt of 16·k tokens (whole blocks) is the case that used to dodge the check: E looks up its
// tail without the last block, is refused the producer's tail for a check, then computes and stores
// the whole tail, and its KV of the held key reaches the peers tier only as a prefix alias.
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

TEST_F(ShareE2ETest, TrustAnySpotChecksPassHonestKvAndBanAProducerWhoseKvIsWrong) {
  Relay relay;
  relay.mode(Relay::kTamperedAndResigned);
  ::setenv("KVSTASH_SIMD", "scalar", 1);  // A's kernels: another SIMD path than E's
  auto a = node("a", {});
  ::unsetenv("KVSTASH_SIMD");
  ASSERT_TRUE(a->ready());
  dht_port_ = dht_port_of(*a);
  ASSERT_GT(dht_port_, 0) << a->log();
  auto b = node("b", {"--peer-url", relay.url()});
  relay.target(b->port());
  auto e = node("e", {"--trust", "any", "--spot-check", "1"});
  for (auto* p : {a.get(), b.get(), e.get()}) ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2), 2) << p->log();
  const std::string passed = metric_with("kvstash_share_spot_checks_total", "result", "passed");
  const std::string failed = metric_with("kvstash_share_spot_checks_total", "result", "failed");

  // 1. A is unknown to E but honest: its chunk is recomputed, compared, and passes.
  const auto doc1 = document(51);
  const auto want1 = produce(*a, doc1);
  json got1 = e->complete(doc1, kMaxTokens);
  EXPECT_EQ(tokens_of(got1), want1) << text_of(got1);
  EXPECT_GE(e->wait_metric(passed, 1), 1) << e->metrics();
  EXPECT_EQ(e->metric(failed), 0);
  EXPECT_EQ(e->metric("kvstash_share_banned_producers"), 0);
  const double diff = e->metric("kvstash_share_spot_check_max_abs_diff");
  std::cout << "spot check, scalar (A) vs this machine's default SIMD path (E): max |diff| = " << diff << "\n";
  EXPECT_GE(diff, 0);

  // 2. B's KV, altered by the relay and signed with the relay's own key: the check fails, banned.
  const auto doc2 = document(52);
  const auto want2 = produce(*b, doc2);
  json got2 = e->complete(doc2, kMaxTokens);
  EXPECT_EQ(tokens_of(got2), want2) << text_of(got2);
  EXPECT_GE(e->wait_metric(failed, 1), 1) << e->metrics();
  EXPECT_EQ(e->metric("kvstash_share_banned_producers"), 1);
  EXPECT_GE(e->metric(rejections("spot_check")), 1);

  // 3. The banned producer's chunks are refused before any check.
  const auto doc3 = document(53);
  const auto want3 = produce(*b, doc3);
  json got3 = e->complete(doc3, kMaxTokens);
  EXPECT_EQ(tokens_of(got3), want3) << text_of(got3);
  EXPECT_GE(e->metric(rejections("banned")), 1);
  EXPECT_EQ(cached_of(got3), 0);
}

std::vector<int> head(const std::vector<int>& doc, int n) { return std::vector<int>(doc.begin(), doc.begin() + n); }

// Polls until pred() holds or max_ms pass; pred()'s last value.
template <typename Pred>
bool eventually(Pred pred, int max_ms = 20000) {
  for (int i = 0; i < max_ms / 20; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

TEST_F(ShareE2ETest, APromptOfWholeBlocksCompletesItsSpotCheckThroughItsAlias) {
  static_assert(kDocTokens % 16 == 0, "the document is a prompt of whole blocks");
  // E computes the full chunks itself first (a prompt under one block past them: no tail), so that
  // its second request looks up nothing but the tail. The producer's prompt ends 12 tokens short
  // of the document: its tail is every block of the document's last chunk but one, exactly the
  // longest tail E asks for (E leaves the block holding its last token to compute).
  constexpr int kOwn = kFullChunks * 256 + 8;
  constexpr int kProducer = kDocTokens - 12;
  Relay relay;
  relay.mode(Relay::kTamperedAndResigned);
  auto a = node("a", {});
  ASSERT_TRUE(a->ready());
  dht_port_ = dht_port_of(*a);
  ASSERT_GT(dht_port_, 0) << a->log();
  auto b = node("b", {"--peer-url", relay.url()});
  relay.target(b->port());
  auto e = node("e", {"--trust", "any", "--spot-check", "1"});
  for (auto* p : {a.get(), b.get(), e.get()}) ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2), 2) << p->log();
  const std::string passed = metric_with("kvstash_share_spot_checks_total", "result", "passed");
  const std::string failed = metric_with("kvstash_share_spot_checks_total", "result", "failed");
  const std::string pending = "kvstash_share_spot_checks_pending";

  // 1. A (unknown to E, honest) holds the tail; E's check of it completes through E's alias.
  const auto doc1 = document(54);
  ASSERT_FALSE(e->complete(head(doc1, kOwn), kMaxTokens).is_null()) << e->last_error();
  produce(*a, head(doc1, kProducer));
  EXPECT_EQ(e->metric(passed), 0);  // nothing of doc1 came from a peer yet
  json got1 = e->complete(doc1, kMaxTokens);
  EXPECT_GE(e->wait_metric(passed, 1, 20000), 1) << e->metrics();
  EXPECT_EQ(e->metric(failed), 0);
  EXPECT_TRUE(eventually([&] { return e->metric(pending) == 0; })) << e->metrics();
  json want1 = a->complete(doc1, kMaxTokens);
  EXPECT_EQ(tokens_of(got1), tokens_of(want1)) << text_of(got1);

  // 2. The same shape from B through the relay, which alters the KV and signs it with its own
  // key: E's check of the tail fails through the alias, and the relay's key is banned.
  const auto doc2 = document(55);
  ASSERT_FALSE(e->complete(head(doc2, kOwn), kMaxTokens).is_null()) << e->last_error();
  produce(*b, head(doc2, kProducer));
  const int served_before = relay.served();
  json got2 = e->complete(doc2, kMaxTokens);
  EXPECT_GE(e->wait_metric(failed, 1, 20000), 1) << e->metrics();
  EXPECT_EQ(e->metric("kvstash_share_banned_producers"), 1);
  EXPECT_GT(relay.served(), served_before);  // the tail went through the relay
  EXPECT_TRUE(eventually([&] { return e->metric(pending) == 0; })) << e->metrics();
  json want2 = a->complete(doc2, kMaxTokens);
  EXPECT_EQ(tokens_of(got2), tokens_of(want2)) << text_of(got2);
}

}  // namespace
}  // namespace kvstash::share::testing
