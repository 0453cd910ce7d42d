#include "server/kv_events_api.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/response_json.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

// How long a subscriber's thread waits for events before it looks whether its stream is gone.
constexpr std::chrono::milliseconds kWaitSlice{200};
constexpr int kWireVersion = 1;

// One SSE message; the data object names its type too (subscribers may ignore `event:` lines).
std::string sse(const char* event, json data) {
  data["type"] = event;
  return std::string("event: ") + event + "\ndata: " + dump_json(data) + "\n\n";
}

}  // namespace

struct KvEventsApi::Subscriber {
  std::shared_ptr<http::Exchange> exchange;
  std::atomic<bool> gone{false};
  std::atomic<bool> done{false};
  bool resume = false;  // since/epoch given and matching: no snapshot unless a gap
  std::uint64_t since = 0;
  std::string asked_epoch;
};

namespace {

// Queues `data` on the subscriber's strand; a failed write marks the stream gone.
void send(const std::shared_ptr<KvEventsApi::Subscriber>& sub, std::string data) {
  sub->exchange->post([sub, data = std::move(data)]() mutable {
    if (!sub->exchange->write(std::move(data))) sub->gone = true;
  });
}

}  // namespace

KvEventsApi::KvEventsApi(cache::KvEventLog& log, KvNodeInfo info, std::string model_id, std::string public_key_hex,
                         KvEventsOptions options)
    : log_(log), info_(std::move(info)), model_id_(std::move(model_id)), public_key_hex_(std::move(public_key_hex)),
      options_(options) {}

KvEventsApi::~KvEventsApi() { stop(); }

void KvEventsApi::handle_info(http::Exchange& exchange) const {
  json sources = json::array();
  if (info_.prefix_cache) sources.push_back("pool");
  for (const std::string& t : info_.tiers) sources.push_back(t);
  http::Response r;
  r.body = dump_json({{"version", kWireVersion},
                      {"model", model_id_},
                      {"model_fingerprint", info_.model_fingerprint},
                      {"kv_format", info_.kv_format},
                      {"block_size", info_.block_size},
                      {"chunk_tokens", info_.chunk_tokens},
                      {"prefix_cache", info_.prefix_cache},
                      {"event_sources", sources},
                      {"events_epoch", log_.epoch()},
                      {"last_seq", log_.last_seq()},
                      {"public_key", public_key_hex_},
                      {"role", info_.role}});
  exchange.respond(std::move(r));
}

void KvEventsApi::handle_events(const http::Request& request, std::shared_ptr<http::Exchange> exchange) {
  auto sub = std::make_shared<Subscriber>();
  sub->exchange = exchange;
  const std::string since = http::query_param(request.query, "since");
  if (!since.empty()) {
    auto [end, ec] = std::from_chars(since.data(), since.data() + since.size(), sub->since);
    if (ec != std::errc() || end != since.data() + since.size()) {
      exchange->respond({400, "application/json", {},
                         ApiError{400, "since=" + since + ": expected an event sequence number", "invalid_request_error", "since",
                                  "invalid_value"}.to_json()});
      return;
    }
    sub->resume = true;
    sub->asked_epoch = http::query_param(request.query, "epoch");
  }
  {
    std::lock_guard lock(mu_);
    // Reap the threads of streams that ended.
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (it->second->done) {
        it->first.join();
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
    if (stopping_ || static_cast<int>(threads_.size()) >= options_.max_subscribers) {
      exchange->respond({503, "application/json", {{"Retry-After", "1"}},
                         ApiError{503, "too many KV event subscribers (" + std::to_string(options_.max_subscribers) + ")",
                                  "server_error", "", "unavailable"}.to_json()});
      return;
    }
    exchange->on_close([sub] { sub->gone = true; });
    exchange->begin_stream({200, "text/event-stream", {{"Cache-Control", "no-cache"}}, ""});
    threads_.emplace_back(std::thread([this, sub] { run(sub); }), sub);
  }
}

void KvEventsApi::run(std::shared_ptr<Subscriber> sub) {
  std::uint64_t last = 0;
  bool need_snapshot = true;
  send(sub, sse("hello", {{"version", kWireVersion}, {"epoch", log_.epoch()}, {"last_seq", log_.last_seq()}}));
  if (sub->resume) {
    if (sub->asked_epoch == log_.epoch() && log_.events_after(sub->since, 0)) {
      last = sub->since;
      need_snapshot = false;
    } else {
      send(sub, sse("gap", {{"since", sub->since},
                            {"epoch", sub->asked_epoch},
                            {"reason", sub->asked_epoch != log_.epoch() ? "another epoch (the node restarted)"
                                                                        : "events after since are no longer retained"}}));
    }
  }
  auto idle_since = std::chrono::steady_clock::now();
  while (!sub->gone && !stopping_) {
    if (need_snapshot) {
      const cache::KvSnapshot snap = log_.snapshot();
      for (int s = 0; s < cache::kKvSourceCount; ++s) {
        const auto& keys = snap.keys[s];
        for (std::size_t i = 0; i < keys.size() || i == 0; i += options_.events_per_message) {
          json hex = json::array();
          for (std::size_t j = i; j < keys.size() && j < i + options_.events_per_message; ++j) hex.push_back(keys[j].hex());
          send(sub, sse("snapshot", {{"seq", snap.seq}, {"source", cache::kv_source_name(static_cast<cache::KvSource>(s))},
                                     {"keys", hex}}));
          if (keys.empty()) break;
        }
      }
      send(sub, sse("snapshot_end", {{"seq", snap.seq}}));
      last = snap.seq;
      need_snapshot = false;
    }
    if (!log_.wait_after(last, kWaitSlice)) {
      if (std::chrono::steady_clock::now() - idle_since > options_.keepalive) {
        send(sub, ": keepalive\n\n");
        idle_since = std::chrono::steady_clock::now();
      }
      continue;
    }
    Expected<std::vector<cache::KvEvent>> events = log_.events_after(last, options_.events_per_message);
    if (!events) {  // fell behind the ring
      send(sub, sse("gap", {{"since", last}, {"epoch", log_.epoch()}, {"reason", "the subscriber fell behind the retained events"}}));
      need_snapshot = true;
      continue;
    }
    json list = json::array();
    for (const cache::KvEvent& e : *events) {
      list.push_back({e.seq, e.change.stored ? "stored" : "removed", cache::kv_source_name(e.change.source), e.change.key.hex()});
      last = e.seq;
    }
    send(sub, sse("events", {{"events", list}}));
    idle_since = std::chrono::steady_clock::now();
  }
  // End the stream on its strand (a no-op when the connection is gone).
  sub->exchange->post([ex = sub->exchange] { ex->end(); });
  sub->done = true;
}

void KvEventsApi::stop() {
  stopping_ = true;
  std::vector<std::pair<std::thread, std::shared_ptr<Subscriber>>> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& [t, sub] : threads) t.join();
}

}  // namespace kvstash::server
