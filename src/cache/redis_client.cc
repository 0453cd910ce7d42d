#include "cache/redis_client.h"

#include <sys/time.h>

#include <cstring>
#include <set>

#include "cache/log.h"

namespace kvstash::cache {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" -> the endpoint; false if neither.
bool parse_redirect(const redisReply* reply, std::string_view prefix, int* slot, RedisEndpoint* to) {
  if (reply->type != REDIS_REPLY_ERROR) return false;
  std::string_view msg(reply->str, reply->len);
  if (!msg.starts_with(prefix)) return false;
  msg.remove_prefix(prefix.size());
  const auto space = msg.find(' ');
  const auto colon = msg.rfind(':');
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space) return false;
  *slot = std::atoi(std::string(msg.substr(0, space)).c_str());
  to->host = std::string(msg.substr(space + 1, colon - space - 1));
  to->port = std::atoi(std::string(msg.substr(colon + 1)).c_str());
  return true;
}

}  // namespace

std::uint16_t crc16_xmodem(std::string_view data) {
  std::uint16_t crc = 0;
  for (unsigned char byte : data) {
    crc ^= static_cast<std::uint16_t>(byte) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::uint16_t redis_key_slot(std::string_view key) {
  // Redis Cluster spec: if the key has a non-empty {...}, only that part is hashed.
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16_xmodem(key) & 16383;
}

RedisClient::RedisClient(RedisOptions options) : options_(std::move(options)) {}

RedisClient::~RedisClient() {
  for (auto& [name, node] : nodes_) {
    if (node->ctx) redisFree(node->ctx);
  }
}

RedisClient::Node& RedisClient::node_locked(const RedisEndpoint& endpoint) {
  auto& slot = nodes_[endpoint.to_string()];
  if (!slot) {
    slot = std::make_unique<Node>();
    slot->endpoint = endpoint;
  }
  return *slot;
}

void RedisClient::mark_down_locked(Node& node, const std::string& why) {
  if (node.ctx) {
    redisFree(node.ctx);
    node.ctx = nullptr;
  }
  node.backoff = node.backoff.count() == 0 ? options_.backoff_min
                                           : std::min(node.backoff * 2, options_.backoff_max);
  node.down_until = std::chrono::steady_clock::now() + node.backoff;
  if (!node.logged_down) {
    node.logged_down = true;
    log_warning("redis " + node.endpoint.to_string() + " unavailable (" + why +
                "); failing fast and reconnecting with backoff");
  }
}

Status RedisClient::connect_locked(Node& node) {
  if (node.ctx) return Status::ok();
  if (std::chrono::steady_clock::now() < node.down_until) {
    return unavailable("redis " + node.endpoint.to_string() + " is down");
  }
  redisContext* ctx = redisConnectWithTimeout(node.endpoint.host.c_str(), node.endpoint.port,
                                              to_timeval(options_.connect_timeout));
  if (!ctx || ctx->err) {
    std::string why = ctx ? ctx->errstr : "out of memory";
    if (ctx) redisFree(ctx);
    mark_down_locked(node, why);
    return unavailable("redis " + node.endpoint.to_string() + ": " + why);
  }
  redisSetTimeout(ctx, to_timeval(options_.command_timeout));
  node.ctx = ctx;
  node.backoff = std::chrono::milliseconds(0);
  if (node.logged_down) {
    node.logged_down = false;
    log_warning("redis " + node.endpoint.to_string() + " reconnected");
  }
  return Status::ok();
}

Expected<RedisReplyPtr> RedisClient::run_locked(Node& node, const std::vector<std::string_view>& args,
                                                bool asking) {
  KVSTASH_RETURN_IF_ERROR(connect_locked(node));
  std::vector<const char*> argv;
  std::vector<std::size_t> argl;
  for (auto a : args) {
    argv.push_back(a.data());
    argl.push_back(a.size());
  }
  void* raw = nullptr;
  if (asking) {
    redisAppendCommand(node.ctx, "ASKING");
    redisAppendCommandArgv(node.ctx, static_cast<int>(argv.size()), argv.data(), argl.data());
    void* ok_reply = nullptr;
    if (redisGetReply(node.ctx, &ok_reply) == REDIS_OK) {
      freeReplyObject(ok_reply);
      if (redisGetReply(node.ctx, &raw) != REDIS_OK) raw = nullptr;
    }
  } else {
    raw = redisCommandArgv(node.ctx, static_cast<int>(argv.size()), argv.data(), argl.data());
  }
  if (!raw) {
    std::string why = node.ctx->errstr[0] ? node.ctx->errstr : "no reply";
    mark_down_locked(node, why);
    return unavailable("redis " + node.endpoint.to_string() + ": " + why);
  }
  return RedisReplyPtr(static_cast<redisReply*>(raw));
}

Status RedisClient::refresh_slots_locked(Node& from) {
  auto reply = run_locked(from, {"CLUSTER", "SLOTS"}, false);
  if (!reply) return reply.status();
  redisReply* r = reply->get();
  if (r->type == REDIS_REPLY_ERROR) {
    cluster_ = false;  // "cluster support disabled": one plain server
    slot_nodes_ = {from.endpoint};
    return Status::ok();
  }
  if (r->type != REDIS_REPLY_ARRAY) return unavailable("redis: CLUSTER SLOTS: unexpected reply");
  cluster_ = true;
  slot_owner_.assign(kSlots, -1);
  slot_nodes_.clear();
  for (std::size_t i = 0; i < r->elements; ++i) {
    redisReply* range = r->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
    redisReply* master = range->element[2];
    if (master->type != REDIS_REPLY_ARRAY || master->elements < 2) continue;
    RedisEndpoint ep{std::string(master->element[0]->str, master->element[0]->len),
                     static_cast<int>(master->element[1]->integer)};
    if (ep.host.empty()) ep.host = from.endpoint.host;  // Redis 7 may leave it to the asker
    int index = -1;
    for (std::size_t n = 0; n < slot_nodes_.size(); ++n) {
      if (slot_nodes_[n] == ep) index = static_cast<int>(n);
    }
    if (index < 0) {
      index = static_cast<int>(slot_nodes_.size());
      slot_nodes_.push_back(ep);
    }
    for (long long s = range->element[0]->integer; s <= range->element[1]->integer && s < kSlots; ++s) {
      slot_owner_[static_cast<std::size_t>(s)] = index;
    }
  }
  return Status::ok();
}

void RedisClient::learn_owner_locked(int slot, const RedisEndpoint& owner) {
  if (!cluster_ || slot < 0 || slot >= kSlots) return;
  std::size_t index = 0;
  while (index < slot_nodes_.size() && !(slot_nodes_[index] == owner)) ++index;
  if (index == slot_nodes_.size()) slot_nodes_.push_back(owner);
  slot_owner_[static_cast<std::size_t>(slot)] = static_cast<int>(index);
}

Status RedisClient::ensure_topology_locked() {
  if (topology_known_) return Status::ok();
  Status last = unavailable("redis: no seed nodes");
  for (const RedisEndpoint& seed : options_.seeds) {
    last = refresh_slots_locked(node_locked(seed));
    if (last) {
      topology_known_ = true;
      return last;
    }
  }
  return last;
}

Expected<RedisReplyPtr> RedisClient::command(std::string_view key,
                                             const std::vector<std::string_view>& args) {
  std::lock_guard lock(mu_);
  KVSTASH_RETURN_IF_ERROR(ensure_topology_locked());
  RedisEndpoint target = slot_nodes_.front();
  const int slot = redis_key_slot(key);
  if (cluster_ && slot_owner_[slot] >= 0) target = slot_nodes_[slot_owner_[slot]];
  bool asking = false;
  for (int hop = 0; hop <= options_.max_redirects; ++hop) {
    Node& node = node_locked(target);
    auto reply = run_locked(node, args, asking);
    if (!reply) return reply;
    int redirect_slot = 0;
    RedisEndpoint to;
    if (parse_redirect(reply->get(), "MOVED ", &redirect_slot, &to)) {
      // The slot moved for good: learn the whole new map from the node that now owns it.
      target = to;
      asking = false;
      if (!refresh_slots_locked(node_locked(to)).is_ok()) learn_owner_locked(redirect_slot, to);
      continue;
    }
    if (parse_redirect(reply->get(), "ASK ", &redirect_slot, &to)) {
      target = to;  // mid-migration: this key only, this time only
      asking = true;
      continue;
    }
    return reply;
  }
  return unavailable("redis: too many redirects for slot " + std::to_string(slot));
}

Expected<RedisReplyPtr> RedisClient::command_at(const RedisEndpoint& endpoint,
                                                const std::vector<std::string_view>& args) {
  std::lock_guard lock(mu_);
  return run_locked(node_locked(endpoint), args, false);
}

Expected<std::vector<RedisEndpoint>> RedisClient::masters() {
  std::lock_guard lock(mu_);
  KVSTASH_RETURN_IF_ERROR(ensure_topology_locked());
  if (cluster_) KVSTASH_RETURN_IF_ERROR(refresh_slots_locked(node_locked(slot_nodes_.front())));
  return slot_nodes_;
}

bool RedisClient::cluster_mode() {
  std::lock_guard lock(mu_);
  return ensure_topology_locked().is_ok() && cluster_;
}

}  // namespace kvstash::cache
