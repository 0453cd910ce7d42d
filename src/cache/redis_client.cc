#include "cache/redis_client.h"

#include <sys/time.h>

#include <algorithm>
#include <cstring>

#include "cache/log.h"

namespace kvstash::cache {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string_view error_text(const redisReply* reply) {
  return reply && reply->type == REDIS_REPLY_ERROR ? std::string_view(reply->str, reply->len) : std::string_view{};
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" -> the endpoint; false if neither.
bool parse_redirect(const redisReply* reply, std::string_view prefix, int* slot, RedisEndpoint* to) {
  std::string_view msg = error_text(reply);
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

bool is_redirect(const redisReply* reply) {
  const std::string_view msg = error_text(reply);
  return msg.starts_with("MOVED ") || msg.starts_with("ASK ");
}

// The server wants credentials it did not get, or refused the ones it got.
bool is_auth_error(std::string_view msg) {
  return msg.starts_with("NOAUTH") || msg.starts_with("WRONGPASS") || msg.starts_with("ERR invalid password") ||
         msg.starts_with("ERR AUTH");
}

Status auth_error(const RedisEndpoint& node, std::string_view msg) {
  return invalid_argument("redis " + node.to_string() + ": authentication failed (" + std::string(msg) +
                          "); give the user and password as redis://[USER:]PASSWORD@HOST:PORT");
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

namespace {
RedisOptions with_a_pool(RedisOptions options) {
  options.pool_size = std::max<std::size_t>(options.pool_size, 1);
  return options;
}
}  // namespace

RedisClient::RedisClient(RedisOptions options) : options_(with_a_pool(std::move(options))) {}

RedisClient::~RedisClient() {
  for (auto& [name, node] : nodes_) {
    for (redisContext* ctx : node->idle) redisFree(ctx);
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
  for (redisContext* ctx : node.idle) redisFree(ctx);
  node.open -= node.idle.size();
  node.idle.clear();
  ++node.generation;  // connections lent now are closed when given back
  const auto now = std::chrono::steady_clock::now();
  if (now < node.down_until) return;  // several commands failing at once: one backoff step
  node.backoff = node.backoff.count() == 0 ? options_.backoff_min
                                           : std::min(node.backoff * 2, options_.backoff_max);
  node.down_until = now + node.backoff;
  if (!node.logged_down) {
    node.logged_down = true;
    log_warning("redis " + node.endpoint.to_string() + " unavailable (" + why +
                "); failing fast and reconnecting with backoff");
  }
}

Expected<redisContext*> RedisClient::open_connection(const RedisEndpoint& endpoint) {
  redisContext* ctx = redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port,
                                              to_timeval(options_.connect_timeout));
  if (!ctx || ctx->err) {
    std::string why = ctx ? ctx->errstr : "out of memory";
    if (ctx) redisFree(ctx);
    return unavailable("redis " + endpoint.to_string() + ": " + why);
  }
  if (!options_.password.empty()) {
    redisSetTimeout(ctx, to_timeval(options_.connect_timeout));
    std::vector<const char*> argv = {"AUTH"};
    std::vector<std::size_t> argl = {4};
    if (!options_.user.empty()) {
      argv.push_back(options_.user.data());
      argl.push_back(options_.user.size());
    }
    argv.push_back(options_.password.data());
    argl.push_back(options_.password.size());
    RedisReplyPtr reply(static_cast<redisReply*>(
        redisCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), argl.data())));
    if (!reply || reply->type == REDIS_REPLY_ERROR) {
      Status st = reply ? auth_error(endpoint, error_text(reply.get()))
                        : unavailable("redis " + endpoint.to_string() + ": AUTH: " +
                                      (ctx->errstr[0] ? ctx->errstr : "no reply"));
      redisFree(ctx);
      return st;
    }
  }
  redisSetTimeout(ctx, to_timeval(options_.command_timeout));
  return ctx;
}

Expected<RedisClient::Lease> RedisClient::acquire(const RedisEndpoint& endpoint) {
  std::unique_lock lock(mu_);
  Node& node = node_locked(endpoint);
  const auto deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  for (;;) {
    if (std::chrono::steady_clock::now() < node.down_until) {
      return unavailable("redis " + endpoint.to_string() + " is down");
    }
    if (!node.idle.empty()) {
      Lease lease{&node, node.idle.back(), node.generation};
      node.idle.pop_back();
      return lease;
    }
    if (node.open < options_.pool_size) {
      ++node.open;
      const std::uint64_t generation = node.generation;
      lock.unlock();
      auto ctx = open_connection(endpoint);
      lock.lock();
      if (!ctx) {
        --node.open;
        mark_down_locked(node, ctx.status().message());
        freed_.notify_all();
        return ctx.status();
      }
      node.backoff = std::chrono::milliseconds(0);
      if (node.logged_down) {
        node.logged_down = false;
        log_warning("redis " + endpoint.to_string() + " reconnected");
      }
      return Lease{&node, *ctx, generation};
    }
    if (freed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return unavailable("redis " + endpoint.to_string() + ": no free connection within the command timeout");
    }
  }
}

void RedisClient::release(Lease& lease, bool healthy, const std::string& why) {
  std::lock_guard lock(mu_);
  Node& node = *lease.node;
  if (healthy && lease.generation == node.generation) {
    node.idle.push_back(lease.ctx);
  } else {
    redisFree(lease.ctx);
    --node.open;
    if (!healthy) mark_down_locked(node, why);
  }
  lease.ctx = nullptr;
  freed_.notify_all();
}

Expected<RedisReplyPtr> RedisClient::run_on(const RedisEndpoint& endpoint,
                                            const std::vector<std::string_view>& args, bool asking) {
  auto lease = acquire(endpoint);
  if (!lease) return lease.status();
  redisContext* ctx = lease->ctx;
  std::vector<const char*> argv;
  std::vector<std::size_t> argl;
  for (auto a : args) {
    argv.push_back(a.data());
    argl.push_back(a.size());
  }
  void* raw = nullptr;
  bool ok = true;
  if (asking) {
    ok = redisAppendCommand(ctx, "ASKING") == REDIS_OK;
  }
  ok = ok && redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), argl.data()) == REDIS_OK;
  if (ok && asking) {
    void* ok_reply = nullptr;
    ok = redisGetReply(ctx, &ok_reply) == REDIS_OK;
    if (ok_reply) freeReplyObject(ok_reply);
  }
  ok = ok && redisGetReply(ctx, &raw) == REDIS_OK && raw;
  if (!ok) {
    if (raw) freeReplyObject(raw);
    const std::string why = ctx->errstr[0] ? ctx->errstr : "no reply";
    release(*lease, false, why);
    return unavailable("redis " + endpoint.to_string() + ": " + why);
  }
  release(*lease, true);
  return RedisReplyPtr(static_cast<redisReply*>(raw));
}

Status RedisClient::refresh_slots(const RedisEndpoint& from) {
  auto reply = run_on(from, {"CLUSTER", "SLOTS"}, false);
  if (!reply) return reply.status();
  redisReply* r = reply->get();
  std::lock_guard lock(mu_);
  if (r->type == REDIS_REPLY_ERROR) {
    const std::string_view msg = error_text(r);
    if (is_auth_error(msg)) return auth_error(from, msg);
    cluster_ = false;  // "cluster support disabled": one plain server
    slot_nodes_ = {from};
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
    if (ep.host.empty()) ep.host = from.host;  // Redis 7 may leave it to the asker
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
  if (slot_nodes_.empty()) slot_nodes_ = {from};  // a cluster with no slots assigned yet
  return Status::ok();
}

void RedisClient::learn_owner_locked(int slot, const RedisEndpoint& owner) {
  if (!cluster_ || slot < 0 || slot >= kSlots) return;
  std::size_t index = 0;
  while (index < slot_nodes_.size() && !(slot_nodes_[index] == owner)) ++index;
  if (index == slot_nodes_.size()) slot_nodes_.push_back(owner);
  slot_owner_[static_cast<std::size_t>(slot)] = static_cast<int>(index);
}

Status RedisClient::ensure_topology() {
  {
    std::lock_guard lock(mu_);
    if (topology_known_) return Status::ok();
  }
  Status last = unavailable("redis: no seed nodes");
  for (const RedisEndpoint& seed : options_.seeds) {
    last = refresh_slots(seed);
    if (last) {
      std::lock_guard lock(mu_);
      topology_known_ = true;
      return last;
    }
    if (last.code() == StatusCode::kInvalidArgument) return last;  // credentials: no use trying others
  }
  return last;
}

RedisEndpoint RedisClient::owner_of(std::string_view key) {
  std::lock_guard lock(mu_);
  const int slot = redis_key_slot(key);
  if (cluster_ && slot_owner_[static_cast<std::size_t>(slot)] >= 0) {
    return slot_nodes_[static_cast<std::size_t>(slot_owner_[static_cast<std::size_t>(slot)])];
  }
  return slot_nodes_.front();
}

Expected<RedisReplyPtr> RedisClient::command(std::string_view key, const std::vector<std::string_view>& args) {
  KVSTASH_RETURN_IF_ERROR(ensure_topology());
  RedisEndpoint target = owner_of(key);
  bool asking = false;
  for (int hop = 0; hop <= options_.max_redirects; ++hop) {
    auto reply = run_on(target, args, asking);
    if (!reply) return reply;
    int redirect_slot = 0;
    RedisEndpoint to;
    if (parse_redirect(reply->get(), "MOVED ", &redirect_slot, &to)) {
      // The slot moved for good: learn the whole new map from the node that now owns it.
      target = to;
      asking = false;
      if (!refresh_slots(to).is_ok()) {
        std::lock_guard lock(mu_);
        learn_owner_locked(redirect_slot, to);
      }
      continue;
    }
    if (parse_redirect(reply->get(), "ASK ", &redirect_slot, &to)) {
      target = to;  // mid-migration: this key only, this time only
      asking = true;
      continue;
    }
    return reply;
  }
  return unavailable("redis: too many redirects for slot " + std::to_string(redis_key_slot(key)));
}

std::vector<Expected<RedisReplyPtr>> RedisClient::pipeline(std::span<const RedisCommand> commands) {
  std::vector<Expected<RedisReplyPtr>> results;
  results.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) results.emplace_back(unavailable("redis: not run"));
  if (commands.empty()) return results;
  if (Status st = ensure_topology(); !st) {
    for (auto& r : results) r = st;
    return results;
  }
  // Commands grouped by their node, in order within each group.
  std::vector<std::pair<RedisEndpoint, std::vector<std::size_t>>> groups;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    const RedisEndpoint owner = owner_of(commands[i].key);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == owner; });
    if (it == groups.end()) {
      groups.push_back({owner, {}});
      it = std::prev(groups.end());
    }
    it->second.push_back(i);
  }
  std::vector<std::size_t> redirected;
  for (const auto& [endpoint, indices] : groups) {
    auto lease = acquire(endpoint);
    if (!lease) {
      for (std::size_t i : indices) results[i] = lease.status();
      continue;
    }
    redisContext* ctx = lease->ctx;
    bool ok = true;
    for (std::size_t i : indices) {
      std::vector<const char*> argv;
      std::vector<std::size_t> argl;
      for (auto a : commands[i].args) {
        argv.push_back(a.data());
        argl.push_back(a.size());
      }
      ok = ok && redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), argl.data()) == REDIS_OK;
    }
    for (std::size_t i : indices) {
      void* raw = nullptr;
      ok = ok && redisGetReply(ctx, &raw) == REDIS_OK && raw;
      if (!ok) {
        if (raw) freeReplyObject(raw);
        break;
      }
      RedisReplyPtr reply(static_cast<redisReply*>(raw));
      if (is_redirect(reply.get())) redirected.push_back(i);
      results[i] = std::move(reply);
    }
    if (!ok) {
      const std::string why = ctx->errstr[0] ? ctx->errstr : "no reply";
      release(*lease, false, why);
      for (std::size_t i : indices) {
        if (results[i] && !is_redirect(results[i]->get())) continue;  // answered before the failure
        results[i] = unavailable("redis " + endpoint.to_string() + ": " + why);
      }
      continue;
    }
    release(*lease, true);
  }
  for (std::size_t i : redirected) {
    if (results[i]) results[i] = command(commands[i].key, commands[i].args);  // follows the redirect
  }
  return results;
}

Expected<RedisReplyPtr> RedisClient::command_at(const RedisEndpoint& endpoint,
                                                const std::vector<std::string_view>& args) {
  return run_on(endpoint, args, false);
}

Expected<std::vector<RedisEndpoint>> RedisClient::masters() {
  KVSTASH_RETURN_IF_ERROR(ensure_topology());
  RedisEndpoint first;
  bool cluster = false;
  {
    std::lock_guard lock(mu_);
    cluster = cluster_;
    first = slot_nodes_.front();
  }
  if (cluster) KVSTASH_RETURN_IF_ERROR(refresh_slots(first));
  std::lock_guard lock(mu_);
  return slot_nodes_;
}

bool RedisClient::cluster_mode() {
  if (!ensure_topology().is_ok()) return false;
  std::lock_guard lock(mu_);
  return cluster_;
}

Expected<std::string> RedisClient::connect_now() {
  KVSTASH_RETURN_IF_ERROR(ensure_topology());
  auto nodes = masters();
  if (!nodes) return nodes.status();
  std::string version = "?";
  auto info = command_at(nodes->front(), {"INFO", "server"});
  if (!info) return info.status();
  if ((*info)->type == REDIS_REPLY_ERROR) {
    const std::string_view msg = error_text(info->get());
    if (is_auth_error(msg)) return auth_error(nodes->front(), msg);
  } else if ((*info)->type == REDIS_REPLY_STRING) {
    const std::string_view text((*info)->str, (*info)->len);
    constexpr std::string_view kField = "redis_version:";
    if (auto at = text.find(kField); at != std::string_view::npos) {
      const auto end = text.find_first_of("\r\n", at);
      version = std::string(text.substr(at + kField.size(), end - at - kField.size()));
    }
  }
  std::string where;
  for (const auto& n : *nodes) where += (where.empty() ? "" : ",") + n.to_string();
  const bool cluster = cluster_mode();
  return "redis " + version + (cluster ? " cluster of " + std::to_string(nodes->size()) + " masters" : " standalone") +
         " at " + where + ", " +
         (options_.password.empty() ? std::string("no AUTH")
                                    : "AUTH as " + (options_.user.empty() ? std::string("default") : options_.user)) +
         ", pool of " + std::to_string(options_.pool_size) + " connections per node, command timeout " +
         std::to_string(options_.command_timeout.count()) + " ms";
}

std::size_t RedisClient::open_connections() {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [name, node] : nodes_) n += node->open;
  return n;
}

}  // namespace kvstash::cache
