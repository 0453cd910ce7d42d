// One worker (a `kvstash serve` node) as the router sees it: its URL, health, load, a pool of
// kept-alive upstream connections for proxied requests (http/upstream.h, run on the router's
// HTTP I/O threads), and its KV index, kept current by a thread
// that subscribes to the worker's KV events (GET /v1/kv/info, then GET /v1/kv/events as SSE;
// after a disconnect it resumes with ?since=N&epoch=E and, on a gap, starts from a snapshot).
//
// Health: a worker is up until a request to it fails in transport or a health check fails; then
// it is down and checked again after a backoff that doubles per failure (WorkerOptions). Draining:
// no new requests; those in flight finish.
//
// Role (WorkerRole): given by the router's flags, or reported by the worker in /v1/kv/info (read
// by the events thread on each connection, or, without event subscriptions, by the health check
// until it has one). Until the report arrives, a worker without a given role is colocated.
//
// Thread safety: every method is safe from any thread. The events thread is started by start()
// and joined by stop() (idempotent; the destructor calls it).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "http/upstream.h"
#include "kvstash/status.h"
#include "router/prefix_index.h"

namespace httplib {
class Client;
}

namespace kvstash::router {

// A worker's role in prefill/decode disaggregation (docs/router.md): kColocated answers requests
// (the default); kPrefill is sent only the prefill hops of long prompts, never a request to
// answer; kDecode answers, like kColocated, and is named so by an operator (never a hop).
enum class WorkerRole { kColocated, kPrefill, kDecode };
const char* worker_role_name(WorkerRole role);
// "colocated", "prefill", "decode"; nullopt otherwise.
std::optional<WorkerRole> worker_role_from_name(std::string_view name);

struct WorkerOptions {
  std::chrono::milliseconds backoff_min{250};      // first wait before a failed worker is checked again
  std::chrono::milliseconds backoff_max{8000};     // the longest wait (doubling per failure up to it)
  std::chrono::milliseconds connect_timeout{1000}; // to connect to the worker (proxy and events)
  std::chrono::milliseconds read_timeout{600000};  // between bytes of a proxied answer
  std::chrono::milliseconds events_read_timeout{10000};  // between bytes of the event stream (the worker sends keepalives)
  std::size_t max_idle_connections = 64;           // kept-alive connections kept per worker
  bool subscribe_events = true;                    // false: no KV index (policies that need none)
  std::string api_key;                             // sent as a bearer token to the worker ("" = none)
  // Whether a role of "prefill" reported in /v1/kv/info makes the worker a prefill worker. False
  // when the router cannot take prefill hops (no -m, or round-robin): it then answers requests.
  bool reported_prefill_usable = true;
};

struct WorkerStatus {
  std::string url;
  bool up = false;
  bool draining = false;
  int in_flight = 0;
  std::int64_t load_tokens = 0;
  bool events_connected = false;
  bool kv_info_known = false;
  std::uint64_t events_last_seq = 0;
  std::uint64_t events_applied = 0;
  std::uint64_t events_gaps = 0;
  std::size_t pool_keys = 0, memory_keys = 0, disk_keys = 0;
  int failures = 0;  // consecutive
  std::uint64_t marked_down = 0;  // times taken out (a failed request or health check), in all
  bool prefill = false;  // a prefill worker (role kPrefill), never a decode choice
  WorkerRole role = WorkerRole::kColocated;  // as the router uses it (set_role(), else the reported one)
  std::string reported_role;  // the worker's /v1/kv/info "role"; "" until it answered with one
};

class Worker {
 public:
  // `url`: http://HOST:PORT (validated by parse_worker_url).
  Worker(std::string url, std::string host, int port, WorkerOptions options);
  ~Worker();

  const std::string& url() const { return url_; }
  void start();
  void stop();

  // Takes requests: up and not draining.
  bool eligible() const { return up_.load() && !draining_.load(); }
  bool up() const { return up_.load(); }
  void set_draining(bool on) { draining_ = on; }
  bool draining() const { return draining_.load(); }
  // The role the router's flags give it (--prefill-worker, --decode-worker, POST /admin/workers
  // "role"); set once, before start(). Without one, the role the worker reports in /v1/kv/info
  // (serve --role) applies once known; a given role that contradicts the report (prefill against
  // decode) wins and is logged once.
  void set_role(WorkerRole role);
  // A prefill worker (docs/router.md): the router sends it only the prefill hop of long prompts,
  // never a request to answer.
  bool prefill() const { return prefill_.load(); }
  WorkerRole role() const;
  // A transport failure (proxy or health check): down, next check after the backoff.
  void mark_failed();
  void mark_ok();
  // Whether a health check is due: up (checked every round), or down and its backoff passed.
  bool check_due() const;
  // GET /health now; updates the state. True when it answered 200.
  bool check_health();

  // The router's own accounting of what it sent there (router/policy.h load_tokens).
  void begin_request(std::int64_t load_tokens);
  void end_request(std::int64_t load_tokens);
  int in_flight() const { return in_flight_.load(); }
  std::int64_t load_tokens() const { return load_tokens_.load(); }

  std::optional<WorkerKvInfo> kv_info() const;
  // The tag of the worker's public key (server/responses_api.h: its response ids carry it); "" until
  // /v1/kv/info answered with one.
  std::string node_tag() const;
  const PrefixIndex& index() const { return index_; }
  WorkerStatus status() const;

  // Proxied requests go out here (kept-alive connections; connect_timeout, read_timeout,
  // max_idle_connections of WorkerOptions).
  http::UpstreamPool& upstream() { return upstream_; }
  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  void events_loop();
  bool fetch_kv_info(httplib::Client& client);
  // Applies a /v1/kv/info "role" ("" = none reported); logs a conflict or an unusable role once.
  void apply_reported_role(const std::string& reported);
  void apply_event_data(const std::string& data);
  void wait_for(std::chrono::milliseconds d);

  const std::string url_, host_;
  const int port_;
  const WorkerOptions options_;
  std::atomic<bool> up_{true}, draining_{false}, prefill_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<std::int64_t> load_tokens_{0};
  PrefixIndex index_;
  http::UpstreamPool upstream_;

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                           // guarded by mu_
  std::optional<WorkerKvInfo> kv_info_;             // guarded by mu_
  std::string node_tag_;                            // guarded by mu_
  std::optional<WorkerRole> given_role_;            // guarded by mu_ (set_role())
  std::string reported_role_;                       // guarded by mu_
  bool role_logged_ = false;                        // guarded by mu_: a conflict or unusable role was logged
  std::string epoch_;                               // guarded by mu_
  std::uint64_t last_seq_ = 0;                      // guarded by mu_
  std::uint64_t applied_ = 0, gaps_ = 0;            // guarded by mu_
  bool connected_ = false;                          // guarded by mu_
  httplib::Client* events_client_ = nullptr;        // guarded by mu_ (for stop())
  int failures_ = 0;                                // guarded by mu_
  std::uint64_t marked_down_ = 0;                   // guarded by mu_
  std::chrono::steady_clock::time_point next_check_{};  // guarded by mu_
  std::thread events_thread_;
};

// Parses "http://HOST:PORT" (a trailing "/" allowed) into host and port. kInvalidArgument naming
// the URL otherwise (https is not supported).
Status parse_worker_url(const std::string& url, std::string* host, int* port);

}  // namespace kvstash::router
