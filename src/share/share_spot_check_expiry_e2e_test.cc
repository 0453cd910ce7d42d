// Spot checks whose KV never comes (issue 31): a check held for a chunk the node had already
// computed and stored itself waits for KV that will never be written again. Such checks used to
// stay forever, 256 of them turned checking off for the life of the process. Here E holds at most
// two (--spot-check-pending-max 2, the small stand-in for 256) for 5 s: a slow relay answers E's
// chunk fetches only after E gave up waiting, computed the document and stored it. The set fills,
// the rest are refused (dropped, never used unchecked), the two expire (counted), and afterwards a
// producer whose KV is wrong is still caught and banned.
#include <chrono>

#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

// A held check must outlive this node's own recompute of a 2,000-token document (well under 5 s in
// the release build; sanitizer builds run 5-15x slower, so they wait longer).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr const char* kExpiryMs = "20000";
#else
constexpr const char* kExpiryMs = "5000";
#endif

template <typename Pred>
bool eventually(Pred pred, int max_ms = 20000) {
  for (int i = 0; i < max_ms / 20; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

TEST_F(ShareE2ETest, ChecksWhoseKvNeverComesExpireAndAFullSetNeverTurnsCheckingOff) {
  Relay relay;
  relay.mode(Relay::kResignedByStranger);  // B's genuine KV vouched for by the relay's key: unknown to E
  auto a = node("a", {});                  // the DHT's first node
  ASSERT_TRUE(a->ready());
  dht_port_ = dht_port_of(*a);
  ASSERT_GT(dht_port_, 0) << a->log();
  auto b = node("b", {"--peer-url", relay.url()});
  relay.target(b->port());
  auto e = node("e", {"--trust", "any", "--spot-check", "1", "--spot-check-pending-max", "2", "--spot-check-expiry-ms",
                      kExpiryMs, "--peer-fetch-timeout-ms", "30000"});
  for (auto* p : {a.get(), b.get(), e.get()}) ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2), 2) << p->log();
  auto result = [](const char* r) { return metric_with("kvstash_share_spot_checks_total", "result", r); };
  const std::string pending = "kvstash_share_spot_checks_pending";

  // 1. The relay holds E's fetches of doc1; E gives up at its load deadline (--kv-load-timeout-ms),
  // computes doc1 and stores every chunk of it before any fetch is answered.
  const auto doc1 = document(61);
  const auto want1 = produce(*b, doc1);
  relay.hold(true);
  json got1 = e->complete(doc1, kMaxTokens);
  EXPECT_EQ(tokens_of(got1), want1) << text_of(got1);
  EXPECT_EQ(cached_of(got1), 0);
  EXPECT_GE(e->wait_metric("kvstash_share_announced_chunks", kFullChunks + 1, 20000), kFullChunks + 1);  // E stored doc1
  ASSERT_GE(relay.held(), 3) << "E fetches several chunks of a prefix at once";
  relay.hold(false);

  // 2. The late chunks verify: two are held for a check (the set's size), the rest refused as
  // misses, none used unchecked; E's KV for them was written already, so the two never complete.
  EXPECT_GE(e->wait_metric(pending, 2, 20000), 2) << e->metrics();
  EXPECT_GE(e->wait_metric(result("dropped"), 1, 20000), 1) << e->metrics();
  EXPECT_EQ(e->metric(pending), 2);
  EXPECT_EQ(e->metric("kvstash_share_unchecked_chunks_total"), 0);
  EXPECT_EQ(e->metric(result("passed")), 0);
  EXPECT_EQ(e->metric(result("failed")), 0);

  // 3. They expire, are counted, and the set is empty again.
  EXPECT_GE(e->wait_metric(result("expired"), 2, 60000), 2) << e->metrics();
  EXPECT_TRUE(eventually([&] { return e->metric(pending) == 0; })) << e->metrics();

  // 4. Checking still works: the relay now alters B's KV under its own key; E's check fails and bans it.
  relay.mode(Relay::kTamperedAndResigned);
  const auto doc2 = document(62);
  const auto want2 = produce(*b, doc2);
  json got2 = e->complete(doc2, kMaxTokens);
  EXPECT_EQ(tokens_of(got2), want2) << text_of(got2);
  EXPECT_GE(e->wait_metric(result("failed"), 1, 60000), 1) << e->metrics() << e->log();
  EXPECT_EQ(e->metric("kvstash_share_banned_producers"), 1);
  EXPECT_GE(e->metric(rejections("spot_check")), 1);
}

}  // namespace
}  // namespace kvstash::share::testing
