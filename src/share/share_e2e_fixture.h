// For the peer-sharing end-to-end tests (header only, test code): real `kvstash serve` processes
// on loopback joined through one DHT node, deterministic documents, and a malicious relay that
// sits behind a node's --peer-url and alters what it forwards.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "cache/chunk_key.h"
#include "cache/test_util.h"
#include "http/http_server.h"
#include "modelgen/test_models.h"
#include "server/serve_process.h"
#include "share/erasure.h"
#include "share/manifest.h"
#include "share/peer_client.h"

namespace kvstash::share::testing {

using server::testing::cached_of;
using server::testing::json;
using server::testing::ServeProcess;
using server::testing::text_of;
using server::testing::tokens_of;

constexpr int kDocTokens = 2000;  // 7 full chunks of 256 and a 208-token tail
constexpr int kFullChunks = kDocTokens / 256;
constexpr int kMaxTokens = 8;

inline std::vector<int> document(int seed) {
  std::vector<int> out;
  std::uint32_t x = 2654435761u * static_cast<std::uint32_t>(seed + 1);
  for (int i = 0; i < kDocTokens; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(3 + static_cast<int>((x >> 8) % 240));
  }
  return out;
}

inline std::string metric_with(const char* family, const char* label, const char* value) {
  return std::string(family) + "{" + label + "=\"" + value + "\"}";
}
inline std::string rejections(const char* reason) { return metric_with("kvstash_share_rejections_total", "reason", reason); }
inline const std::string kAnnounced = metric_with("kvstash_share_announcements_total", "result", "ok");
inline const std::string kPeerHits = metric_with("kvstash_kv_tier_hits_total", "tier", "peers");

// A malicious relay: B announces the relay's URL as its own, and the relay answers each chunk
// request with B's chunk, altered according to `mode`.
class Relay : public http::Handler {
 public:
  enum Mode { kForgedManifest, kTamperedKv, kResignedByStranger, kTamperedAndResigned };

  // On the project's own HTTP layer (4 I/O threads: a relayed call blocks its thread, which a
  // test relay may do).
  Relay() : stranger_(identity::NodeIdentity::generate()) {
    http::HttpServerOptions o;
    o.port = 0;
    o.io_threads = 4;
    o.body_limit = std::size_t{64} << 20;
    auto started = http::HttpServer::start(o, *this);
    EXPECT_TRUE(started) << started.status().to_string();
    if (started) server_ = std::move(*started);
  }
  ~Relay() override {
    hold(false);  // a held handler would keep stop() waiting
    if (server_) server_->stop();
  }
  int port() const { return server_ ? server_->port() : 0; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  std::string target_url() const { return "http://127.0.0.1:" + std::to_string(target_.load()); }
  void target(int port) { target_ = port; }
  void mode(Mode m) { mode_ = m; }
  int served() const { return served_.load(); }
  void corrupt_fragments(bool on) { corrupt_fragments_ = on; }
  int corrupted() const { return corrupted_.load(); }
  // While on, chunk requests wait (at most 60 s) until it is turned off; held() counts them, ever.
  void hold(bool on) {
    std::lock_guard lock(gate_mu_);
    hold_ = on;
    if (!on) gate_.notify_all();
  }
  int held() const { return held_.load(); }

  void handle(http::Request req, std::shared_ptr<http::Exchange> exchange) override {
    static const std::regex kChunk(R"(/v1/kv/chunks/([0-9a-f]{64}))");
    static const std::regex kFragment(R"(/v1/kv/fragments/([0-9a-f]{64})/([0-9]+))");
    std::smatch m;
    http::Response r;
    r.content_type = "application/octet-stream";
    if (req.method == "GET" && std::regex_match(req.path, m, kChunk)) {
      relay_chunk(m[1], r);
    } else if (req.method == "GET" && std::regex_match(req.path, m, kFragment)) {
      relay_fragment_get(m[1], std::stoi(m[2]), r);
    } else if (req.method == "PUT" && std::regex_match(req.path, m, kFragment)) {
      // Forwarded as it is: the holder checks and keeps it.
      auto set = hex_decode(req.header(kFragmentSetHeader));
      auto manifest = hex_decode(req.header(kManifestHeader));
      Status st = put_fragment(target_url(), m[1], std::stoi(m[2]), cache::Bytes(req.body.begin(), req.body.end()),
                               set ? *set : "", manifest ? *manifest : "", {});
      r.status = st ? 201 : 400;
    } else {
      r.status = 404;
    }
    exchange->respond(std::move(r));
  }

 private:
  void relay_chunk(const std::string& key_hex, http::Response& r) {
    {
      std::unique_lock lock(gate_mu_);
      if (hold_) {
        held_.fetch_add(1);
        gate_.wait_for(lock, std::chrono::seconds(60), [this] { return !hold_; });
      }
    }
    auto real = fetch_chunk(target_url(), key_hex, {});
    if (!real) {
      r.status = 404;
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
      case kTamperedKv:  // other KV in a self-consistent chunk, the producer's manifest kept
      case kTamperedAndResigned: {  // the same, vouched for by the relay's own (valid) signature
        auto header = cache::parse_chunk_header(chunk);
        auto view = cache::decode_chunk(chunk, header->meta);
        cache::Bytes payload(view->payload.begin(), view->payload.end());
        for (std::size_t i = 0; i < payload.size(); i += 97) payload[i] ^= 0x40;
        chunk = *cache::encode_chunk(header->meta, payload);
        if (mode_.load() == kTamperedAndResigned) manifest_out = encode_manifest(*make_manifest(chunk, stranger_));
        break;
      }
      case kResignedByStranger:  // the genuine chunk, vouched for by an unknown key
        manifest_out = encode_manifest(*make_manifest(chunk, stranger_));
        break;
    }
    r.headers.push_back({kManifestHeader, hex_encode(manifest_out)});
    r.body.assign(chunk.begin(), chunk.end());
  }
  // Fragments come back with one byte flipped while corrupt_fragments is on.
  void relay_fragment_get(const std::string& key_hex, int index, http::Response& r) {
    auto f = fetch_fragment(target_url(), key_hex, index, {});
    if (!f) {
      r.status = 404;
      return;
    }
    if (corrupt_fragments_.load() && !f->bytes.empty()) {
      f->bytes[f->bytes.size() / 2] ^= 0x20;
      corrupted_.fetch_add(1);
    }
    r.headers.push_back({kFragmentSetHeader, hex_encode(f->set)});
    r.headers.push_back({kManifestHeader, hex_encode(f->manifest)});
    r.body.assign(f->bytes.begin(), f->bytes.end());
  }

  const identity::NodeIdentity stranger_;
  std::unique_ptr<http::HttpServer> server_;
  std::atomic<int> target_{0};
  std::atomic<Mode> mode_{kForgedManifest};
  std::atomic<int> served_{0};
  std::atomic<bool> corrupt_fragments_{false};
  std::atomic<int> corrupted_{0};
  std::mutex gate_mu_;
  std::condition_variable gate_;
  bool hold_ = false;  // guarded by gate_mu_
  std::atomic<int> held_{0};
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
  // Writes a trust file of these nodes' public keys (their key files are created if need be).
  void write_trust(const std::string& name, const std::vector<std::string>& nodes) {
    std::ofstream out(dir_.path() + "/" + name);
    for (const auto& n : nodes) {
      if (!keys_.count(n)) keys_[n] = identity::NodeIdentity::load_or_create(key_path(n))->public_key_hex();
      out << keys_[n] << "  # node " << n << "\n";
    }
  }

  // A node of the test network; `extra` after the common flags. `life` > 0: the same node started
  // again (its own log file, so the old log's address is never read as the new one's).
  std::unique_ptr<ServeProcess> node(const std::string& name, std::vector<std::string> extra, int life = 0) {
    std::vector<std::string> args = {"--ctx", "2304", "--cache-ram", "64MiB", "--identity", key_path(name),
                                     "--dht-port", "0", "--peer-negative-ttl-ms", "0"};
    if (dht_port_ > 0) {
      args.push_back("--dht-bootstrap");
      args.push_back("127.0.0.1:" + std::to_string(dht_port_));
    }
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string log = dir_.path() + "/" + name + (life > 0 ? "." + std::to_string(life) : "") + ".log";
    auto p = std::make_unique<ServeProcess>(model_, args, log);
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

}  // namespace kvstash::share::testing
