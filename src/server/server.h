// The OpenAI-compatible HTTP server:
//   POST /v1/chat/completions, POST /v1/completions (streaming as SSE or not),
//   POST /v1/embeddings (server/embeddings_api.h), GET /v1/models, GET /v1/identity (the node's public key and trusted keys), GET /health (liveness),
//   GET /ready (503 while draining), GET /metrics (Prometheus text), OPTIONS (CORS preflight, with
//   --cors-origin), and with a KV event log GET /v1/kv/info and GET /v1/kv/events (server/kv_events_api.h).
// Errors are OpenAI-style JSON: 400 invalid request (and unsupported parameters), 401 bad API key,
// 404 unknown endpoint or model, 405 wrong method, 408/413/431 from the HTTP layer's limits,
// 415 multipart bodies, 429 at capacity, 500 internal, 503 over the connection caps or draining.
//
// It is a Handler on the event-driven HTTP layer (http/http_server.h): no thread waits for a
// request, and the I/O threads only do I/O: a body's JSON parsing, chat-template rendering and
// tokenization (generation requests, /tokenize, /detokenize) run on RequestWorkers
// (server/request_workers.h), which continue on the connection's strand. With API keys, each key
// is a cache namespace (ServerOptions::api_keys). A generation request submits to the backend and then runs on its connection's strand:
// the engine's callback only queues the event and schedules a poll (GenerationTask), which turns
// events into the answer or the SSE stream. A client that disconnects has its request cancelled
// in the engine (logged and counted with status 499); a stream whose client reads too slowly is
// cut once its unsent bytes pass the layer's stream_buffer_limit.
//
// Engine-side limits (context length, running batch, queue size) are the backend's options;
// the server reads the context length from ModelInfo.
//
// Thread safety: start(), drain() and stop() from one controlling thread; port() and metrics()
// from any.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http/http_server.h"
#include "identity/identity.h"
#include "kvstash/status.h"
#include "server/backend.h"
#include "server/kv_events_api.h"
#include "server/metrics.h"

namespace kvstash::server {

class ResponseCache;

// An API key with what it may share (--api-key-file's NAME:KEY:NAMESPACE lines).
struct ApiKey {
  std::string key;
  std::string name;             // shown in request logs; "" = none
  // The key's cache namespace: keys with the same one share cached KV and answers. "" = the
  // key's own (no other key sees its hits); "*" = the node's common namespace (what requests
  // without a key use, and what peers share).
  std::string cache_namespace;
};

struct ServerOptions {
  std::string host = "127.0.0.1";          // address to listen on
  int port = 8080;                         // 0 = any free port (see port())
  std::size_t max_body_bytes = 8u << 20;   // larger request bodies get 413 (any framing); default 8 MiB
  int http_threads = 2;                    // I/O threads of the HTTP layer (all connections)
  // The HTTP layer's other limits (header section, deadlines, connection caps, stream buffer);
  // its host, port, body_limit, io_threads and error_body are set from the fields here.
  http::HttpServerOptions http;
  std::string model_id;                    // model name in the API; "" = the model's own
  std::vector<std::string> aliases;        // other names a request's `model` may use
  std::string chat_template;               // "chatml" / "llama3" / a Jinja template overrides the GGUF's; "" = the GGUF's
  bool log_requests = true;                // one stderr line per request
  bool log_json = false;                   // that line as a JSON object
  // Generation requests admitted at once (running in the engine's batch or waiting for it); one
  // more gets 429. `kvstash serve` sets it to --parallel + --queue, so --queue 0 means "fill the
  // batch, queue nothing". 0 = no bound here (the backend's own queue bound still applies).
  int max_active_requests = 0;
  // Choices per request (`n`) at most; more gets a 400 naming `n`. The engine also bounds it by
  // its running batch (--parallel). Default 8.
  int max_n = 8;
  // The Responses API's stored responses (previous_response_id): kept this long, their prompts' KV
  // pinned as long (cut to --pin-max-ttl), the oldest dropped past max entries.
  std::chrono::seconds responses_ttl{3600};
  std::size_t responses_max = 10000;
  // Non-empty (either list): every endpoint but /health, /ready, the peer endpoints (signed) and,
  // with public_metrics, /metrics needs "Authorization: Bearer KEY". Each key is its own cache
  // namespace (tenant isolation: the KV chunk keys', response cache's and semantic cache's salt)
  // unless named_api_keys puts keys into a shared one; a body's cache_salt is combined with the
  // key's namespace, never replaces it. Keys are compared in constant time, as SHA-256 digests.
  std::vector<std::string> api_keys;       // each its own namespace
  std::vector<ApiKey> named_api_keys;      // with names and namespaces
  bool public_metrics = false;             // /metrics without the key (Prometheus without a token)
  // Special-token text in chat message content becomes control tokens (the old behaviour, for
  // trusted clients that send raw special tokens); default: content is text (prompt_builder.h).
  bool parse_special_in_content = false;
  // Threads that parse, render and tokenize request bodies off the I/O threads
  // (request_workers.h), and bodies waiting for them at most; one more gets 503.
  int request_workers = 2;
  std::size_t request_queue = 256;
  std::string cors_origin;                 // non-empty: CORS headers and preflight for this origin ("*" = any)
  double request_timeout_s = 0;            // a generation running longer ends with "abort"; 0 = none
  // The node's ed25519 identity (signs the records it produces) and the producers it trusts (itself
  // included). kvstash serve always sets both; null in servers built without them (tests).
  std::shared_ptr<const identity::NodeIdentity> identity;
  std::shared_ptr<const identity::TrustList> trust;
  // KV events for routers (server/kv_events_api.h): with a log, GET /v1/kv/info and
  // GET /v1/kv/events are served. Not owned; must outlive the server. nullptr = no such endpoints.
  cache::KvEventLog* kv_events = nullptr;
  KvNodeInfo kv_info;
  // Peer sharing (share/share_node.h), when on: every request whose path starts with "/v1/kv/peer",
  // "/v1/kv/chunks/" or "/v1/kv/fragments/" goes to this handler as it is (no API key: peers authenticate by
  // signature), and extra_metrics() is appended to /metrics. Null / empty: off.
  std::shared_ptr<http::Handler> share_handler;
  std::function<std::string()> extra_metrics;
  // The response cache (server/response_cache.h; --response-cache); null = none: every request
  // goes to the engine and answers carry no x-kvstash-cache header.
  std::shared_ptr<ResponseCache> response_cache;
};

class Server {
 public:
  // Picks the chat template (errors as choose_chat_template). The backend must outlive the server.
  static Expected<std::unique_ptr<Server>> create(GenerationBackend& backend, const ServerOptions& options);
  ~Server();  // stop()

  // Binds and starts serving on the HTTP layer's threads. Errors: kIoError when the address
  // cannot be bound.
  Status start();
  // Graceful shutdown: stops accepting, lets generations finish for up to `grace`, then ends the
  // rest with finish_reason "abort" (an error event when streaming), then stop().
  void drain(std::chrono::milliseconds grace);
  // Ends open generations with "abort", lets their answers go out (bounded), closes every
  // connection and joins. Idempotent.
  void stop();
  // The bound port (the chosen one when options.port was 0); valid after start().
  int port() const;
  const Metrics& metrics() const;

  struct Impl;

 private:
  Server() = default;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvstash::server
