// The OpenAI-compatible HTTP server:
//   POST /v1/chat/completions, POST /v1/completions (streaming as SSE or not),
//   GET /v1/models, GET /health, GET /metrics (Prometheus text).
// Errors are OpenAI-style JSON: 400 invalid request, 404 unknown endpoint, 405 wrong method,
// 413 body too large, 429 engine queue full, 500 internal.
//
// Each HTTP request runs on one of the server's worker threads; it submits to the backend and
// waits on its own event queue (see Generation). A client that disconnects has its request
// cancelled in the engine: a streaming one is noticed when a write fails, a non-streaming one by
// peeking at its socket between waits (see ClientConnection); the latter is logged and counted
// with status 499.
//
// Engine-side limits (context length, running batch, queue size) are the backend's options;
// the server reads the context length from ModelInfo.
//
// Thread safety: start() and stop() from one controlling thread; port() and metrics() from any.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kvstash/status.h"
#include "server/backend.h"
#include "server/metrics.h"

namespace kvstash::server {

struct ServerOptions {
  std::string host = "127.0.0.1";          // address to listen on
  int port = 8080;                         // 0 = any free port (see port())
  std::size_t max_body_bytes = 8u << 20;   // larger request bodies get 413; default 8 MiB
  int http_threads = 64;                   // worker threads: each open request holds one
  // Generation requests admitted at once (running in the engine's batch or waiting for it); one
  // more gets 429. `kvstash serve` sets it to --parallel + --queue, so --queue 0 means "fill the
  // batch, queue nothing". 0 = no bound here (the backend's own queue bound still applies).
  int max_active_requests = 0;
  std::string model_id;                    // model name in the API; "" = the model's own
  std::string chat_template;               // "chatml" / "llama3" / a Jinja template overrides the GGUF's; "" = the GGUF's
  bool log_requests = true;                // one stderr line per request
};

class Server {
 public:
  // Picks the chat template (errors as choose_chat_template). The backend must outlive the server.
  static Expected<std::unique_ptr<Server>> create(GenerationBackend& backend, const ServerOptions& options);
  ~Server();  // stop()

  // Binds and starts serving on a background thread. Errors: kIoError when the address cannot
  // be bound.
  Status start();
  // Stops accepting, ends open streams, joins. Idempotent.
  void stop();
  // The bound port (the chosen one when options.port was 0); valid after start().
  int port() const;
  const Metrics& metrics() const;

 private:
  Server() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::server
