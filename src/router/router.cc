// The router's front: routes, the admin endpoint, health checks and the job threads. One
// proxied request is proxy() on its client connection's strand (router_proxy.cc).
#include "router/router.h"

#include <cctype>
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "router/router_impl.h"
#include "server/api_error.h"
#include "server/log.h"

namespace kvstash::router {

using nlohmann::json;

JobQueue::JobQueue(int n_threads) {
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { run(); });
}

JobQueue::~JobQueue() { stop(); }

void JobQueue::push(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void JobQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void JobQueue::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

void respond_on_strand(const std::shared_ptr<http::Exchange>& ex, http::Response r) {
  ex->post([ex, r = std::move(r)]() mutable { ex->respond(std::move(r)); });
}

http::Response error_response(int status, const std::string& message, const char* code) {
  return {status, "application/json", {},
          server::ApiError{status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code}.to_json()};
}

void respond_error(const std::shared_ptr<http::Exchange>& ex, int status, const std::string& message, const char* code) {
  respond_on_strand(ex, error_response(status, message, code));
}

std::vector<std::shared_ptr<Worker>> Router::Impl::worker_list() const {
  std::lock_guard lock(workers_mu);
  return workers;
}

std::shared_ptr<Worker> Router::Impl::find_worker(const std::string& url) const {
  std::lock_guard lock(workers_mu);
  for (const auto& w : workers) {
    if (w->url() == url) return w;
  }
  return nullptr;
}

Status Router::Impl::add_worker(const std::string& url, std::optional<WorkerRole> role) {
  std::string host;
  int port = 0;
  if (Status st = parse_worker_url(url, &host, &port); !st) return st;
  if (role == WorkerRole::kPrefill && !can_hop()) {
    return invalid_argument("a prefill worker needs a router that tokenizes: -m and a policy other than round-robin");
  }
  std::string normal = "http://" + host + ":" + std::to_string(port);
  auto worker = std::make_shared<Worker>(normal, host, port, options.worker);
  if (role) worker->set_role(*role);
  {
    std::lock_guard lock(workers_mu);
    for (const auto& w : workers) {
      if (w->url() == normal) return invalid_argument("worker " + normal + " is already routed to");
    }
    workers.push_back(worker);
  }
  if (started) worker->start();
  return Status::ok();
}

Status Router::Impl::remove_worker(const std::string& url) {
  std::shared_ptr<Worker> removed;
  {
    std::lock_guard lock(workers_mu);
    auto it = std::find_if(workers.begin(), workers.end(), [&](const auto& w) { return w->url() == url; });
    if (it == workers.end()) return not_found("no worker " + url);
    removed = *it;
    workers.erase(it);
  }
  removed->set_draining(true);
  removed->stop();  // its events thread; requests in flight keep their reference and finish
  return Status::ok();
}

void Router::Impl::health_loop() {
  std::unique_lock lock(health_mu);
  while (!health_stop) {
    lock.unlock();
    for (const auto& w : worker_list()) {
      if (w->check_due()) w->check_health();
    }
    lock.lock();
    health_cv.wait_for(lock, options.health_interval, [&] { return health_stop; });
  }
}

namespace {

// Compares in time that depends on the lengths only, not on where the texts differ.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The token of an "Authorization: Bearer TOKEN" header ("" when there is none).
std::string_view bearer_of(const http::Request& req) {
  const std::string_view auth = req.header("Authorization");
  if (auth.size() < 7) return {};
  for (std::size_t i = 0; i < 7; ++i) {
    if (std::tolower(static_cast<unsigned char>(auth[i])) != "bearer "[i]) return {};
  }
  return auth.substr(7);
}

void respond_unauthorized(http::Exchange& ex, const std::string& message, const char* code) {
  ex.respond({401, "application/json", {{"WWW-Authenticate", "Bearer"}},
              server::ApiError{401, message, "invalid_request_error", "", code}.to_json()});
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

void Router::Impl::handle(http::Request req, std::shared_ptr<http::Exchange> exchange) {
  const auto arrived = Clock::now();
  const std::string& path = req.path;
  if (path == "/health" && req.method == "GET") {
    int up = 0;
    for (const auto& w : worker_list()) up += w->eligible() && !w->prefill() ? 1 : 0;
    exchange->respond({up > 0 ? 200 : 503, "application/json", {},
                       json{{"status", up > 0 ? "ok" : "no worker available"}, {"workers_up", up}}.dump()});
    return;
  }
  if (path == "/metrics" && req.method == "GET") {
    exchange->respond({200, "text/plain; version=0.0.4", {}, metrics_text()});
    return;
  }
  const bool admin = path.rfind("/admin/", 0) == 0;
  if (admin && !options.admin_token.empty() && !same_secret(bearer_of(req), options.admin_token)) {
    return respond_unauthorized(*exchange, "Incorrect or missing admin token: send 'Authorization: Bearer TOKEN'",
                                "invalid_admin_token");
  }
  if (!admin && !options.api_keys.empty()) {
    const std::string_view key = bearer_of(req);
    if (std::none_of(options.api_keys.begin(), options.api_keys.end(), [&](const std::string& k) { return same_secret(key, k); })) {
      return respond_unauthorized(*exchange, "Incorrect or missing API key: send 'Authorization: Bearer KEY'", "invalid_api_key");
    }
  }
  if (admin) {
    jobs->push([self = shared_from_this(), req = std::move(req), exchange] { self->handle_admin(req, exchange); });
    return;
  }
  proxy(std::move(req), std::move(exchange), arrived);
}

json worker_json(const WorkerStatus& s) {
  return {{"url", s.url},
          {"up", s.up},
          {"draining", s.draining},
          {"role", worker_role_name(s.role)},
          {"reported_role", s.reported_role.empty() ? json(nullptr) : json(s.reported_role)},
          {"in_flight", s.in_flight},
          {"load_tokens", s.load_tokens},
          {"events_connected", s.events_connected},
          {"events_last_seq", s.events_last_seq},
          {"events_applied", s.events_applied},
          {"events_gaps", s.events_gaps},
          {"kv_keys", {{"pool", s.pool_keys}, {"memory", s.memory_keys}, {"disk", s.disk_keys}}}};
}

void Router::Impl::handle_admin(const http::Request& req, const std::shared_ptr<http::Exchange>& ex) {
  auto url_from_body = [&]() -> std::string {
    json j = json::parse(req.body, nullptr, false);
    return j.is_object() && j.contains("url") && j["url"].is_string() ? j["url"].get<std::string>() : "";
  };
  // POST /admin/workers {"url", "role"}: the role as --prefill-worker / --decode-worker give it.
  auto add_from_body = [&]() -> Status {
    json j = json::parse(req.body, nullptr, false);
    if (!j.is_object() || !j.contains("role") || j["role"].is_null()) return add_worker(url_from_body());
    const std::optional<WorkerRole> role = j["role"].is_string() ? worker_role_from_name(j["role"].get<std::string>()) : std::nullopt;
    if (!role) return invalid_argument("role: expected \"colocated\", \"prefill\" or \"decode\"");
    return add_worker(url_from_body(), role);
  };
  auto done = [&](const Status& st) {
    if (st) {
      json list = json::array();
      for (const auto& w : worker_list()) list.push_back(worker_json(w->status()));
      respond_on_strand(ex, {200, "application/json", {}, json{{"workers", list}}.dump()});
    } else {
      respond_error(ex, st.code() == StatusCode::kNotFound ? 404 : 400, st.message(), "invalid_value");
    }
  };
  if (req.path == "/admin/workers") {
    if (req.method == "GET") return done(Status::ok());
    if (req.method == "POST") return done(add_from_body());
    if (req.method == "DELETE") {
      std::string url = http::query_param(req.query, "url");
      if (url.empty()) url = url_from_body();
      return done(remove_worker(url));
    }
  } else if (req.method == "POST") {  // /admin/workers/drain
    json j = json::parse(req.body, nullptr, false);
    const bool drain = !(j.is_object() && j.contains("drain") && j["drain"].is_boolean()) || j["drain"].get<bool>();
    auto w = find_worker(url_from_body());
    return done(w ? (w->set_draining(drain), Status::ok()) : not_found("no worker " + url_from_body()));
  }
  respond_error(ex, 405, "method " + req.method + " is not allowed on " + req.path, "method_not_allowed");
}

std::string Router::Impl::metrics_text() const {
  std::vector<WorkerStatus> status;
  for (const auto& w : worker_list()) status.push_back(w->status());
  RouterMetrics::PrefixCacheCounts counts;
  if (model && model->prefix_cache) {
    const PrefixTokenCache::Stats st = model->prefix_cache->stats();
    counts = {st.lookups, st.hits, st.tokens_reused};
  }
  return metrics.render(status, counts);
}

Expected<std::unique_ptr<Router>> Router::create(const RouterOptions& options) {
  if (options.max_attempts < 1 || options.tokenize_threads < 1 || options.http_threads < 1 ||
      options.health_interval.count() <= 0) {
    return invalid_argument("router: --max-attempts, --tokenize-threads, --http-threads and --health-interval must be positive");
  }
  if (options.admin_token.empty() && !is_loopback_host(options.host)) {
    return invalid_argument("router: listening on " + options.host +
                            " would open the admin API (/admin/workers: add, drain and remove workers) to the network; set "
                            "--admin-token TOKEN, or listen on a loopback address (--host 127.0.0.1)");
  }
  for (const std::string& k : options.api_keys) {
    if (k.empty()) return invalid_argument("router: an empty --api-key");
  }
  std::unique_ptr<Router> router(new Router());
  router->impl_ = std::make_shared<Impl>();
  Impl& s = *router->impl_;
  s.options = options;
  s.options.worker.api_key = options.worker_api_key;
  if (!options.model_path.empty()) {
    Expected<std::unique_ptr<RouterModel>> model = load_router_model(options.model_path, options.chat_template, options.prefix_cache_tokens);
    if (!model) return model.status();
    s.model = std::move(*model);
  }
  // A worker that reports role prefill is one only where the router can take the hop.
  s.options.worker.reported_prefill_usable = s.can_hop();
  for (const std::string& url : options.workers) {
    if (Status st = s.add_worker(url); !st) return st;
  }
  for (const std::string& url : options.decode_workers) {
    if (Status st = s.add_worker(url, WorkerRole::kDecode); !st) return st;
  }
  if (!options.prefill_workers.empty() && options.model_path.empty()) {
    return invalid_argument("--prefill-worker needs -m (the router tokenizes a prompt to decide its prefill hop)");
  }
  if (!options.prefill_workers.empty() && options.policy == Policy::kRoundRobin) {
    return invalid_argument("--prefill-worker is not supported with --policy round-robin (it does not tokenize)");
  }
  for (const std::string& url : options.prefill_workers) {
    if (Status st = s.add_worker(url, WorkerRole::kPrefill); !st) return st;
  }
  return router;
}

Router::~Router() { stop(); }

Status Router::start() {
  Impl& s = *impl_;
  http::HttpServerOptions o;
  o.host = s.options.host;
  o.port = s.options.port;
  o.io_threads = s.options.http_threads;
  o.idle_timeout = std::chrono::milliseconds(600000);
  s.jobs = std::make_unique<JobQueue>(s.options.tokenize_threads);  // before the first request can arrive
  Expected<std::unique_ptr<http::HttpServer>> started = http::HttpServer::start(o, s);
  if (!started) {
    s.jobs->stop();
    return started.status();
  }
  s.started = true;
  for (const auto& w : s.worker_list()) w->start();
  s.health = std::thread([&s] { s.health_loop(); });
  s.http = std::move(*started);
  return Status::ok();
}

void Router::stop() {
  if (!impl_ || !impl_->started) return;
  Impl& s = *impl_;
  s.started = false;
  if (s.http) s.http->stop();  // closes every client connection: proxied requests see it and end
  if (s.jobs) s.jobs->stop();
  // Idle upstream connections belong to the stopped server's io_context: closed now, before it goes.
  for (const auto& w : s.worker_list()) w->upstream().drop_idle();
  {
    std::lock_guard lock(s.health_mu);
    s.health_stop = true;
  }
  s.health_cv.notify_all();
  if (s.health.joinable()) s.health.join();
  for (const auto& w : s.worker_list()) w->stop();
}

int Router::port() const { return impl_->http ? impl_->http->port() : 0; }
Status Router::add_worker(const std::string& url) { return impl_->add_worker(url); }
Status Router::remove_worker(const std::string& url) { return impl_->remove_worker(url); }
Status Router::set_draining(const std::string& url, bool drain) {
  auto w = impl_->find_worker(url);
  if (!w) return not_found("no worker " + url);
  w->set_draining(drain);
  return Status::ok();
}
std::vector<WorkerStatus> Router::workers() const {
  std::vector<WorkerStatus> out;
  for (const auto& w : impl_->worker_list()) out.push_back(w->status());
  return out;
}
std::string Router::metrics_text() const { return impl_->metrics_text(); }

}  // namespace kvstash::router
