// The node's KV events over HTTP (docs/kv-events.md, version 1), for routers:
//   GET /v1/kv/info                        what a router needs to compute this node's keys
//   GET /v1/kv/events[?since=N&epoch=E]    an SSE stream: a snapshot (or, when resuming, the
//                                          events after N), then every event as it happens
//
// Each subscriber gets one thread that waits on the KvEventLog and posts the SSE messages to the
// connection's strand; the engine never waits for a subscriber (the log is a bounded ring; a
// subscriber that falls behind it gets a `gap` and a fresh snapshot). Subscribers are bounded
// (KvEventsOptions::max_subscribers; beyond: 503).
//
// Thread safety: handle_info() and handle_events() on I/O threads (inside Handler::handle());
// stop() from the controlling thread, once, after which new subscribers are refused.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/kv_events.h"
#include "http/http_server.h"

namespace kvstash::server {

// What /v1/kv/info reports besides the log's state. Filled by `kvstash serve`.
struct KvNodeInfo {
  std::string model_fingerprint;  // 64 hex digits (Model::fingerprint_hex())
  std::string kv_format;          // Engine::kv_format(), e.g. "f16-blk16-v2"
  int block_size = 16;            // tokens per engine block (the pool's keys)
  int chunk_tokens = 0;           // tokens per stored chunk (the tiers' keys); 0 = no store
  bool prefix_cache = true;       // the pool keeps and reports block keys
  std::vector<std::string> tiers; // local tiers whose keys are reported: "memory", "disk"
  // The node's role for prefill/decode disaggregation (`serve --role`, docs/router.md): "colocated"
  // (answers anything), "prefill" (a router sends it only prefill hops) or "decode" (never a hop).
  // Only reported; the node serves every request the same way whatever its role.
  std::string role = "colocated";
};

struct KvEventsOptions {
  int max_subscribers = 64;                         // open /v1/kv/events streams at most; beyond: 503
  std::size_t events_per_message = 512;             // events (or snapshot keys) per SSE message
  std::chrono::milliseconds keepalive{5000};        // an SSE comment after this long without events
};

class KvEventsApi {
 public:
  KvEventsApi(cache::KvEventLog& log, KvNodeInfo info, std::string model_id, std::string public_key_hex,
              KvEventsOptions options = {});
  ~KvEventsApi();  // stop()

  void handle_info(http::Exchange& exchange) const;
  void handle_events(const http::Request& request, std::shared_ptr<http::Exchange> exchange);
  // Ends every stream (its thread stops within one wait) and joins the threads.
  void stop();

  struct Subscriber;  // one open stream (kv_events_api.cc)

 private:
  void run(std::shared_ptr<Subscriber> sub);

  cache::KvEventLog& log_;
  const KvNodeInfo info_;
  const std::string model_id_;
  const std::string public_key_hex_;
  const KvEventsOptions options_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  // One thread per open stream, with its subscriber; reaped when the next one subscribes.
  std::vector<std::pair<std::thread, std::shared_ptr<Subscriber>>> threads_;  // guarded by mu_
};

}  // namespace kvstash::server
