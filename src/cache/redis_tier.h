// RedisTier: chunks in a Redis server or Redis Cluster shared by many kvstash nodes.
//
// Each chunk is one string value, the encoded chunk bytes, under "kvstash:chunk:<64 hex>" (the prefix is an option:
// response records use "kvstash:response:"), with an optional TTL. Routing, redirects, timeouts and reconnection are RedisClient's (redis_client.h):
// while redis is unreachable every call fails at once with kUnavailable and is counted in errors.
// entries/bytes_used in stats() are 0: the server, not this process, holds and bounds them.
// contains()/holds() ask EXISTS for every key in one pipeline per node (one round trip for a
// whole prefix on a single server; one per master on a cluster).
//
// Thread safety: safe from many threads; calls run in parallel on RedisClient's connection pool.
#pragma once

#include <memory>

#include "cache/redis_client.h"
#include "cache/tier.h"

namespace kvstash::cache {

inline constexpr std::string_view kRedisKeyPrefix = "kvstash:chunk:";
// Response records (cache/response_record.h) live under their own prefix, so `kvstash cache ls`
// and clear() of the KV chunk tier never touch them and vice versa.
inline constexpr std::string_view kRedisResponseKeyPrefix = "kvstash:response:";

struct RedisTierOptions {
  RedisOptions client;                 // servers and timeouts
  std::chrono::seconds ttl{0};         // expiry of stored chunks; 0 = none
  std::string key_prefix = std::string(kRedisKeyPrefix);  // redis key = prefix + 64 hex digits
};

class RedisTier final : public Tier {
 public:
  explicit RedisTier(RedisTierOptions options);

  std::string name() const override { return "redis"; }
  // Stops at the first absent key, and at the first error (counted). One pipeline per node.
  std::size_t contains(std::span<const ChunkKey> keys) override;
  std::vector<bool> holds(std::span<const ChunkKey> keys) override;
  Expected<Bytes> get(const ChunkKey& key) override;
  Status put(const ChunkKey& key, std::span<const std::uint8_t> bytes) override;
  Status erase(const ChunkKey& key) override;
  TierStats stats() const override;
  // SCAN over every master for the kvstash key prefix.
  Expected<std::vector<ChunkKey>> list_keys() override;
  Status clear() override;

  // The redis key of a KV chunk (the default prefix); key_of() uses this tier's prefix.
  static std::string redis_key(const ChunkKey& key);
  std::string key_of(const ChunkKey& key) const { return options_.key_prefix + key.hex(); }
  RedisClient& client() { return client_; }

 private:
  Expected<RedisReplyPtr> run(const std::string& key, const std::vector<std::string_view>& args);

  const RedisTierOptions options_;
  RedisClient client_;
  TierCounters counters_;
};

}  // namespace kvstash::cache
