// `kvstash route`: the cache-aware router in front of `kvstash serve` workers (router/router.h,
// docs/router.md). Serves until SIGINT/SIGTERM.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include "cli/commands.h"
#include "router/router.h"
#include "server/log.h"

namespace kvstash::cli {

int route_main(int argc, char** argv) {
  CLI::App app("Cache-aware router: sends each OpenAI request to the kvstash serve worker that holds its prefix",
               "kvstash route");
  router::RouterOptions o;
  std::string policy = "cache-aware";
  int health_ms = static_cast<int>(o.health_interval.count());
  int backoff_max_ms = static_cast<int>(o.worker.backoff_max.count());
  app.add_option("--worker", o.workers,
                 "A worker's URL, http://HOST:PORT (repeatable; more via POST /admin/workers); its role is the one it "
                 "reports (serve --role): a prefill worker when it reports prefill, else it answers requests");
  app.add_option("--prefill-worker", o.prefill_workers,
                 "A prefill worker's URL (repeatable): long prompts are prefilled there first, then decoded on a worker "
                 "that loads their KV from the shared store (docs/router.md, disaggregation); whatever role it reports");
  app.add_option("--decode-worker", o.decode_workers,
                 "A decode worker's URL (repeatable): it answers requests and is never sent a prefill hop, whatever role "
                 "it reports");
  app.add_option("--prefill-min-tokens", o.prefill_min_tokens,
                 "The prefill hop is taken when at least this many prompt tokens are not predicted cached on the best "
                 "decode worker")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("-m,--model", o.model_path,
                 "The workers' GGUF: its vocabulary and chat template (metadata only) tokenize requests; without it "
                 "requests are routed by load alone");
  app.add_option("--chat-template", o.chat_template, "The chat template the workers use when it is not the GGUF's (as serve's flag)");
  app.add_option("--policy", policy, "cache-aware, round-robin, least-loaded or prefix-hash")
      ->check(CLI::IsMember({"cache-aware", "round-robin", "least-loaded", "prefix-hash"}))
      ->capture_default_str();
  app.add_option("--host", o.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "Port (0 = any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--w-pool", o.weights.pool, "Score per prompt token a worker holds in its engine pool")->capture_default_str();
  app.add_option("--w-memory", o.weights.memory, "Score per prompt token in its memory tier")->capture_default_str();
  app.add_option("--w-disk", o.weights.disk, "Score per prompt token in its disk tier")->capture_default_str();
  app.add_option("--w-load", o.weights.load,
                 "Score subtracted per token of work in flight at the worker (uncached prompt + max_tokens of its open requests)")
      ->capture_default_str();
  app.add_option("--hash-prefix-tokens", o.hash_prefix_tokens,
                 "prefix-hash: hash the prompt's first N tokens (rounded down to 16-token blocks; past a shared system prompt)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--health-interval-ms", health_ms, "Between health checks (GET /health) of the workers")->capture_default_str();
  app.add_option("--backoff-max-ms", backoff_max_ms, "Longest wait before a failed worker is checked again (doubling from 250 ms)")
      ->capture_default_str();
  app.add_option("--max-attempts", o.max_attempts, "Workers tried for a request that fails before its first byte")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--tokenize-threads", o.tokenize_threads,
                 "Threads that tokenize prompts over --tokenize-inline-bytes (and run admin operations); the rest of a "
                 "request runs on the HTTP I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--tokenize-inline-bytes", o.tokenize_inline_bytes,
                 "Request bodies up to this many bytes are tokenized on the HTTP I/O thread (no thread hand-off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--http-threads", o.http_threads, "I/O threads of the router's HTTP front (one keeps a request on one thread; raise it for thousands of requests a second)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--prefix-cache-tokens", o.prefix_cache_tokens,
                 "Tokens of rendered conversation prefixes kept tokenized, so that a chat's next turn tokenizes only its new "
                 "messages (byte-level BPE vocabularies; 0 = off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--api-key", o.api_keys,
                 "Require 'Authorization: Bearer KEY' from clients on every proxied request (repeatable; /health and /metrics "
                 "stay open)");
  std::string api_key_file;
  app.add_option("--api-key-file", api_key_file, "A file of client API keys, one a line ('#' starts a comment line)");
  app.add_option("--worker-api-key", o.worker_api_key,
                 "The key the workers require (their serve --api-key): sent on proxied requests and event subscriptions in "
                 "place of the client's Authorization");
  app.add_option("--admin-token", o.admin_token,
                 "Require 'Authorization: Bearer TOKEN' on /admin/*; needed when --host is not a loopback address");
  app.add_flag("--log-requests", o.log_requests, "One stderr line per routed request (worker, decision, predicted cached tokens)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  o.policy = *router::policy_from_name(policy);
  if (!api_key_file.empty()) {
    std::ifstream in(api_key_file);
    if (!in) {
      std::fprintf(stderr, "route: --api-key-file: cannot read %s\n", api_key_file.c_str());
      return 1;
    }
    const std::size_t before = o.api_keys.size();
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty() && line[0] != '#') o.api_keys.push_back(line);
    }
    if (o.api_keys.size() == before) {
      std::fprintf(stderr, "route: --api-key-file: no keys in %s\n", api_key_file.c_str());
      return 1;
    }
  }
  if (health_ms <= 0 || backoff_max_ms <= 0) {
    std::fprintf(stderr, "route: --health-interval-ms and --backoff-max-ms must be positive\n");
    return 1;
  }
  o.health_interval = std::chrono::milliseconds(health_ms);
  o.worker.backoff_max = std::chrono::milliseconds(backoff_max_ms);
  o.worker.subscribe_events = o.policy == router::Policy::kCacheAware || o.policy == router::Policy::kPrefixHash;
  Expected<std::unique_ptr<router::Router>> r = router::Router::create(o);
  if (!r) {
    server::log_line("route: " + r.status().to_string());
    return 1;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  if (Status st = (*r)->start(); !st) {
    server::log_line("route: " + st.to_string());
    return 1;
  }
  server::log_line("routing on http://" + o.host + ":" + std::to_string((*r)->port()) + " to " +
                   std::to_string(o.workers.size() + o.decode_workers.size() + o.prefill_workers.size()) + " worker(s), policy " +
                   policy + (o.model_path.empty() ? " (no -m: by load only)" : ""));
  int signal = 0;
  sigwait(&stop_signals, &signal);
  server::log_line("route: stopping");
  (*r)->stop();
  return 0;
}

}  // namespace kvstash::cli
