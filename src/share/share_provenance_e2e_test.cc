// Provenance that survives (issue 31), seen from outside: real `kvstash serve` processes on
// loopback. Node B runs `--trust any --spot-check 0` and takes an unknown producer X's tampered KV
// unchecked (X: a relay in front of A that alters A's KV and signs it with its own valid key).
// Node C trusts only B. Neither before nor after B restarts does B hand out, as its own, X's KV,
// KV it computed on top of it, or an answer computed on it; C's greedy answers are A's (honest).
// A second test bans X (a failed spot check) and shows what derived from X gone, and the ban kept,
// across restarts.
#include "engine/engine.h"
#include "model/model.h"
#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

const std::string kRecordStores = "kvstash_response_cache_stores_total";
const std::string kRecordsUnchecked = "kvstash_response_cache_unchecked_total";
const std::string kRecordFetches = "kvstash_share_response_fetches_total";

// The document, then `extra` tokens of another: B computes chunks of it on top of X's KV.
std::vector<int> longer_than(const std::vector<int>& doc, int seed, int extra) {
  std::vector<int> out = doc;
  const std::vector<int> more = document(seed);
  out.insert(out.end(), more.begin(), more.begin() + extra);
  return out;
}

// The chunk keys (256 tokens each) of a prompt's full chunks, as the engine makes them.
std::vector<cache::ChunkKey> keys_of(const std::string& model_path, const std::vector<int>& prompt) {
  auto m = Model::load(model_path);
  EXPECT_TRUE(m);
  if (!m) return {};
  EngineOptions eo;
  eo.n_ctx = 64;
  eo.max_running = 1;
  auto engine = Engine::create(**m, eo);
  EXPECT_TRUE(engine);
  if (!engine) return {};
  const std::vector<std::int32_t> tokens(prompt.begin(), prompt.end());
  return cache::chunk_keys((*m)->fingerprint(), (*engine)->kv_format(), "", tokens, 256);
}

// How many of `keys` the node serves on its chunk endpoint (each answer: 200 or 404).
int served_by(const ServeProcess& node, const std::vector<cache::ChunkKey>& keys) {
  int served = 0;
  for (const auto& key : keys) {
    auto r = node.client()->Get("/v1/kv/chunks/" + key.hex());
    EXPECT_TRUE(r);
    if (!r) continue;
    EXPECT_TRUE(r->status == 200 || r->status == 404) << r->status << " " << r->body;
    served += r->status == 200 ? 1 : 0;
  }
  return served;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(ShareE2ETest, UncheckedKvAndWhatIsComputedOnItNeverLeaveAsTheRelaysOwnEvenAfterARestart) {
  const std::vector<std::string> records = {"--response-cache", "16MiB"};
  Relay relay;  // X: A's KV, altered, signed with the relay's own key
  relay.mode(Relay::kTamperedAndResigned);
  auto a = node("a", with({"--peer-url", relay.url()}, records));
  ASSERT_TRUE(a->ready());
  relay.target(a->port());
  dht_port_ = dht_port_of(*a);
  ASSERT_GT(dht_port_, 0) << a->log();
  const std::vector<std::string> b_args = with({"--trust", "any", "--spot-check", "0", "--cache-disk", dir_.path() + "/b-disk"}, records);
  auto b = node("b", b_args);
  write_trust("trust-b", {"b"});
  auto c = node("c", with({"--trust-keys", dir_.path() + "/trust-b"}, records));
  for (auto* p : {a.get(), b.get(), c.get()}) ASSERT_GE(p->wait_metric("kvstash_share_dht_nodes", 2), 2) << p->log();

  const auto doc = document(70);
  const auto longer = longer_than(doc, 71, 280);  // 2280 tokens: chunk 7 is B's, on X's tail
  const auto keys = keys_of(model_, longer);
  ASSERT_EQ(keys.size(), 8u);
  const auto truth = produce(*a, doc);

  // B takes X's altered KV unchecked and computes on top of it.
  json taken = b->complete(doc, kMaxTokens);
  ASSERT_FALSE(taken.is_null()) << b->last_error();
  EXPECT_GE(cached_of(taken), kFullChunks * 256) << b->log();
  EXPECT_GE(b->metric("kvstash_share_unchecked_chunks_total"), kFullChunks);
  ASSERT_FALSE(b->complete(longer, kMaxTokens).is_null()) << b->last_error();
  ASSERT_TRUE(b->wait_writes_done()) << b->log();

  // (a) No restart: B serves none of them (X's or its own on X's), announces none, signs no answer.
  EXPECT_EQ(served_by(*b, keys), 0);
  EXPECT_GE(b->metric("kvstash_share_refused_unchecked_total"), static_cast<double>(keys.size()));
  EXPECT_GE(b->metric("kvstash_share_kept_unchecked_total"), 1);  // its chunk 7 and tail
  EXPECT_EQ(b->metric("kvstash_share_announced_chunks"), 0);
  EXPECT_EQ(b->metric(kRecordStores), 0);
  EXPECT_GE(b->metric(kRecordsUnchecked), 2);

  json c_doc = c->complete(doc, kMaxTokens);
  EXPECT_EQ(tokens_of(c_doc), truth) << text_of(c_doc);
  json c_longer = c->complete(longer, kMaxTokens);
  ASSERT_FALSE(c_longer.is_null()) << c->last_error();
  EXPECT_LE(c->metric(kPeerHits), 0);
  EXPECT_LE(c->metric(kRecordFetches), 0);
  EXPECT_GE(c->metric(rejections("untrusted")), 1);  // X's own offers: signed by X, not B

  // (b) B restarts on the same disk: the chunks are still there, and still only B's to use.
  b->terminate();
  ASSERT_EQ(b->wait_exit(), 0) << b->log();
  b = node("b", b_args, 1);
  ASSERT_TRUE(b->ready());
  ASSERT_GE(b->wait_metric("kvstash_share_dht_nodes", 1), 1) << b->log();
  EXPECT_EQ(served_by(*b, keys), 0);
  json again = b->complete(longer, kMaxTokens);  // usable locally: loaded from B's disk
  ASSERT_FALSE(again.is_null()) << b->last_error();
  EXPECT_GE(cached_of(again), 8 * 256) << b->log();
  EXPECT_EQ(b->metric(kRecordStores), 0);
  EXPECT_GE(b->metric(kRecordsUnchecked), 1);
  EXPECT_EQ(b->metric("kvstash_share_announced_chunks"), 0);
  EXPECT_EQ(served_by(*b, keys), 0);

  // D, new, trusts only B: nothing of X's reaches it through B; its answers are the honest ones.
  auto d = node("d", with({"--trust-keys", dir_.path() + "/trust-b"}, records));
  ASSERT_GE(d->wait_metric("kvstash_share_dht_nodes", 2), 2) << d->log();
  json d_doc = d->complete(doc, kMaxTokens);
  EXPECT_EQ(tokens_of(d_doc), truth) << text_of(d_doc);
  json d_longer = d->complete(longer, kMaxTokens);
  EXPECT_EQ(cached_of(d_doc), 0);
  EXPECT_LE(cached_of(d_longer), static_cast<int>(doc.size()));  // its own pool's doc, nothing more
  EXPECT_LE(d->metric(kPeerHits), 0);
  EXPECT_LE(d->metric(kRecordFetches), 0);
  // The honest answer to the longer prompt: A's, computed from its own KV.
  json a_longer = a->complete(longer, kMaxTokens);
  EXPECT_EQ(tokens_of(c_longer), tokens_of(a_longer)) << text_of(c_longer);
  EXPECT_EQ(tokens_of(d_longer), tokens_of(a_longer)) << text_of(d_longer);
}

TEST_F(ShareE2ETest, ABanPurgesWhatDerivesFromTheProducerAndSurvivesRestarts) {
  auto boot = node("b", {});  // the DHT's bootstrap node, up throughout (E comes and goes)
  dht_port_ = dht_port_of(*boot);
  ASSERT_GT(dht_port_, 0) << boot->log();
  Relay relay;  // X, as above
  relay.mode(Relay::kTamperedAndResigned);
  auto a = node("a", {"--peer-url", relay.url()});
  ASSERT_TRUE(a->ready());
  relay.target(a->port());
  ASSERT_GE(a->wait_metric("kvstash_share_dht_nodes", 1), 1) << a->log();
  const std::string disk = dir_.path() + "/e-disk";
  auto e_args = [&](const char* spot_check) {
    return std::vector<std::string>{"--trust", "any", "--spot-check", spot_check, "--cache-disk", disk};
  };

  // 1. E takes X's KV of doc1 unchecked and computes on top of it (kept on its disk).
  const auto doc1 = document(80);
  const auto longer1 = longer_than(doc1, 81, 280);
  const auto truth1 = produce(*a, doc1);
  {
    auto e = node("e", e_args("0"));
    ASSERT_GE(e->wait_metric("kvstash_share_dht_nodes", 2), 2) << e->log();
    json got = e->complete(longer1, kMaxTokens);
    ASSERT_FALSE(got.is_null()) << e->last_error();
    EXPECT_GE(cached_of(got), kFullChunks * 256) << e->log();
    ASSERT_TRUE(e->wait_writes_done()) << e->log();
    e->terminate();
    ASSERT_EQ(e->wait_exit(), 0) << e->log();
  }

  // 2. E again, now checking every unknown chunk: X's KV of doc2 fails its check, X is banned, and
  //    every chunk naming X (doc1's, and E's own computed on them) is erased from E's disk.
  const auto doc2 = document(82);
  const auto truth2 = produce(*a, doc2);
  {
    auto e = node("e", e_args("1"), 1);
    ASSERT_GE(e->wait_metric("kvstash_share_dht_nodes", 2), 2) << e->log();
    json got2 = e->complete(doc2, kMaxTokens);
    EXPECT_EQ(tokens_of(got2), truth2) << text_of(got2);
    ASSERT_GE(e->wait_metric("kvstash_share_banned_producers", 1), 1) << e->log();
    EXPECT_GE(e->wait_metric("kvstash_share_purged_chunks_total", kFullChunks + 1), kFullChunks + 1) << e->log();
    json got1 = e->complete(doc1, kMaxTokens);  // nothing of X's is left to load
    EXPECT_EQ(tokens_of(got1), truth1) << text_of(got1);
    EXPECT_EQ(cached_of(got1), 0);
    ASSERT_TRUE(e->wait_writes_done()) << e->log();
    e->terminate();
    ASSERT_EQ(e->wait_exit(), 0) << e->log();
  }
  std::ifstream bans(key_path("e") + ".banned");
  std::string text((std::istreambuf_iterator<char>(bans)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find_first_of("0123456789abcdef"), std::string::npos) << "no ban file";

  // 3. After a restart the ban holds (X's chunks are refused outright) and E computes doc1 itself.
  auto e = node("e", e_args("1"), 2);
  EXPECT_EQ(e->metric("kvstash_share_banned_producers"), 1) << e->log();
  ASSERT_GE(e->wait_metric("kvstash_share_dht_nodes", 2), 2) << e->log();
  const auto doc3 = document(83);
  const auto truth3 = produce(*a, doc3);
  json got3 = e->complete(doc3, kMaxTokens);
  EXPECT_EQ(tokens_of(got3), truth3) << text_of(got3);
  EXPECT_GE(e->metric(rejections("banned")), 1);
  EXPECT_EQ(cached_of(got3), 0);
}

}  // namespace
}  // namespace kvstash::share::testing
