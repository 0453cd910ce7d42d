// The cache-aware router (`kvstash route`): an OpenAI-compatible front that sends each request to
// the worker (`kvstash serve` node) that already holds the most of its prefix, or by another
// policy (router/policy.h). docs/router.md describes it for operators.
//
//   POST /v1/chat/completions, /v1/completions, and /v1/messages and /v1/responses (translated onto
//     a chat request as the server does: anthropic_api.h, responses_api.h): tokenized here (the
//     GGUF's vocabulary and chat template, the server's own prompt code), keyed (block and chunk
//     chains with the request's cache_salt), scored, and proxied; the answer (stream or not, error or not) comes back
//     unchanged, plus the header x-kvstash-worker. A request that fails before the worker's first
//     byte (connection refused or cut) is sent to another worker; the failed one is taken out
//     and checked again with backoff.
//   GET /health (200 while a worker takes requests, else 503), GET /metrics (router/metrics.h),
//   GET /admin/workers, POST /admin/workers {"url"}, DELETE /admin/workers?url=U,
//   POST /admin/workers/drain {"url", "drain": true|false}; any other path is proxied to the
//   least-loaded worker (/v1/models, /tokenize, ...).
// Prefill/decode disaggregation (docs/router.md): a long prompt is first sent, as a chat or
// completions request with max_tokens 1 and kvstash_store_sync, to a prefill worker (which writes
// its KV to the shared store), then answered by a decode worker as above; a failed hop only skips
// it. Prefill workers are named by RouterOptions::prefill_workers or report role "prefill" in
// /v1/kv/info (serve --role); a Responses request that continues a stored response
// (previous_response_id) cannot be tokenized here and never hops.
// Keys (RouterOptions): clients' API keys on proxied requests, a separate key towards the
// workers, and a bearer token on /admin/* (required when listening beyond loopback).
//
// Threads: the HTTP layer's I/O threads run everything a proxied request needs, on its client
// connection's strand: reading it, tokenizing, scoring, the upstream exchange (asynchronous, on
// kept-alive connections: http/upstream.h) and writing the answer, with no hand-off between
// threads. A few job threads (RouterOptions::tokenize_threads) tokenize prompts over
// tokenize_inline_bytes (so that one long prompt does not hold an I/O thread) and run the admin
// operations; one health thread; one events thread per worker (router/worker.h).
//
// Thread safety: start() and stop() from one controlling thread; the rest from any.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "http/http_server.h"
#include "kvstash/status.h"
#include "router/policy.h"
#include "router/worker.h"

namespace kvstash::router {

struct RouterOptions {
  std::string host = "127.0.0.1";  // address to listen on
  int port = 8090;                 // 0 = any free port
  std::string model_path;          // GGUF whose vocabulary and chat template the workers serve ("" = route without keys)
  std::string chat_template;       // as serve's --chat-template ("" = the GGUF's)
  std::vector<std::string> workers;  // http://HOST:PORT each, in the role each reports (serve --role)
  // Prefill/decode disaggregation (docs/router.md; empty = off): workers that only prefill. A
  // tokenized chat/completions request whose prompt has at least prefill_min_tokens tokens not
  // predicted cached on the best decode worker is first sent to one of them with max_tokens 1,
  // then answered by a decode worker as usual; a failed hop only skips it (colocated serving).
  std::vector<std::string> prefill_workers;
  // Workers that answer and never prefill for others, whatever role they report (--decode-worker).
  // A plain `workers` entry takes the role its /v1/kv/info reports (serve --role): a worker that
  // reports "prefill" is a prefill worker (when the router tokenizes), else it answers.
  std::vector<std::string> decode_workers;
  std::int64_t prefill_min_tokens = 1024;
  Policy policy = Policy::kCacheAware;
  ScoreWeights weights;
  int hash_prefix_tokens = 256;    // prefix-hash: the prefix hashed (router/policy.h)
  std::chrono::milliseconds health_interval{1000};  // between health checks of up workers
  int max_attempts = 3;            // workers tried for one request that fails before its first byte
  int tokenize_threads = 2;        // threads for long prompts' tokenizing and the admin operations
  std::size_t tokenize_inline_bytes = 64 << 10;  // request bodies up to this are tokenized on the I/O thread
  // I/O threads of the router's HTTP front. One by default: a routed request costs the router
  // ~60 us (a thread handles thousands a second), and with one thread its arrival, the upstream
  // exchange and the answer's return run on the same thread, with no hand-off or wake-up of
  // another: router-added time to first byte at 200 requests/s, p99 0.57-0.91 ms with one thread
  // against 0.69-1.04 ms with two (BENCHMARKS.md, issue 12). More for high request rates.
  int http_threads = 1;
  WorkerOptions worker;
  bool log_requests = false;       // one stderr line per request
  // Clients' keys: non-empty = every proxied request needs "Authorization: Bearer KEY" (one of
  // them), else 401 in OpenAI's shape; /health and /metrics stay open, as on `kvstash serve`.
  std::vector<std::string> api_keys;
  // The key sent to the workers (their `serve --api-key`) on proxied requests and the KV event
  // subscriptions, in place of the client's Authorization. "" = the client's Authorization is
  // passed on unchanged when api_keys is empty, and dropped when it is set (it was the router's key).
  std::string worker_api_key;
  // Non-empty = /admin/* need "Authorization: Bearer TOKEN". Empty is allowed only when the router
  // listens on a loopback address (create() refuses otherwise).
  std::string admin_token;
  std::size_t prefix_cache_tokens = std::size_t{1} << 22;  // tokenized conversation prefixes kept (router/prompt_cache.h); 0 = off
};

class Router {
 public:
  // Loads the tokenizer and chat template (when model_path is set) and checks the worker URLs.
  static Expected<std::unique_ptr<Router>> create(const RouterOptions& options);
  ~Router();  // stop()

  // Binds, starts the workers' event subscriptions, the health checks and the job threads.
  Status start();
  void stop();
  int port() const;

  // The admin endpoint's operations, also for tests.
  Status add_worker(const std::string& url);
  Status remove_worker(const std::string& url);
  Status set_draining(const std::string& url, bool drain);
  std::vector<WorkerStatus> workers() const;
  std::string metrics_text() const;

  struct Impl;

 private:
  Router() = default;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvstash::router
