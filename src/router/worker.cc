#include "router/worker.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "bench/sse.h"
#include "server/log.h"
#include "server/responses_api.h"

namespace kvstash::router {
namespace {

using nlohmann::json;

template <typename Rep, typename Period>
void set_timeout(httplib::Client& c, std::chrono::duration<Rep, Period> connect, std::chrono::duration<Rep, Period> read) {
  const auto cs = std::chrono::duration_cast<std::chrono::microseconds>(connect).count();
  const auto rs = std::chrono::duration_cast<std::chrono::microseconds>(read).count();
  c.set_connection_timeout(cs / 1000000, cs % 1000000);
  c.set_read_timeout(rs / 1000000, rs % 1000000);
  c.set_write_timeout(rs / 1000000, rs % 1000000);
}

Expected<cache::ModelFingerprint> parse_fingerprint(const std::string& hex) {
  Expected<cache::ChunkKey> key = cache::ChunkKey::from_hex(hex);  // the same 64 hex digits
  if (!key) return invalid_argument("model_fingerprint: expected 64 hex digits");
  return key->bytes;
}

}  // namespace

const char* worker_role_name(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kColocated:
      break;
  }
  return "colocated";
}

std::optional<WorkerRole> worker_role_from_name(std::string_view name) {
  if (name == "colocated") return WorkerRole::kColocated;
  if (name == "prefill") return WorkerRole::kPrefill;
  if (name == "decode") return WorkerRole::kDecode;
  return std::nullopt;
}

Status parse_worker_url(const std::string& url, std::string* host, int* port) {
  const std::string prefix = "http://";
  std::string rest = url.substr(0, prefix.size()) == prefix ? url.substr(prefix.size()) : "";
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const std::size_t colon = rest.rfind(':');
  if (rest.empty() || colon == std::string::npos || colon == 0 || rest.find('/') != std::string::npos) {
    return invalid_argument("worker URL '" + url + "': expected http://HOST:PORT");
  }
  try {
    std::size_t used = 0;
    *port = std::stoi(rest.substr(colon + 1), &used);
    if (used != rest.size() - colon - 1 || *port <= 0 || *port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    return invalid_argument("worker URL '" + url + "': the port must be a number in 1..65535");
  }
  *host = rest.substr(0, colon);
  return Status::ok();
}

Worker::Worker(std::string url, std::string host, int port, WorkerOptions options)
    : url_(std::move(url)),
      host_(std::move(host)),
      port_(port),
      options_(options),
      upstream_(host_, port_, http::UpstreamOptions{options.connect_timeout, options.read_timeout, options.max_idle_connections}) {}

Worker::~Worker() { stop(); }

void Worker::start() {
  if (options_.subscribe_events && !events_thread_.joinable()) events_thread_ = std::thread([this] { events_loop(); });
}

void Worker::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (events_client_) events_client_->stop();  // ends a blocked read at once
  }
  stop_cv_.notify_all();
  if (events_thread_.joinable()) events_thread_.join();
}

void Worker::wait_for(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  stop_cv_.wait_for(lock, d, [&] { return stopping_; });
}

void Worker::mark_failed() {
  std::lock_guard lock(mu_);
  up_ = false;
  ++failures_;
  ++marked_down_;
  auto backoff = options_.backoff_min;
  for (int i = 1; i < failures_ && backoff < options_.backoff_max; ++i) backoff *= 2;
  next_check_ = std::chrono::steady_clock::now() + std::min(backoff, options_.backoff_max);
}

void Worker::mark_ok() {
  std::lock_guard lock(mu_);
  up_ = true;
  failures_ = 0;
}

bool Worker::check_due() const {
  std::lock_guard lock(mu_);
  return up_ || std::chrono::steady_clock::now() >= next_check_;
}

bool Worker::check_health() {
  httplib::Client client(host_, port_);
  set_timeout(client, options_.connect_timeout, options_.connect_timeout);
  if (!options_.api_key.empty()) client.set_bearer_token_auth(options_.api_key);
  auto res = client.Get("/health");
  const bool ok = res && res->status == 200;
  if (ok) {
    mark_ok();
  } else {
    mark_failed();
  }
  // Without event subscriptions nothing else reads /v1/kv/info: its role is read here, until known.
  bool role_known = false;
  {
    std::lock_guard lock(mu_);
    role_known = !reported_role_.empty();
  }
  if (ok && !options_.subscribe_events && !role_known) {
    if (auto info = client.Get("/v1/kv/info"); info && info->status == 200) {
      json j = json::parse(info->body, nullptr, false);
      if (j.is_object() && j.contains("role") && j["role"].is_string()) apply_reported_role(j["role"].get<std::string>());
    }
  }
  return ok;
}

void Worker::set_role(WorkerRole role) {
  std::lock_guard lock(mu_);
  given_role_ = role;
  prefill_ = role == WorkerRole::kPrefill;
}

WorkerRole Worker::role() const {
  if (prefill_) return WorkerRole::kPrefill;
  std::lock_guard lock(mu_);
  if (given_role_) return *given_role_;
  return reported_role_ == "decode" ? WorkerRole::kDecode : WorkerRole::kColocated;
}

void Worker::apply_reported_role(const std::string& reported) {
  const std::optional<WorkerRole> role = worker_role_from_name(reported);
  std::string note;
  {
    std::lock_guard lock(mu_);
    reported_role_ = reported;
    if (given_role_) {
      // The router's flag wins; a report that contradicts it (prefill against decode) is logged.
      const bool conflict = role && *role != WorkerRole::kColocated && *role != *given_role_;
      if (conflict && !role_logged_) {
        note = "route: worker " + url_ + " reports role " + reported + ", the router's flags make it a " +
               worker_role_name(*given_role_) + " worker: the flag wins";
      }
    } else if (role == WorkerRole::kPrefill && !options_.reported_prefill_usable) {
      if (!role_logged_) {
        note = "route: worker " + url_ + " reports role prefill, but this router takes no prefill hops (no -m, or --policy "
               "round-robin): it answers requests as a colocated worker";
      }
    } else {
      prefill_ = role == WorkerRole::kPrefill;
      if (!role && !reported.empty() && !role_logged_) {
        note = "route: worker " + url_ + " reports an unknown role '" + reported + "': taken as colocated";
      }
    }
    if (!note.empty()) role_logged_ = true;
  }
  if (!note.empty()) server::log_line(note);
}

void Worker::begin_request(std::int64_t load_tokens) {
  in_flight_.fetch_add(1);
  load_tokens_.fetch_add(load_tokens);
}

void Worker::end_request(std::int64_t load_tokens) {
  in_flight_.fetch_sub(1);
  load_tokens_.fetch_sub(load_tokens);
}

std::optional<WorkerKvInfo> Worker::kv_info() const {
  std::lock_guard lock(mu_);
  return kv_info_;
}

std::string Worker::node_tag() const {
  std::lock_guard lock(mu_);
  return node_tag_;
}

WorkerStatus Worker::status() const {
  WorkerStatus s;
  s.url = url_;
  s.up = up_;
  s.draining = draining_;
  s.in_flight = in_flight_;
  s.load_tokens = load_tokens_;
  s.prefill = prefill_;
  s.role = role();
  s.pool_keys = index_.size(cache::KvSource::kPool);
  s.memory_keys = index_.size(cache::KvSource::kMemory);
  s.disk_keys = index_.size(cache::KvSource::kDisk);
  std::lock_guard lock(mu_);
  s.events_connected = connected_;
  s.kv_info_known = kv_info_.has_value();
  s.events_last_seq = last_seq_;
  s.events_applied = applied_;
  s.events_gaps = gaps_;
  s.failures = failures_;
  s.marked_down = marked_down_;
  s.reported_role = reported_role_;
  return s;
}

bool Worker::fetch_kv_info(httplib::Client& client) {
  auto res = client.Get("/v1/kv/info");
  if (!res || res->status != 200) return false;
  json j = json::parse(res->body, nullptr, false);
  if (!j.is_object()) return false;
  WorkerKvInfo info;
  auto fp = parse_fingerprint(j.value("model_fingerprint", ""));
  if (!fp) return false;
  info.fingerprint = *fp;
  info.kv_format = j.value("kv_format", "");
  info.block_size = j.value("block_size", 16);
  info.chunk_tokens = j.value("chunk_tokens", 0);
  if (info.block_size <= 0 || info.chunk_tokens < 0 || (info.chunk_tokens > 0 && info.chunk_tokens % info.block_size != 0)) {
    return false;
  }
  const std::string tag = j.contains("public_key") && j["public_key"].is_string()
                              ? server::response_node_tag(j["public_key"].get<std::string>())
                              : "";
  {
    std::lock_guard lock(mu_);
    kv_info_ = info;
    node_tag_ = tag;
  }
  // (A worker restarted with another --role reports it on the next connection.)
  apply_reported_role(j.contains("role") && j["role"].is_string() ? j["role"].get<std::string>() : "");
  return true;
}

// One event-stream connection at a time; the per-connection state (hello epoch, whether a
// snapshot is arriving) lives here, on the events thread.
void Worker::events_loop() {
  auto backoff = options_.backoff_min;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    httplib::Client client(host_, port_);
    set_timeout(client, options_.connect_timeout, options_.events_read_timeout);
    if (!options_.api_key.empty()) client.set_bearer_token_auth(options_.api_key);
    if (!fetch_kv_info(client)) {
      wait_for(backoff);
      backoff = std::min(backoff * 2, options_.backoff_max);
      continue;
    }
    std::string path = "/v1/kv/events";
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      if (!epoch_.empty()) path += "?since=" + std::to_string(last_seq_) + "&epoch=" + epoch_;
      events_client_ = &client;
    }
    bench::SseParser parser;
    std::string hello_epoch;
    bool in_snapshot = false;
    bool ok_status = false;
    auto on_data = [&](const std::string& data) {
      json j = json::parse(data, nullptr, false);
      if (!j.is_object()) return;
      const std::string type = j.value("type", "");
      if (type == "hello") {
        hello_epoch = j.value("epoch", "");
        std::lock_guard lock(mu_);
        connected_ = true;
      } else if (type == "gap") {
        std::lock_guard lock(mu_);
        ++gaps_;
      } else if (type == "snapshot") {
        if (!in_snapshot) index_.clear();
        in_snapshot = true;
        auto source = cache::kv_source_from_name(j.value("source", ""));
        if (!source || !j.contains("keys") || !j["keys"].is_array()) return;
        std::vector<cache::KvChange> changes;
        for (const auto& k : j["keys"]) {
          if (!k.is_string()) continue;
          if (auto key = cache::ChunkKey::from_hex(k.get<std::string>())) changes.push_back({true, *source, *key});
        }
        index_.apply(changes);
      } else if (type == "snapshot_end") {
        if (!in_snapshot) index_.clear();  // an empty snapshot
        in_snapshot = false;
        std::lock_guard lock(mu_);
        last_seq_ = j.value("seq", std::uint64_t{0});
        epoch_ = hello_epoch;
      } else if (type == "events" && j.contains("events") && j["events"].is_array()) {
        std::vector<cache::KvChange> changes;
        std::uint64_t seq = 0;
        for (const auto& e : j["events"]) {
          if (!e.is_array() || e.size() != 4) continue;
          auto source = cache::kv_source_from_name(e[2].is_string() ? e[2].get<std::string>() : "");
          auto key = cache::ChunkKey::from_hex(e[3].is_string() ? e[3].get<std::string>() : "");
          if (!source || !key || !e[0].is_number_unsigned()) continue;
          changes.push_back({e[1] == "stored", *source, *key});
          seq = e[0].get<std::uint64_t>();
        }
        index_.apply(changes);
        std::lock_guard lock(mu_);
        applied_ += changes.size();
        if (seq > 0) last_seq_ = seq;
        epoch_ = hello_epoch;
      }
    };
    client.Get(
        path, [&](const httplib::Response& r) { return ok_status = r.status == 200; },
        [&](const char* data, std::size_t n) {
          parser.feed(std::string_view(data, n), on_data);
          backoff = options_.backoff_min;  // a working stream resets the wait
          std::lock_guard lock(mu_);
          return !stopping_;
        });
    {
      std::lock_guard lock(mu_);
      events_client_ = nullptr;
      connected_ = false;
      if (in_snapshot) epoch_.clear();  // cut inside a snapshot: the next connection starts afresh
      if (stopping_) return;
    }
    wait_for(backoff);
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

}  // namespace kvstash::router
