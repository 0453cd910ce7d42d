// The peer client's bounds (issue 31) against a real hostile peer process (hostile_peer.h): every
// request type ends at its one wall-clock deadline when the peer trickles its headers or its body,
// and at its byte cap (headers included) when the body never ends; and a well-behaved answer larger
// than the cap is refused.
#include "share/peer_client.h"

#include <gtest/gtest.h>

#include <thread>

#include "http/http_server.h"
#include "share/hostile_peer.h"

namespace kvstash::share {
namespace {

using testing::HostilePeer;
using Clock = std::chrono::steady_clock;
const std::string kKey(64, 'a');

struct Outcome {
  bool ok = false;
  double ms = 0;
};

// Every request kind once against the peer in its current mode.
std::vector<Outcome> every_request(const std::string& url, const FetchLimits& limits) {
  std::vector<Outcome> out;
  auto run = [&](auto&& f) {
    const auto start = Clock::now();
    const bool ok = f();
    out.push_back({ok, std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
  };
  run([&] { return static_cast<bool>(fetch_chunk(url, kKey, limits)); });
  run([&] { return static_cast<bool>(fetch_response_record(url, kKey, limits)); });
  run([&] { return static_cast<bool>(fetch_fragment(url, kKey, 0, limits)); });
  run([&] { return static_cast<bool>(put_fragment(url, kKey, 0, cache::Bytes(1000, 7), "set", "manifest", limits)); });
  return out;
}

TEST(PeerClient, TricklingPeersAreCutAtOneDeadline) {
  HostilePeer peer;
  ASSERT_TRUE(peer.ready());
  PeerIoCounters counters;
  FetchLimits limits;
  limits.timeout = std::chrono::milliseconds(400);  // each trickle sends a byte per 100 ms: 4+ reads
  limits.counters = &counters;
  for (const char* mode : {"trickle-headers", "trickle-body"}) {
    ASSERT_TRUE(peer.mode(mode));
    for (const Outcome& o : every_request(peer.url(), limits)) {
      EXPECT_FALSE(o.ok) << mode;
      EXPECT_GE(o.ms, 350) << mode;   // it was the deadline that ended it...
      EXPECT_LT(o.ms, 1400) << mode;  // ...and one deadline, not one per read (generous for a loaded machine)
    }
  }
  EXPECT_EQ(counters.requests.load(), 8u);
  EXPECT_EQ(counters.deadline_hit.load(), 8u);
  EXPECT_EQ(counters.cap_hit.load(), 0u);
}

TEST(PeerClient, AnEndlessBodyIsCutAtTheByteCap) {
  HostilePeer peer;
  ASSERT_TRUE(peer.mode("endless"));
  PeerIoCounters counters;
  FetchLimits limits;
  limits.timeout = std::chrono::milliseconds(20000);  // the cap ends it, long before this
  limits.max_bytes = 1 << 20;
  limits.counters = &counters;
  const auto outcomes = every_request(peer.url(), limits);
  for (const Outcome& o : outcomes) EXPECT_FALSE(o.ok);
  EXPECT_EQ(counters.cap_hit.load(), 4u);
  EXPECT_EQ(counters.deadline_hit.load(), 0u);
}

// Chunked bodies: a well-formed one is decoded (a chunk extension ignored), an endless one ends at
// the cap.
TEST(PeerClient, ChunkedBodiesAreDecodedAndCapped) {
  HostilePeer peer;
  ASSERT_TRUE(peer.mode("chunked"));
  FetchLimits limits;
  auto got = fetch_response_record(peer.url(), kKey, limits);
  ASSERT_TRUE(got) << got.status().to_string();
  EXPECT_EQ(std::string(got->begin(), got->end()), "hello, bounded world");
  ASSERT_TRUE(peer.mode("chunked-endless"));
  PeerIoCounters counters;
  limits.max_bytes = 1 << 20;
  limits.timeout = std::chrono::milliseconds(20000);
  limits.counters = &counters;
  EXPECT_FALSE(fetch_response_record(peer.url(), kKey, limits));
  EXPECT_EQ(counters.cap_hit.load(), 1u);
}

// A peer that keeps data flowing never lets recv block: the deadline must still end the fetch (it
// was checked only while waiting), and a body of one-byte chunks must decode in linear time. A
// chunk-size line that never ends is refused without waiting for the cap.
TEST(PeerClient, AFloodOfTinyChunksEndsAtTheDeadlineAndALongChunkLineIsRefused) {
  HostilePeer peer;
  ASSERT_TRUE(peer.mode("chunked-flood"));
  PeerIoCounters counters;
  FetchLimits limits;
  limits.max_bytes = std::uint64_t{1} << 30;  // the cap is far: only the deadline can end it
  limits.timeout = std::chrono::milliseconds(400);
  limits.counters = &counters;
  const auto start = Clock::now();
  EXPECT_FALSE(fetch_response_record(peer.url(), kKey, limits));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  EXPECT_EQ(counters.deadline_hit.load(), 1u);
  EXPECT_EQ(counters.cap_hit.load(), 0u);
  EXPECT_LT(ms, 3000) << "the deadline was 400 ms";
  ASSERT_TRUE(peer.mode("chunked-longline"));
  limits.timeout = std::chrono::milliseconds(20000);
  auto got = fetch_response_record(peer.url(), kKey, limits);
  ASSERT_FALSE(got);
  EXPECT_NE(got.status().message().find("chunk size line"), std::string::npos) << got.status().to_string();
  EXPECT_EQ(counters.cap_hit.load(), 0u);
}

// A real server with a well-formed answer: within the cap it is read whole, one byte past the cap
// (headers counted) it is refused.
TEST(PeerClient, TheCapCountsTheHeaders) {
  struct Chunky : http::Handler {
    void handle(http::Request, std::shared_ptr<http::Exchange> exchange) override {
      http::Response r;
      r.content_type = "application/octet-stream";
      r.headers.push_back({kManifestHeader, "abcd"});
      r.body.assign(10000, 'z');
      exchange->respond(std::move(r));
    }
  } handler;
  http::HttpServerOptions o;
  o.port = 0;
  auto server = http::HttpServer::start(o, handler);
  ASSERT_TRUE(server) << server.status().to_string();
  const std::string url = "http://127.0.0.1:" + std::to_string((*server)->port());
  FetchLimits limits;
  limits.max_bytes = 20000;
  auto got = fetch_chunk(url, kKey, limits);
  ASSERT_TRUE(got) << got.status().to_string();
  EXPECT_EQ(got->chunk.size(), 10000u);
  EXPECT_EQ(got->manifest, std::string("\xab\xcd"));
  limits.max_bytes = 10000;  // the body alone fits; with its headers it does not
  PeerIoCounters counters;
  limits.counters = &counters;
  EXPECT_FALSE(fetch_chunk(url, kKey, limits));
  EXPECT_EQ(counters.cap_hit.load(), 1u);
  (*server)->stop();
}

}  // namespace
}  // namespace kvstash::share
