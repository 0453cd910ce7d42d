#include "cache/redis_tier.h"

namespace kvstash::cache {

RedisTier::RedisTier(RedisTierOptions options) : options_(options), client_(options.client) {}

std::string RedisTier::redis_key(const ChunkKey& key) { return std::string(kRedisKeyPrefix) + key.hex(); }


Expected<RedisReplyPtr> RedisTier::run(const std::string& key, const std::vector<std::string_view>& args) {
  auto reply = client_.command(key, args);
  if (!reply) {
    counters_.error();
    return reply;
  }
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    counters_.error();
    return unavailable("redis: " + std::string((*reply)->str, (*reply)->len));
  }
  return reply;
}

std::vector<bool> RedisTier::holds(std::span<const ChunkKey> keys) {
  std::vector<std::string> names;
  names.reserve(keys.size());
  for (const ChunkKey& key : keys) names.push_back(key_of(key));
  std::vector<RedisCommand> commands;
  commands.reserve(keys.size());
  for (const std::string& name : names) commands.push_back({name, {"EXISTS", name}});
  auto replies = client_.pipeline(commands);
  std::vector<bool> out(keys.size(), false);
  bool counted_error = false;  // one error per call, as one round trip failed
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const auto& reply = replies[i];
    const bool failed = !reply || (*reply)->type == REDIS_REPLY_ERROR;
    if (failed && !counted_error) {
      counters_.error();
      counted_error = true;
    }
    out[i] = !failed && (*reply)->type == REDIS_REPLY_INTEGER && (*reply)->integer == 1;
  }
  return out;
}

std::size_t RedisTier::contains(std::span<const ChunkKey> keys) {
  const std::vector<bool> held = holds(keys);
  std::size_t n = 0;
  while (n < held.size() && held[n]) ++n;
  return n;
}

Expected<Bytes> RedisTier::get(const ChunkKey& key) {
  const auto start = std::chrono::steady_clock::now();
  const std::string rkey = key_of(key);
  auto reply = run(rkey, {"GET", rkey});
  if (!reply) return reply.status();
  redisReply* r = reply->get();
  if (r->type == REDIS_REPLY_NIL) {
    counters_.miss();
    return not_found("redis tier: " + key.hex());
  }
  if (r->type != REDIS_REPLY_STRING) {
    counters_.error();
    return unavailable("redis tier: unexpected reply type to GET");
  }
  Bytes out(reinterpret_cast<const std::uint8_t*>(r->str), reinterpret_cast<const std::uint8_t*>(r->str) + r->len);
  counters_.hit(out.size(), std::chrono::steady_clock::now() - start);
  return out;
}

Status RedisTier::put(const ChunkKey& key, std::span<const std::uint8_t> bytes) {
  const std::string rkey = key_of(key);
  std::string_view value(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<std::string_view> args = {"SET", rkey, value};
  std::string ttl;
  if (options_.ttl.count() > 0) {
    ttl = std::to_string(options_.ttl.count());
    args.insert(args.end(), {"EX", ttl});
  }
  auto reply = run(rkey, args);
  if (!reply) return reply.status();
  counters_.written(bytes.size());
  return Status::ok();
}

Status RedisTier::erase(const ChunkKey& key) {
  const std::string rkey = key_of(key);
  auto reply = run(rkey, {"DEL", rkey});
  return reply ? Status::ok() : reply.status();
}

TierStats RedisTier::stats() const {
  TierStats s;
  counters_.fill(s);
  return s;
}

Expected<std::vector<ChunkKey>> RedisTier::list_keys() {
  auto masters = client_.masters();
  if (!masters) return masters.status();
  const std::string pattern = options_.key_prefix + "*";
  std::vector<ChunkKey> keys;
  for (const RedisEndpoint& node : *masters) {
    std::string cursor = "0";
    do {
      auto reply = client_.command_at(node, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (!reply) return reply.status();
      redisReply* r = reply->get();
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return unavailable("redis: bad SCAN reply");
      cursor.assign(r->element[0]->str, r->element[0]->len);
      for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
        std::string_view name(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
        auto key = ChunkKey::from_hex(name.substr(options_.key_prefix.size()));
        if (key) keys.push_back(*key);
      }
    } while (cursor != "0");
  }
  return keys;
}

Status RedisTier::clear() {
  auto keys = list_keys();
  if (!keys) return keys.status();
  for (const ChunkKey& key : *keys) KVSTASH_RETURN_IF_ERROR(erase(key));
  return Status::ok();
}

}  // namespace kvstash::cache
