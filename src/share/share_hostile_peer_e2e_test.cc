// Bounded peer I/O (issue 31), end to end: real `kvstash serve` processes and a hostile peer that
// is a real process misbehaving on the wire (hostile_peer.h). Node B runs with --peer-url set to
// the hostile peer, so every chunk and response record B computes is announced under the hostile
// peer's URL, and the victim V (which trusts B) is sent there to fetch them. While the hostile
// peer trickles its headers, trickles its body or sends an endless body:
//   - a prefix in V's own memory tier keeps its TTFT (within 50 ms of the median without the
//     attack) and its full cached-token count;
//   - a response-cache hit on V stays as fast;
//   - V's RSS does not grow past the peer byte cap (times the peer threads) plus a margin;
// and with --erasure, a holder that trickles its answer to fragment PUTs does not block V's
// store writer (V's chunks are all announced long before one peer deadline).
#include <algorithm>
#include <thread>

#include "share/hostile_peer.h"
#include "share/share_e2e_fixture.h"

namespace kvstash::share::testing {
namespace {

// The time and memory bounds of issue 31 are asserted in the release build (what ships, the first
// pass of scripts/test.sh). Under ASan (its quarantine keeps freed bodies resident) and TSan (5-15x
// slower threads) the same runs check everything else: cached tokens, answers, metrics.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kBoundsAsserted = false;
#else
constexpr bool kBoundsAsserted = true;
#endif

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int> short_doc(int seed) {  // one full chunk (256 tokens) and a tail: cheap to recompute
  std::vector<int> d = document(seed);
  d.resize(300);
  return d;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The options that bound V's peer I/O: one deadline per peer request, a byte cap, and a KV load
// deadline above the peer deadline (a stalled request stays stalled for the whole window).
const std::vector<std::string> kBounded = {"--peer-fetch-timeout-ms", "4000", "--peer-fetch-max-bytes", "4MiB",
                                           "--kv-load-timeout-ms", "6000"};
const std::string kDeadlineHits = metric_with("kvstash_share_peer_requests_total", "end", "deadline");
const std::string kCapHits = metric_with("kvstash_share_peer_requests_total", "end", "cap");

class HostilePeerE2ETest : public ShareE2ETest {
 protected:
  // B computes `doc` and announces at least `chunks` of it (under the hostile peer's URL).
  void produce_on(ServeProcess& b, const std::vector<int>& doc, int chunks) {
    const double before = std::max(0.0, b.metric(kAnnounced));
    ASSERT_FALSE(b.complete(doc, 1).is_null()) << b.last_error();
    ASSERT_GE(b.wait_metric(kAnnounced, before + chunks, 20000), before + chunks) << b.log();
  }
};

TEST_F(HostilePeerE2ETest, AStallingPeerNeverSlowsALocalHit) {
  HostilePeer hostile;
  ASSERT_TRUE(hostile.ready()) << "python3 and src/share/testdata/hostile_peer.py are needed";
  auto v = node("a", with(kBounded, {"--trust-keys", dir_.path() + "/trust-abc"}));
  dht_port_ = dht_port_of(*v);
  ASSERT_GT(dht_port_, 0) << v->log();
  auto b = node("b", {"--peer-url", hostile.url()});
  ASSERT_TRUE(v->ready() && b->ready());

  // What the hostile peer will be asked for: short documents B computed (3 windows of 4).
  constexpr int kPerWindow = 4;  // the remote lane's threads: none is refused (and recomputed at once)
  for (int i = 0; i < 3 * kPerWindow; ++i) produce_on(*b, short_doc(1000 + i), 1);

  // V's own prefix, then a local hit of it timed after another document pushed it out of V's KV
  // pool (so it comes from V's memory tier through the store, as a returning prompt does).
  const std::vector<int> local = document(1);
  ASSERT_FALSE(v->complete(local, 1).is_null()) << v->last_error();
  ASSERT_TRUE(v->wait_writes_done());
  int evictor = 0;
  auto local_hit = [&](std::vector<double>& ms, std::vector<int>& cached) {
    ASSERT_FALSE(v->complete(document(500 + evictor++), 1).is_null()) << v->last_error();
    const auto start = Clock::now();
    const json r = v->complete(local, 1);
    ms.push_back(ms_since(start));
    ASSERT_FALSE(r.is_null()) << v->last_error();
    cached.push_back(cached_of(r));
  };
  std::vector<double> base_ms, attack_ms;
  std::vector<int> base_cached, attack_cached;
  for (int i = 0; i < 3; ++i) local_hit(base_ms, base_cached);
  ASSERT_GE(base_cached.front(), kFullChunks * 256) << "the local prefix must come from V's store";
  for (int c : base_cached) EXPECT_EQ(c, base_cached.front());
  const std::uint64_t rss_before = rss_bytes(v->pid());
  ASSERT_GT(rss_before, 0u);

  int next = 0;
  for (const char* mode : {"trickle-headers", "trickle-body", "endless"}) {
    ASSERT_TRUE(hostile.mode(mode));
    const double deadline_hits = std::max(0.0, v->metric(kDeadlineHits));
    const double cap_hits = std::max(0.0, v->metric(kCapHits));
    // Requests for B's documents: V's peer fetches go to the hostile peer and stall there.
    std::vector<std::thread> stalled;
    for (int i = 0; i < kPerWindow; ++i) {
      stalled.emplace_back([&, doc = short_doc(1000 + next++)] { (void)v->complete(doc, 1); });
    }
    if (std::string(mode) != "endless") {
      // Every peer thread of V is held by the hostile peer before the local hits are timed.
      EXPECT_GE(hostile.wait_stat("open", 5), 5) << mode;
    }
    for (int i = 0; i < 2; ++i) local_hit(attack_ms, attack_cached);
    for (auto& t : stalled) t.join();
    if (std::string(mode) == "endless") {
      EXPECT_GT(v->wait_metric(kCapHits, cap_hits + 1, 10000), cap_hits) << "the endless bodies end at the cap";
      const std::uint64_t rss_after = rss_bytes(v->pid());
      // At most the peer threads' answers at the cap (4 x 4 MiB, twice over for buffer growth)
      // plus a margin for the documents V computed meanwhile.
      std::printf("victim RSS %.1f MiB before the endless bodies, %.1f MiB after\n", rss_before / 1048576.0,
                  rss_after / 1048576.0);
      if (kBoundsAsserted) {
        EXPECT_LT(rss_after, rss_before + std::uint64_t{32 + 64} * (1 << 20))
            << "RSS grew from " << rss_before << " to " << rss_after;
      }
      EXPECT_GT(hostile.stats()["bytes_sent"].get<long>(), 4L << 20) << "the hostile peer did send an endless body";
    } else {
      EXPECT_GT(v->wait_metric(kDeadlineHits, deadline_hits + 1, 10000), deadline_hits) << mode;
    }
  }
  ASSERT_EQ(attack_ms.size(), 6u);
  std::printf("local hit TTFT: median %.1f ms alone, %.1f ms under attack; cached tokens %d\n", median(base_ms),
              median(attack_ms), base_cached.front());
  for (int c : attack_cached) EXPECT_EQ(c, base_cached.front()) << "a local hit keeps its cached tokens";
  if (kBoundsAsserted) {
    EXPECT_LE(median(attack_ms), median(base_ms) + 50)
        << "local hit TTFT: " << median(base_ms) << " ms alone, " << median(attack_ms) << " ms under attack";
  }
  EXPECT_GT(hostile.stats()["chunk"].get<long>(), 0);
  // The documents that pushed the prefix out of V's pool came while every peer thread was held:
  // their peer lookups were refused at once (counted), not queued behind the stalled ones.
  EXPECT_GT(v->metric(metric_with("kvstash_kv_store_remote_dropped_total", "what", "load")), 0);
}

TEST_F(HostilePeerE2ETest, AStallingPeerNeverSlowsALocalResponseCacheHit) {
  HostilePeer hostile;
  ASSERT_TRUE(hostile.ready());
  const std::vector<std::string> cache = {"--response-cache", "16MiB"};
  auto v = node("a", with(with(kBounded, cache), {"--trust-keys", dir_.path() + "/trust-abc"}));
  dht_port_ = dht_port_of(*v);
  ASSERT_GT(dht_port_, 0) << v->log();
  auto b = node("b", with({"--peer-url", hostile.url()}, cache));
  ASSERT_TRUE(v->ready() && b->ready());
  const std::string kRecordAnnounced = metric_with("kvstash_share_response_announcements_total", "result", "ok");
  auto question = [](int seed) {
    std::vector<int> q = document(seed);
    q.resize(48);
    return q;
  };
  auto ask = [](ServeProcess& s, const std::vector<int>& prompt) -> std::pair<std::string, double> {
    json body = {{"model", s.model_id()}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
    const auto start = Clock::now();
    auto r = s.client()->Post("/v1/completions", body.dump(), "application/json");
    const double ms = ms_since(start);
    return {r && r->status == 200 ? r->get_header_value("x-kvstash-cache") : "error", ms};
  };
  // B's records, announced under the hostile peer's URL.
  constexpr int kStalled = 12;
  for (int i = 0; i < kStalled; ++i) {
    const double before = std::max(0.0, b->metric(kRecordAnnounced));
    ASSERT_EQ(ask(*b, question(2000 + i)).first, "miss");
    ASSERT_GE(b->wait_metric(kRecordAnnounced, before + 1, 20000), before + 1) << b->log();
  }
  // V's own record, and its hits without the attack.
  const std::vector<int> mine = question(1);
  ASSERT_EQ(ask(*v, mine).first, "miss");
  ASSERT_TRUE(v->wait_writes_done());
  std::vector<double> base_ms, attack_ms;
  for (int i = 0; i < 3; ++i) {
    auto [status, ms] = ask(*v, mine);
    ASSERT_EQ(status, "hit");
    base_ms.push_back(ms);
  }
  ASSERT_TRUE(hostile.mode("trickle-headers"));
  std::vector<std::thread> stalled;
  std::vector<double> stalled_ms(kStalled);
  for (int i = 0; i < kStalled; ++i) {
    stalled.emplace_back([&, i] { stalled_ms[i] = ask(*v, question(2000 + i)).second; });
  }
  EXPECT_GE(hostile.wait_stat("open", 5), 5);
  for (int i = 0; i < 3; ++i) {
    auto [status, ms] = ask(*v, mine);
    EXPECT_EQ(status, "hit");
    attack_ms.push_back(ms);
  }
  for (auto& t : stalled) t.join();
  std::printf("response-cache hit: median %.1f ms alone, %.1f ms under attack; stalled lookups took at most %.0f ms\n",
              median(base_ms), median(attack_ms), *std::max_element(stalled_ms.begin(), stalled_ms.end()));
  if (kBoundsAsserted) {
    EXPECT_LE(median(attack_ms), median(base_ms) + 50)
        << "response-cache hit: " << median(base_ms) << " ms alone, " << median(attack_ms) << " ms under attack";
  }
  // A lookup that went to the hostile peer waited at most the peer deadline (4 s), then V
  // answered it itself: never a 30 s stall.
  for (double ms : stalled_ms) EXPECT_LT(ms, 15000);
  EXPECT_GT(hostile.stats()["response"].get<long>(), 0);
  // 12 lookups for 4 peer threads: the rest were misses at once, counted.
  EXPECT_GT(v->metric(metric_with("kvstash_response_cache_peer_dropped_total", "what", "lookup")), 0);
}

TEST_F(HostilePeerE2ETest, AHolderTricklingItsPutAnswerNeverBlocksTheWriter) {
  HostilePeer hostile;
  ASSERT_TRUE(hostile.ready());
  ASSERT_TRUE(hostile.mode("trickle-headers"));
  write_trust("trust-cd", {"c", "d"});
  // D puts the hostile peer's URL in the node directory (every second), where V's fragment
  // placement picks holders from.
  auto d = node("d", {"--peer-url", hostile.url(), "--peer-reannounce-s", "1"});
  dht_port_ = dht_port_of(*d);
  ASSERT_GT(dht_port_, 0) << d->log();
  auto v = node("c", {"--erasure", "2+1", "--peer-fetch-timeout-ms", "3000", "--trust-keys", dir_.path() + "/trust-cd"});
  ASSERT_TRUE(v->ready() && d->ready());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // D's directory entry is out

  json r = v->complete(document(3), kMaxTokens);
  ASSERT_FALSE(r.is_null()) << v->last_error();
  const auto computed = Clock::now();
  // Every chunk is announced by the store's writer, one after the other; a writer blocked by a
  // placement would take one peer deadline (3 s) per chunk.
  const double announced = v->wait_metric(kAnnounced, kFullChunks + 1, 20000);
  const double ms = ms_since(computed);
  EXPECT_GE(announced, kFullChunks + 1) << v->log();
  if (kBoundsAsserted) {
    EXPECT_LT(ms, 2500) << "the writer waited on a fragment PUT";
  }
  std::printf("all %d chunks announced %.0f ms after the answer (one peer deadline: 3000 ms)\n", kFullChunks + 1, ms);
  EXPECT_GE(hostile.wait_stat("fragment-put", 1), 1) << "V placed fragments on the hostile holder";
  EXPECT_GT(v->wait_metric(kDeadlineHits, 1, 10000), 0) << "the trickled PUT answers ended at the deadline";
}

}  // namespace
}  // namespace kvstash::share::testing
