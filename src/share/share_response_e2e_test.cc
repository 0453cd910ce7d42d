// Response-cache records through the DHT (issue 13): real `kvstash serve` processes with
// --response-cache and --dht-port on loopback.
//
// "Byte for byte" here: the raw JSON body of B's hit equals A's own hit of the same request after
// the two values that must differ between any two answers (the response id and `created`) are set
// to placeholders in both.
#include <regex>

#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

struct Answer {
  int status = 0;
  std::string cache;  // x-kvstash-cache
  std::string key;    // x-kvstash-cache-key
  std::string body;
};

Answer post(const ServeProcess& s, const std::vector<int>& prompt, const std::string& salt = "") {
  json body = {{"model", s.model_id()}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 2}};
  if (!salt.empty()) body["cache_salt"] = salt;
  Answer a;
  auto r = s.client()->Post("/v1/completions", body.dump(), "application/json");
  if (!r) return a;
  a.status = r->status;
  a.cache = r->get_header_value("x-kvstash-cache");
  a.key = r->get_header_value("x-kvstash-cache-key");
  a.body = r->body;
  return a;
}

std::string without_id_and_created(std::string body) {
  body = std::regex_replace(body, std::regex(R"("id":"(chatcmpl|cmpl)-[0-9a-f]+")"), R"("id":"ID")");
  return std::regex_replace(body, std::regex(R"("created":[0-9]+)"), R"("created":0)");
}
std::string without_cached_tokens(std::string body) {
  return std::regex_replace(without_id_and_created(body), std::regex(R"("cached_tokens":[0-9]+)"), R"("cached_tokens":0)");
}

const std::string kRecordAnnounced = metric_with("kvstash_share_response_announcements_total", "result", "ok");
inline std::string record_rejections(const char* reason) {
  return metric_with("kvstash_share_response_rejections_total", "reason", reason);
}

std::vector<int> question(int seed) {
  std::vector<int> doc = document(seed);
  doc.resize(48);
  return doc;
}

TEST_F(ShareE2ETest, ResponseRecordsTravelThroughTheDhtToTrustingNodesOnly) {
  const std::vector<std::string> cache = {"--response-cache", "16MiB"};
  auto a = node("a", cache);
  dht_port_ = dht_port_of(*a);
  ASSERT_GT(dht_port_, 0) << a->log();
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), cache.begin(), cache.end());
    return extra;
  };
  auto b = node("b", with({"--trust-keys", dir_.path() + "/trust-abc"}));
  auto c = node("c", with({}));  // trusts only itself
  ASSERT_TRUE(a->ready() && b->ready() && c->ready());

  // 1. A answers a deterministic request (a miss, then its own hit) and announces the record.
  const auto prompt = question(1);
  const Answer a_miss = post(*a, prompt);
  ASSERT_EQ(a_miss.status, 200) << a_miss.body;
  EXPECT_EQ(a_miss.cache, "miss");
  ASSERT_GE(a->wait_metric(kRecordAnnounced, 1), 1) << a->log();
  const Answer a_hit = post(*a, prompt);
  ASSERT_EQ(a_hit.cache, "hit");

  // 2. B trusts A and never saw the request: it answers from A's record, byte for byte as A does.
  const Answer b_hit = post(*b, prompt);
  ASSERT_EQ(b_hit.status, 200) << b_hit.body;
  EXPECT_EQ(b_hit.cache, "hit") << b->log();
  EXPECT_EQ(b_hit.key, a_miss.key);
  EXPECT_EQ(without_id_and_created(b_hit.body), without_id_and_created(a_hit.body));
  // Fetched from A once; never again afterwards (the promotion into B's memory tier is read from
  // its write queue until written, so the next ask cannot miss it there).
  const double fetched = b->metric("kvstash_share_response_fetches_total");
  EXPECT_EQ(fetched, 1) << b->log();
  EXPECT_GE(b->metric(metric_with("kvstash_response_cache_tier_hits_total", "tier", "peers")), 1);
  // ... keeps it (a second ask is local) and announces itself as a provider.
  EXPECT_EQ(post(*b, prompt).cache, "hit");
  EXPECT_EQ(b->metric("kvstash_share_response_fetches_total"), fetched);
  EXPECT_GE(b->wait_metric(kRecordAnnounced, 1), 1) << b->log();
  auto held = b->client()->Get("/v1/kv/responses/" + a_miss.key);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->status, 200);

  // 3. C does not trust A (nor B, which re-serves A's signed record): it refuses the record,
  //    counts it, and computes the same answer itself.
  const Answer c_miss = post(*c, prompt);
  ASSERT_EQ(c_miss.status, 200) << c_miss.body;
  EXPECT_EQ(c_miss.cache, "miss");
  EXPECT_GE(c->metric(record_rejections("untrusted")), 1) << c->metrics();
  EXPECT_EQ(c->metric("kvstash_share_response_fetches_total"), 0);
  EXPECT_EQ(without_cached_tokens(c_miss.body), without_cached_tokens(a_miss.body));
  EXPECT_EQ(c->metric(record_rejections("signature")), 0);

  // 4. A salted request's record stays on A: not announced, refused when asked for directly, and
  //    B (same salt) computes it.
  const auto secret = question(2);
  const double announced = a->metric(kRecordAnnounced);
  const Answer mine = post(*a, secret, "tenant-1");
  ASSERT_EQ(mine.status, 200);
  EXPECT_EQ(mine.cache, "miss");
  EXPECT_GE(a->wait_metric("kvstash_share_response_kept_salted_total", 1), 1) << a->metrics();
  EXPECT_EQ(a->metric(kRecordAnnounced), announced);
  auto direct = a->client()->Get("/v1/kv/responses/" + mine.key);
  ASSERT_TRUE(direct);
  EXPECT_EQ(direct->status, 403) << direct->body;
  EXPECT_GE(a->metric("kvstash_share_response_refused_salted_total"), 1);
  const Answer theirs = post(*b, secret, "tenant-1");
  EXPECT_EQ(theirs.cache, "miss");
  EXPECT_EQ(theirs.key, mine.key);
  EXPECT_EQ(without_cached_tokens(theirs.body), without_cached_tokens(mine.body));
  EXPECT_EQ(b->metric("kvstash_share_response_fetches_total"), fetched);
}

}  // namespace
}  // namespace kvstash::share::testing
