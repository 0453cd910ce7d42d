// ShareNode bans (issue 31): a ban purges the local tiers' chunks whose provenance names the banned
// producer, the response records and semantic-cache store's records it signed, and reaches the
// engine through on_ban; the ban is written to the ban file and holds after a restart, where the
// startup walk purges what was kept on the tiers from before.
#include "share/share_node.h"

#include <gtest/gtest.h>

#include <thread>

#include "cache/memory_tier.h"
#include "cache/response_record.h"
#include "cache/test_util.h"
#include "share/peers_tier.h"

namespace kvstash::share {
namespace {

cache::ChunkMeta meta_of(int n, const cache::Provenance& provenance) {
  cache::ChunkMeta m;
  m.key.bytes[0] = static_cast<std::uint8_t>(n);
  m.kv_format = "f16-test";
  m.token_count = 16;
  m.n_layers = 1;
  m.n_kv_heads = 1;
  m.head_dim = 4;
  m.element_type = 1;
  m.provenance = provenance;
  return m;
}

cache::Provenance unchecked_from(const identity::PublicKey& producer) {
  cache::Provenance p;
  p.trust = cache::ChunkTrust::kUnchecked;
  p.producers = {producer};
  return p;
}

void put_chunk(cache::TieredStore& store, const cache::ChunkMeta& meta) {
  auto bytes = cache::encode_chunk(meta, cache::Bytes(256, 7));
  ASSERT_TRUE(bytes.has_value());
  ASSERT_TRUE(store.tier(0).put(meta.key, *bytes));
}

// A response record in its envelope, said to be produced by `producer` (the purge reads the
// producer; the signature is the response cache's to check).
void put_record(cache::TieredStore& store, int n, const identity::PublicKey& producer) {
  static const std::string kStop = "stop", kText = "x";  // copied: GCC 12 misreads short literals (-Wrestrict)
  cache::ResponseRecord r;
  r.request_key.bytes[0] = static_cast<std::uint8_t>(n);
  r.request_key.bytes[1] = 0xee;
  r.producer = producer;
  r.prompt_tokens = 3;
  r.completion_tokens = 1;
  r.finish_reason = kStop;
  r.tokens = {5};
  r.text = kText;
  auto body = cache::encode_response_record(r);
  ASSERT_TRUE(body.has_value()) << body.status().to_string();
  auto bytes = cache::encode_chunk(cache::response_envelope_meta(r.request_key, r.model_fingerprint), *body);
  ASSERT_TRUE(bytes.has_value());
  ASSERT_TRUE(store.tier(0).put(r.request_key, *bytes));
}

cache::ChunkKey record_key(int n) {
  cache::ChunkKey k;
  k.bytes[0] = static_cast<std::uint8_t>(n);
  k.bytes[1] = 0xee;
  return k;
}

std::unique_ptr<cache::TieredStore> memory_store() {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(16 << 20));
  return std::make_unique<cache::TieredStore>(std::move(tiers));
}

bool held(cache::TieredStore& store, const cache::ChunkKey& key) { return store.tier(0).get(key).has_value(); }

// Polls (at most 10 s) until done() holds.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

TEST(ShareNodeBan, PurgesWhatDerivesFromTheProducerAndHoldsAfterARestart) {
  cache::testing::ScratchDir dir;
  auto self = std::make_shared<const identity::NodeIdentity>(identity::NodeIdentity::generate());
  auto trust = std::make_shared<const identity::TrustList>(self->public_key());
  const auto x = identity::NodeIdentity::generate().public_key();
  const auto y = identity::NodeIdentity::generate().public_key();
  ShareOptions options;
  options.ban_file = dir.path() + "/node.key.banned";

  cache::Provenance computed;
  computed.trust = cache::ChunkTrust::kComputed;
  cache::Provenance both = unchecked_from(y);  // computed here on KV of Y and of X
  both.producers.push_back(x);
  const auto from_x = meta_of(1, unchecked_from(x)), from_y = meta_of(2, unchecked_from(y));
  const auto derived = meta_of(3, both), ours = meta_of(4, computed);
  {
    auto node = ShareNode::start(options, self, trust);
    ASSERT_TRUE(node.has_value()) << node.status().to_string();
    auto kv = memory_store(), records = memory_store();
    for (const auto& m : {from_x, from_y, derived, ours}) put_chunk(*kv, m);
    put_record(*records, 1, x);
    put_record(*records, 2, y);
    (*node)->attach_store(kv.get());
    (*node)->attach_response_store(records.get());
    std::vector<identity::PublicKey> told;
    (*node)->on_ban([&](const identity::PublicKey& k) { told.push_back(k); });

    EXPECT_TRUE((*node)->chunk_acceptable(*cache::verify_chunk(*kv->tier(0).get(from_x.key))));
    (*node)->ban(x);
    EXPECT_TRUE((*node)->banned(x));
    EXPECT_FALSE((*node)->banned(y));
    EXPECT_EQ(told, std::vector<identity::PublicKey>{x});
    ShareCounters& c = (*node)->counters();
    EXPECT_TRUE(eventually([&] { return c.purged_chunks.load() >= 2 && c.purged_records.load() >= 1; }))
        << c.purged_chunks.load() << " chunks, " << c.purged_records.load() << " records";
    EXPECT_FALSE(held(*kv, from_x.key));
    EXPECT_FALSE(held(*kv, derived.key));  // names X among others
    EXPECT_TRUE(held(*kv, from_y.key));
    EXPECT_TRUE(held(*kv, ours.key));
    EXPECT_FALSE(held(*records, record_key(1)));
    EXPECT_TRUE(held(*records, record_key(2)));
    // What a load meets later (redis, a write racing the walk) is refused by the store's filter.
    cache::ChunkHeader header;
    header.meta = from_x;
    EXPECT_FALSE((*node)->chunk_acceptable(header));
    header.meta = from_y;
    EXPECT_TRUE((*node)->chunk_acceptable(header));
    (*node)->stop();
  }

  // Restarted on the same ban file: the ban holds, and the startup walk purges what the tiers
  // kept (here, chunks and a record put back as if they had survived on disk).
  auto node = ShareNode::start(options, self, trust);
  ASSERT_TRUE(node.has_value()) << node.status().to_string();
  EXPECT_TRUE((*node)->banned(x));
  EXPECT_TRUE((*node)->trust_policy().banned(x));
  EXPECT_FALSE((*node)->banned(y));
  auto kv = memory_store(), records = memory_store();
  for (const auto& m : {from_x, from_y, derived, ours}) put_chunk(*kv, m);
  put_record(*records, 1, x);
  (*node)->attach_store(kv.get());
  (*node)->attach_response_store(records.get());
  (*node)->set_peer_url("http://127.0.0.1:1");  // the startup walk runs once the URL is known
  ShareCounters& c = (*node)->counters();
  EXPECT_TRUE(eventually([&] { return c.purged_chunks.load() >= 2 && c.purged_records.load() >= 1; }));
  EXPECT_FALSE(held(*kv, from_x.key));
  EXPECT_FALSE(held(*kv, derived.key));
  EXPECT_TRUE(held(*kv, from_y.key));
  EXPECT_TRUE(held(*kv, ours.key));
  EXPECT_FALSE(held(*records, record_key(1)));
  (*node)->stop();
}

// A spot check compares the held chunk with this node's own KV of it, and only KV computed here from
// trusted KV is evidence: ours computed on Y's unchecked chunk ends X's check without a verdict
// (else Y could get honest X banned, or clear itself); ours computed cleanly passes equal KV and
// fails (and bans) different KV.
TEST(ShareNodeSpotCheck, OnlyKvComputedFromTrustedKvDecidesACheck) {
  auto self = std::make_shared<const identity::NodeIdentity>(identity::NodeIdentity::generate());
  auto trust = std::make_shared<const identity::TrustList>(self->public_key());
  const auto x = identity::NodeIdentity::generate().public_key();
  const auto y = identity::NodeIdentity::generate().public_key();
  ShareOptions options;
  options.trust_any = true;
  auto node = ShareNode::start(options, self, trust);
  ASSERT_TRUE(node.has_value()) << node.status().to_string();
  PeersTier tier(*node);
  ShareCounters& c = (*node)->counters();
  cache::Provenance computed;
  computed.trust = cache::ChunkTrust::kComputed;
  const auto now = SpotChecks::Clock::now();
  auto hold = [&](const cache::ChunkMeta& meta, std::uint8_t fill) {
    SpotChecks::Check check;
    check.meta = meta;
    check.producer = x;
    check.payload = cache::Bytes(256, fill);  // X's KV as received
    ASSERT_EQ((*node)->spot_checks().hold(std::move(check), now), SpotChecks::Hold::kQueued);
  };
  auto put_ours = [&](const cache::ChunkMeta& meta, std::uint8_t fill) {
    auto bytes = cache::encode_chunk(meta, cache::Bytes(256, fill));
    ASSERT_TRUE(bytes.has_value());
    ASSERT_TRUE(tier.put(meta.key, *bytes));
  };

  // Ours differs from X's but was computed on Y's unchecked KV: no verdict, X is not banned.
  hold(meta_of(1, computed), 7);
  put_ours(meta_of(1, unchecked_from(y)), 60);
  EXPECT_EQ(c.spot_checks_inconclusive.load(), 1u);
  EXPECT_EQ(c.spot_checks_failed.load(), 0u);
  EXPECT_FALSE((*node)->banned(x));
  EXPECT_EQ((*node)->spot_checks().pending(now), 0u);
  // Computed cleanly and equal: passed.
  hold(meta_of(2, computed), 7);
  put_ours(meta_of(2, computed), 7);
  EXPECT_EQ(c.spot_checks_passed.load(), 1u);
  EXPECT_FALSE((*node)->banned(x));
  // Computed cleanly and different: failed, X banned.
  hold(meta_of(3, computed), 7);
  put_ours(meta_of(3, computed), 60);
  EXPECT_EQ(c.spot_checks_failed.load(), 1u);
  EXPECT_TRUE((*node)->banned(x));
  (*node)->stop();
}

// A chunk kept from a producer this node trusted once (verified) or spot-checked under --trust any
// is refused once that trust is gone (its key off --trust-keys, --trust any dropped): the store's
// filter makes it a miss, so KV and answers built on it are never signed by this node.
TEST(ShareNodeProvenance, RelayedChunksOfProducersNoLongerTrustedAreRefused) {
  auto self = std::make_shared<const identity::NodeIdentity>(identity::NodeIdentity::generate());
  const auto x = identity::NodeIdentity::generate().public_key();
  const auto y = identity::NodeIdentity::generate().public_key();
  auto relayed = [](cache::ChunkTrust trust, const identity::PublicKey& producer) {
    cache::ChunkHeader h;
    h.meta = meta_of(1, {});
    h.meta.provenance.trust = trust;
    h.meta.provenance.producers = {producer};
    h.meta.provenance.manifest = "m";
    return h;
  };
  auto trust_x = std::make_shared<identity::TrustList>(self->public_key());
  trust_x->add(x);
  ShareOptions listed;
  auto a = ShareNode::start(listed, self, trust_x);
  ASSERT_TRUE(a.has_value()) << a.status().to_string();
  EXPECT_TRUE((*a)->chunk_acceptable(relayed(cache::ChunkTrust::kVerified, x)));
  EXPECT_FALSE((*a)->chunk_acceptable(relayed(cache::ChunkTrust::kVerified, y)));     // y is not (or no longer) trusted
  EXPECT_FALSE((*a)->chunk_acceptable(relayed(cache::ChunkTrust::kSpotChecked, y)));  // checked under a --trust any since dropped
  cache::ChunkHeader computed;
  computed.meta = meta_of(2, {});
  computed.meta.provenance.trust = cache::ChunkTrust::kComputed;
  EXPECT_TRUE((*a)->chunk_acceptable(computed));
  (*a)->stop();
  ShareOptions any;
  any.trust_any = true;
  auto b = ShareNode::start(any, self, std::make_shared<const identity::TrustList>(self->public_key()));
  ASSERT_TRUE(b.has_value()) << b.status().to_string();
  EXPECT_TRUE((*b)->chunk_acceptable(relayed(cache::ChunkTrust::kSpotChecked, y)));
  EXPECT_FALSE((*b)->chunk_acceptable(relayed(cache::ChunkTrust::kVerified, y)));  // verified needs the list
  (*b)->stop();
}

TEST(ShareNodeProvenance, OnlyComputedOrRelayedWithAManifestIsShareable) {
  cache::Provenance p;
  p.trust = cache::ChunkTrust::kComputed;
  EXPECT_TRUE(signed_here(p));
  EXPECT_TRUE(shareable(p));
  p.producers = {identity::PublicKey{}};  // computed on someone's unchecked KV would say unchecked
  EXPECT_FALSE(signed_here(p));
  p = {};
  p.trust = cache::ChunkTrust::kVerified;
  EXPECT_FALSE(shareable(p));  // no manifest kept: nothing to serve it under
  p.manifest.assign(16, 'm');  // opaque here
  EXPECT_TRUE(shareable(p));
  EXPECT_FALSE(signed_here(p));
  p.trust = cache::ChunkTrust::kUnchecked;
  EXPECT_FALSE(shareable(p));
  p.trust = cache::ChunkTrust::kUnknown;  // a version-1 chunk
  EXPECT_FALSE(shareable(p));
}

}  // namespace
}  // namespace kvstash::share
