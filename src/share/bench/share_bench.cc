// share_bench: what moving a KV chunk between peers costs, against a plain HTTP transfer of the
// same bytes on loopback (issue 13's benchmark; BENCHMARKS.md has the figures and the command).
//
// In one process: a ShareNode serving a chunk from a memory tier on the real HTTP layer (what
// `kvstash serve` runs), and a bare cpp-httplib server serving the same number of bytes. Measured:
//   plain      GET of the bytes, nothing checked
//   peer       fetch_chunk() + check_chunk() (manifest signature, trust, header, SHA-256)
//   4+2        six fragments fetched in parallel, each checked against the signed set, any four
//              decoded (ISA-L), then check_chunk(): what the peers tier does with no whole copy
// Each: `--rounds` sequential transfers after 3 warm-up ones, median and best time, GB/s.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include "cache/memory_tier.h"
#include "share/erasure.h"
#include "share/peers_tier.h"
#include "share/share_node.h"

namespace kvstash::share {
namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double median_s = 0, best_s = 0;
};

template <typename F>
Timing measure(int rounds, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    if (!f()) {
      std::fprintf(stderr, "share_bench: a transfer failed\n");
      std::exit(1);
    }
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

void report(const char* name, std::size_t bytes, const Timing& t, const Timing& base) {
  std::printf("%-6s %10zu B  median %8.3f ms  best %8.3f ms  %6.2f GB/s  %5.2fx plain\n", name, bytes, t.median_s * 1e3,
              t.best_s * 1e3, bytes / t.median_s / 1e9, t.median_s / base.median_s);
}

}  // namespace
}  // namespace kvstash::share

int main(int argc, char** argv) {
  using namespace kvstash;
  using namespace kvstash::share;
  // Default: one 256-token chunk of a qwen2.5-0.5b-shaped model in f16: 24 layers x K,V x 2 KV
  // heads x 64 dims x 2 bytes x 256 tokens = 3 MiB.
  std::size_t tokens = 256;
  int rounds = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--tokens") tokens = std::stoul(argv[i + 1]);
    if (std::string(argv[i]) == "--rounds") rounds = std::stoi(argv[i + 1]);
  }
  cache::ChunkMeta meta;
  meta.key.bytes.fill(7);
  meta.model_fingerprint.fill(1);
  meta.kv_format = "f16-blk16-v1";
  meta.token_count = static_cast<std::uint32_t>(tokens);
  meta.n_layers = 24;
  meta.n_kv_heads = 2;
  meta.head_dim = 64;
  meta.element_type = 1;
  cache::Bytes payload(tokens * 24 * 2 * 2 * 64 * 2);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 2654435761u >> 13);
  const cache::Bytes chunk = *cache::encode_chunk(meta, payload);

  auto id = std::make_shared<const identity::NodeIdentity>(identity::NodeIdentity::generate());
  auto trust = std::make_shared<const identity::TrustList>(id->public_key());
  ShareOptions options;
  options.fetch.timeout = std::chrono::milliseconds(10000);
  auto node = ShareNode::start(options, id, trust);
  if (!node) {
    std::fprintf(stderr, "share_bench: %s\n", node.status().to_string().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(std::uint64_t{1} << 30));
  cache::TieredStore store(std::move(tiers));
  (void)store.tier(0).put(meta.key, chunk);
  (*node)->attach_store(&store);
  http::HttpServerOptions http_options;
  http_options.port = 0;
  http_options.body_limit = std::size_t{64} << 20;
  auto front = http::HttpServer::start(http_options, **node);
  if (!front) {
    std::fprintf(stderr, "share_bench: %s\n", front.status().to_string().c_str());
    return 1;
  }
  const std::string url = "http://127.0.0.1:" + std::to_string((*front)->port());
  (*node)->set_peer_url(url);

  httplib::Server plain;
  const std::string blob(chunk.begin(), chunk.end());
  plain.Get("/blob", [&](const httplib::Request&, httplib::Response& res) { res.set_content(blob, "application/octet-stream"); });
  const int plain_port = plain.bind_to_any_port("127.0.0.1");
  std::thread plain_thread([&] { plain.listen_after_bind(); });
  while (!plain.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  // The fragments of the chunk, placed on the node (a PUT each, as a producer would).
  const ErasureScheme scheme{4, 2};
  const auto fragments = erasure_encode(scheme, chunk);
  const std::string set = encode_fragment_set(make_fragment_set(meta.key, scheme, chunk.size(), fragments, *id));
  const std::string manifest = encode_manifest(*make_manifest(chunk, *id));
  for (int i = 0; i < scheme.total(); ++i) {
    if (Status st = put_fragment(url, meta.key.hex(), i, fragments[i], set, manifest, options.fetch); !st) {
      std::fprintf(stderr, "share_bench: placing fragment %d: %s\n", i, st.to_string().c_str());
      return 1;
    }
  }
  const TrustPolicy policy = (*node)->trust_policy();

  const Timing base = measure(rounds, [&] {
    httplib::Client c("127.0.0.1", plain_port);
    auto r = c.Get("/blob");
    return r && r->status == 200 && r->body.size() == blob.size();
  });
  const Timing peer = measure(rounds, [&] {
    auto f = fetch_chunk(url, meta.key.hex(), options.fetch);
    return f && check_chunk(f->manifest, f->chunk, meta.key, policy).is_ok();
  });
  const Timing coded = measure(rounds, [&] {
    std::vector<std::future<Expected<FetchedFragment>>> gets;
    for (int i = 0; i < scheme.total(); ++i) {
      gets.push_back(std::async(std::launch::async, [&, i] { return fetch_fragment(url, meta.key.hex(), i, options.fetch); }));
    }
    std::vector<Expected<FetchedFragment>> got;
    for (auto& g : gets) got.push_back(g.get());
    auto s = decode_fragment_set(got[0]->set);
    if (!s || !fragment_set_verifies(*s, meta.key)) return false;
    std::vector<Fragment> good;
    for (int i = 0; i < scheme.total() && static_cast<int>(good.size()) < scheme.k; ++i) {
      if (got[i] && fragment_matches(*s, i, got[i]->bytes)) good.push_back({i, got[i]->bytes});
    }
    auto rebuilt = erasure_decode(scheme, good, s->chunk_size);
    return rebuilt && check_chunk(got[0]->manifest, *rebuilt, meta.key, policy).is_ok();
  });
  std::printf("chunk of %zu tokens (qwen2.5-0.5b shape, f16), %d rounds, loopback\n", tokens, rounds);
  report("plain", chunk.size(), base, base);
  report("peer", chunk.size(), peer, base);
  report("4+2", chunk.size(), coded, base);
  plain.stop();
  plain_thread.join();
  (*front)->stop();
  (*node)->stop();
  return 0;
}
