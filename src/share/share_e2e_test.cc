// Peer-to-peer KV sharing seen from outside: five real `kvstash serve` processes on loopback, each
// with its own DHT (UDP) and HTTP port, joined through node A's DHT node.
//
//   A  first DHT node, honest producer          trusted by B, C, E
//   B  producer behind a malicious relay        (its --peer-url is the relay in this test)
//   C  honest, later the producer once A is gone
//   D  trusts nobody but itself
//   E  the node that never computed anything: it must answer from peers' KV or compute itself
//
// Every answer is compared token for token with the producer's own greedy output; /metrics says
// where the KV came from and why chunks were refused. Every wait is a bounded poll.
#include "engine/engine.h"
#include "model/model.h"
#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

TEST_F(ShareE2ETest, FiveNodesShareVerifiedKvAndRejectWhatFailsVerification) {
  Relay relay;
  auto a = node("a", {"--trust-keys", dir_.path() + "/trust-abc"});
  ASSERT_TRUE(a->ready());
  dht_port_ = dht_port_of(*a);
  ASSERT_GT(dht_port_, 0) << a->log();
  auto b = node("b", {"--trust-keys", dir_.path() + "/trust-abc", "--peer-url",
                      "http://127.0.0.1:" + std::to_string(relay.port())});
  relay.target(b->port());
  auto c = node("c", {"--trust-keys", dir_.path() + "/trust-abc"});
  auto d = node("d", {});
  auto e = node("e", {"--trust-keys", dir_.path() + "/trust-abc"});
  for (auto* p : {a.get(), b.get(), c.get(), d.get(), e.get()}) {
    ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2), 2) << p->log();
  }

  // 1. E never saw the document: its KV comes from A, verified, and the answer is A's.
  const auto doc = document(1);
  const auto want = produce(*a, doc);
  json got = e->complete(doc, kMaxTokens);
  EXPECT_EQ(tokens_of(got), want) << text_of(got) << "\n" << e->log();
  EXPECT_GE(cached_of(got), kFullChunks * 256);
  EXPECT_GE(e->metric(kPeerHits), kFullChunks);
  EXPECT_GE(e->metric("kvstash_share_fetched_bytes_total"), 1);
  EXPECT_GE(a->metric("kvstash_share_served_chunks_total"), kFullChunks);
  // What E fetched and verified, it now provides too.
  EXPECT_GE(e->wait_metric(kAnnounced, kFullChunks), kFullChunks);

  // `kvstash peers` shows E's identity, DHT neighbours and trust list.
  {
    const std::string cmd = std::string(KVSTASH_BINARY_DIR) + "/kvstash peers --url http://127.0.0.1:" +
                            std::to_string(e->port()) + " 2>&1";
    FILE* out = ::popen(cmd.c_str(), "r");
    ASSERT_NE(out, nullptr);
    std::string text;
    char buf[512];
    while (std::fgets(buf, sizeof buf, out)) text += buf;
    EXPECT_EQ(::pclose(out), 0) << text;
    EXPECT_NE(text.find("identity      " + keys_["e"]), std::string::npos) << text;
    EXPECT_NE(text.find("trusts        " + keys_["a"]), std::string::npos) << text;
    EXPECT_NE(text.find("  neighbour   "), std::string::npos) << text;
  }

  // 2. D trusts neither A nor E: every chunk is refused as untrusted, D computes, same answer.
  json untrusting = d->complete(doc, kMaxTokens);
  EXPECT_EQ(tokens_of(untrusting), want) << text_of(untrusting);
  EXPECT_EQ(cached_of(untrusting), 0);
  EXPECT_GE(d->metric(rejections("untrusted")), 1);
  EXPECT_LE(d->metric(kPeerHits), 0);

  // 3. B's chunks reach peers only through the relay, which alters them three ways.
  const struct {
    Relay::Mode mode;
    const char* reason;
  } attacks[] = {{Relay::kForgedManifest, "signature"},
                 {Relay::kTamperedKv, "hash"},
                 {Relay::kResignedByStranger, "untrusted"}};
  int seed = 10;
  for (const auto& attack : attacks) {
    SCOPED_TRACE(attack.reason);
    relay.mode(attack.mode);
    const auto attacked = document(seed++);
    const auto truth = produce(*b, attacked);
    const double rejected = std::max(0.0, e->metric(rejections(attack.reason)));
    const int relayed = relay.served();
    json r = e->complete(attacked, kMaxTokens);
    EXPECT_EQ(tokens_of(r), truth) << text_of(r);
    EXPECT_EQ(cached_of(r), 0);  // nothing of B's reached E's engine
    EXPECT_GT(relay.served(), relayed);
    EXPECT_GT(e->metric(rejections(attack.reason)), rejected) << e->metrics();
  }

  // 4. Salted chunks stay on their node: not announced, refused when asked for directly.
  {
    const auto secret = document(20);
    const double announced = a->metric(kAnnounced);
    json mine = a->complete(secret, kMaxTokens, "tenant-1");
    ASSERT_FALSE(mine.is_null());
    ASSERT_GE(a->wait_metric("kvstash_share_kept_salted_total", kFullChunks), kFullChunks);
    EXPECT_EQ(a->metric(kAnnounced), announced);
    auto m = Model::load(model_);
    ASSERT_TRUE(m);
    EngineOptions eo;
    eo.n_ctx = 64;
    eo.max_running = 1;
    auto engine = Engine::create(**m, eo);
    ASSERT_TRUE(engine);
    const std::vector<std::int32_t> tokens(secret.begin(), secret.end());
    const auto keys = cache::chunk_keys((*m)->fingerprint(), (*engine)->kv_format(), "tenant-1", tokens, 256);
    ASSERT_EQ(keys.size(), static_cast<std::size_t>(kFullChunks));
    auto direct = a->client()->Get("/v1/kv/chunks/" + keys[0].hex());
    ASSERT_TRUE(direct);
    EXPECT_EQ(direct->status, 403) << direct->body;
    EXPECT_GE(a->metric("kvstash_share_refused_salted_total"), 1);
    // The same chunk unsalted is another key, which A never computed.
    const auto plain = cache::chunk_keys((*m)->fingerprint(), (*engine)->kv_format(), "", tokens, 256);
    EXPECT_EQ(a->client()->Get("/v1/kv/chunks/" + plain[0].hex())->status, 404);
    const double peer_hits = e->metric(kPeerHits);
    json theirs = e->complete(secret, kMaxTokens, "tenant-1");
    EXPECT_EQ(tokens_of(theirs), tokens_of(mine));
    EXPECT_EQ(cached_of(theirs), 0);
    EXPECT_EQ(e->metric(kPeerHits), peer_hits);
  }

  // 5. The bootstrap node goes away; the others still find each other's chunks.
  const double refused = e->metric(rejections("signature")) + e->metric(rejections("hash"));
  a->kill9();
  const auto later = document(30);
  const auto truth = produce(*c, later);
  const double hits = e->metric(kPeerHits);
  json after = e->complete(later, kMaxTokens);
  EXPECT_EQ(tokens_of(after), truth) << text_of(after) << "\n" << e->log();
  EXPECT_GE(cached_of(after), kFullChunks * 256);
  EXPECT_GE(e->metric(kPeerHits), hits + kFullChunks);
  EXPECT_EQ(e->metric(rejections("signature")) + e->metric(rejections("hash")), refused);  // honest C: none
}

TEST_F(ShareE2ETest, BadShareFlagsAreAClearErrorAndExitOne) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--dht-bootstrap", "127.0.0.1:4222"}, "need --dht-port"},
      {{"--dht-port", "0", "--dht-bootstrap", "nohost"}, "--dht-bootstrap"},
      {{"--dht-port", "0", "--peer-url", "ftp://x"}, "--peer-url"},
      {{"--dht-port", "0", "--no-kv-store"}, "needs the KV store"},
  };
  for (const Case& c : cases) {
    ServeProcess p(model_, c.args, dir_.path() + "/bad.log");
    EXPECT_FALSE(p.ready());
    EXPECT_EQ(p.wait_exit(), 1) << p.log();
    EXPECT_NE(p.log().find(c.message), std::string::npos) << p.log();
  }
}

}  // namespace
}  // namespace kvstash::share::testing
