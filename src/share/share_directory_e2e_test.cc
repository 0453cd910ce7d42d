// The signed node directory (issue 31), seen from outside: a producer with --erasure places
// fragments only on nodes whose directory entry is signed by their own key and trusted here
// (--trust-keys). A node whose key it does not trust, and entries put into the DHT by a stranger
// (a bare URL as before signing, a stranger's own signed entry, a trusted node's key with a
// stranger's signature, a trusted node's genuine entry past its expiry), all naming a real HTTP
// server that would take any fragment, receive none; each is counted by reason.
#include <chrono>

#include "share/directory_entry.h"
#include "share/dht_node.h"
#include "share/share_e2e_fixture.h"
#include "share/share_node.h"

namespace kvstash::share::testing {
namespace {

// Accepts every fragment PUT (201) and counts them: where a fragment must never go.
class FragmentSink : public http::Handler {
 public:
  FragmentSink() {
    http::HttpServerOptions o;
    o.port = 0;
    o.io_threads = 2;
    auto started = http::HttpServer::start(o, *this);
    EXPECT_TRUE(started) << started.status().to_string();
    if (started) server_ = std::move(*started);
  }
  ~FragmentSink() override {
    if (server_) server_->stop();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_ ? server_->port() : 0); }
  int puts() const { return puts_.load(); }
  void handle(http::Request req, std::shared_ptr<http::Exchange> exchange) override {
    http::Response r;
    if (req.method == "PUT" && req.path.rfind("/v1/kv/fragments/", 0) == 0) {
      puts_.fetch_add(1);
      r.status = 201;
      r.body = "{}";
    } else {
      r.status = 404;
    }
    exchange->respond(std::move(r));
  }

 private:
  std::unique_ptr<http::HttpServer> server_;
  std::atomic<int> puts_{0};
};

TEST_F(ShareE2ETest, FragmentsGoOnlyToTrustedSignedDirectoryEntries) {
  write_trust("trust-p", {"p"});
  write_trust("trust-h", {"h1", "h2", "h3"});
  const std::vector<std::string> trust_p = {"--trust-keys", dir_.path() + "/trust-p"};
  auto h1 = node("h1", trust_p);
  ASSERT_TRUE(h1->ready());
  dht_port_ = dht_port_of(*h1);
  ASSERT_GT(dht_port_, 0) << h1->log();
  auto h2 = node("h2", trust_p);
  auto h3 = node("h3", trust_p);
  auto u = node("u", trust_p);  // signs its entry, trusts P, but P does not trust u's key
  FragmentSink sink;

  // The test's own DHT node puts four entries naming the sink.
  DhtOptions o;
  o.bootstrap = {"127.0.0.1:" + std::to_string(dht_port_)};
  auto dht = DhtNode::start(o);
  ASSERT_TRUE(dht) << dht.status().to_string();
  const auto stranger = identity::NodeIdentity::generate();
  const auto h1_key = identity::NodeIdentity::load_or_create(key_path("h1"));
  ASSERT_TRUE(h1_key);
  const std::uint64_t now = unix_now_s();
  const std::chrono::seconds ttl(600);
  DirectoryEntry forged = *make_directory_entry(stranger, sink.url(), now, ttl);
  forged.node = h1_key->public_key();
  const std::vector<std::string> injected = {
      sink.url(),                                                                 // unsigned
      encode_directory_entry(*make_directory_entry(stranger, sink.url(), now, ttl)),  // untrusted
      encode_directory_entry(forged),                                             // signature
      encode_directory_entry(*make_directory_entry(*h1_key, sink.url(), now - 1200, ttl)),  // expired
  };
  for (const auto& v : injected) (*dht)->put(kDirectoryTopic, v);
  const std::string topic = kDirectoryTopic;
  // The four nodes' entries and the four injected ones, before P reads the directory.
  bool all_there = false;
  for (int i = 0; i < 100 && !all_there; ++i) {
    auto found = (*dht)->get(std::span<const std::string>(&topic, 1), std::chrono::milliseconds(500));
    all_there = found.front().providers.size() >= 8;
    if (!all_there) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(all_there) << "the directory never showed every entry";

  auto p = node("p", {"--erasure", "2+1", "--trust-keys", dir_.path() + "/trust-h"});
  ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2), 2) << p->log();
  json r = p->complete(document(81), kMaxTokens);
  ASSERT_FALSE(r.is_null()) << p->last_error();
  const double fragments = (kFullChunks + 1) * 3;  // 7 full chunks and the tail, 2+1 fragments each
  EXPECT_GE(p->wait_metric("kvstash_share_fragments_placed_total", fragments, 30000), fragments) << p->metrics();
  EXPECT_EQ(p->metric("kvstash_share_fragment_place_errors_total"), 0);
  double accepted = 0;
  for (auto* h : {h1.get(), h2.get(), h3.get()}) {
    const double n = h->metric("kvstash_share_fragments_accepted_total");
    EXPECT_GE(n, 1) << h->log();
    accepted += n;
  }
  EXPECT_EQ(accepted, fragments);
  EXPECT_EQ(u->metric("kvstash_share_fragments_accepted_total"), 0);
  EXPECT_EQ(u->metric("kvstash_share_fragments_refused_total"), 0);  // none was even sent
  EXPECT_EQ(sink.puts(), 0);
  EXPECT_EQ(p->metric("kvstash_share_directory_nodes"), 3);
  auto ignored = [&](const char* reason) { return p->metric(metric_with("kvstash_share_directory_ignored_total", "reason", reason)); };
  EXPECT_GE(ignored("unsigned"), 1) << p->metrics();
  EXPECT_GE(ignored("untrusted"), 2);  // u and the stranger
  EXPECT_GE(ignored("signature"), 1);
  EXPECT_GE(ignored("expired"), 1);
  (*dht)->stop();
}

}  // namespace
}  // namespace kvstash::share::testing
