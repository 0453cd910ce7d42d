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
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "cache/chunk_key.h"
#include "cache/test_util.h"
#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"
#include "server/serve_process.h"
#include "share/manifest.h"
#include "share/peer_client.h"

namespace kvstash::share {
namespace {

using server::testing::cached_of;
using server::testing::json;
using server::testing::ServeProcess;
using server::testing::text_of;
using server::testing::tokens_of;

constexpr int kDocTokens = 2000;  // 7 full chunks of 256 and a 208-token tail
constexpr int kFullChunks = kDocTokens / 256;
constexpr int kMaxTokens = 8;

std::vector<int> document(int seed) {
  std::vector<int> out;
  std::uint32_t x = 2654435761u * static_cast<std::uint32_t>(seed + 1);
  for (int i = 0; i < kDocTokens; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(3 + static_cast<int>((x >> 8) % 240));
  }
  return out;
}

std::string metric_with(const char* family, const char* label, const char* value) {
  return std::string(family) + "{" + label + "=\"" + value + "\"}";
}
std::string rejections(const char* reason) { return metric_with("kvstash_share_rejections_total", "reason", reason); }
const std::string kAnnounced = metric_with("kvstash_share_announcements_total", "result", "ok");
const std::string kPeerHits = metric_with("kvstash_kv_tier_hits_total", "tier", "peers");

// A malicious relay: B announces the relay's URL as its own, and the relay answers each chunk
// request with B's chunk, altered according to `mode`.
class Relay {
 public:
  enum Mode { kForgedManifest, kTamperedKv, kResignedByStranger };

  Relay() : stranger_(identity::NodeIdentity::generate()) {
    server_.Get(R"(/v1/kv/chunks/([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
      auto real = fetch_chunk("http://127.0.0.1:" + std::to_string(target_.load()), req.matches[1], {});
      if (!real) {
        res.status = 404;
        return;
      }
      served_.fetch_add(1);
      auto manifest = decode_manifest(real->manifest);
      std::string manifest_out = real->manifest;
      cache::Bytes chunk = std::move(real->chunk);
      switch (mode_.load()) {
        case kForgedManifest:  // claims another position under the producer's signature
          manifest->meta.first_position += 256;
          manifest_out = encode_manifest(*manifest);
          break;
        case kTamperedKv: {  // other KV in a self-consistent chunk, the producer's manifest kept
          auto header = cache::parse_chunk_header(chunk);
          auto view = cache::decode_chunk(chunk, header->meta);
          cache::Bytes payload(view->payload.begin(), view->payload.end());
          for (std::size_t i = 0; i < payload.size(); i += 97) payload[i] ^= 0x40;
          chunk = *cache::encode_chunk(header->meta, payload);
          break;
        }
        case kResignedByStranger:  // the genuine chunk, vouched for by an unknown key
          manifest_out = encode_manifest(*make_manifest(chunk, stranger_));
          break;
      }
      res.set_header(kManifestHeader, hex_encode(manifest_out));
      res.set_content(std::string(chunk.begin(), chunk.end()), "application/octet-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Relay() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  void target(int port) { target_ = port; }
  void mode(Mode m) { mode_ = m; }
  int served() const { return served_.load(); }

 private:
  identity::NodeIdentity stranger_;
  httplib::Server server_;
  int port_ = 0;
  std::atomic<int> target_{0};
  std::atomic<Mode> mode_{kForgedManifest};
  std::atomic<int> served_{0};
  std::thread thread_;
};

class ShareE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
    model_ = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    for (const char* n : {"a", "b", "c", "d", "e"}) {
      auto id = identity::NodeIdentity::load_or_create(key_path(n));
      ASSERT_TRUE(id) << id.status().to_string();
      keys_[n] = id->public_key_hex();
    }
    write_trust("trust-abc", {"a", "b", "c"});
  }

  std::string key_path(const std::string& n) const { return dir_.path() + "/" + n + ".key"; }
  void write_trust(const std::string& name, const std::vector<std::string>& nodes) {
    std::ofstream out(dir_.path() + "/" + name);
    for (const auto& n : nodes) out << keys_[n] << "  # node " << n << "\n";
  }

  // A node of the test network; `extra` after the common flags.
  std::unique_ptr<ServeProcess> node(const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--ctx", "2304", "--cache-ram", "64MiB", "--identity", key_path(name),
                                     "--dht-port", "0", "--peer-negative-ttl-ms", "0"};
    if (dht_port_ > 0) {
      args.push_back("--dht-bootstrap");
      args.push_back("127.0.0.1:" + std::to_string(dht_port_));
    }
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<ServeProcess>(model_, args, dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << p->log();
    return p;
  }
  static int dht_port_of(const ServeProcess& p) {
    const std::string log = p.log();
    const auto at = log.find(" on udp port ");
    return at == std::string::npos ? 0 : std::atoi(log.c_str() + at + 13);
  }
  // The producer computes doc and announces its chunks (full chunks + a tail at least).
  std::vector<std::string> produce(ServeProcess& producer, const std::vector<int>& doc) {
    const double before = std::max(0.0, producer.metric(kAnnounced));
    json r = producer.complete(doc, kMaxTokens);
    EXPECT_FALSE(r.is_null()) << producer.last_error();
    EXPECT_EQ(cached_of(r), 0);
    EXPECT_GE(producer.wait_metric(kAnnounced, before + kFullChunks + 1, 20000), before + kFullChunks + 1) << producer.log();
    return tokens_of(r);
  }

  std::string model_;
  cache::testing::ScratchDir dir_;
  std::map<std::string, std::string> keys_;
  int dht_port_ = 0;
};

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
    ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2, 20000), 2) << p->log();
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
}  // namespace kvstash::share
