// StoreOptions: the serve flags of the KV chunk store, their parsers, and the factory that builds
// a TieredStore from them (memory → disk → redis, each present only when configured).
//
//   --cache-ram 4GiB  --cache-disk DIR  --cache-disk-size 50GiB
//   --cache-redis redis://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]  --cache-redis-ttl 0
//   --cache-redis-pool 8  --chunk-tokens 256
//
// Thread safety: plain values and pure functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cache/pins.h"
#include "cache/redis_client.h"
#include "cache/redis_tier.h"
#include "cache/tiered_store.h"

namespace kvstash::cache {

struct StoreOptions {
  std::uint64_t ram_bytes = std::uint64_t{4} << 30;    // --cache-ram, 4 GiB; 0 = no memory tier
  std::string disk_dir;                                // --cache-disk; empty = no disk tier
  std::uint64_t disk_bytes = std::uint64_t{50} << 30;  // --cache-disk-size, 50 GiB
  std::vector<RedisEndpoint> redis;                    // --cache-redis; empty = no redis tier
  std::string redis_user;                              // from the URL; empty = the default user
  std::string redis_password;                          // from the URL; empty = no AUTH
  std::chrono::seconds redis_ttl{0};                   // --cache-redis-ttl; expiry of redis chunks; 0 = none
  std::size_t redis_pool = 8;                          // --cache-redis-pool; connections per redis node
  std::string redis_key_prefix = std::string(kRedisKeyPrefix);  // response records: kRedisResponseKeyPrefix
  std::uint32_t chunk_tokens = 256;                    // --chunk-tokens; a multiple of the block size
  TieredStoreOptions store;                            // queue bound, tier timeout, compression, longest pin
  PinOptions pins{};                                   // the memory and disk tiers' pinned share (pins.h)
};

// "4GiB", "512MiB", "10GB", "1.5G", "4096", "64k": binary suffixes (KiB MiB GiB TiB, or K M G T
// alone) are powers of 1024, decimal ones (kB MB GB TB) powers of 1000, none = bytes. Case-insensitive.
Expected<std::uint64_t> parse_byte_size(std::string_view text);

// What --cache-redis names: the nodes (one server, or seeds of a cluster) and the credentials.
struct RedisTarget {
  std::vector<RedisEndpoint> nodes;
  std::string user;      // ACL user; empty = the default user
  std::string password;  // empty = no AUTH
};

// "redis://[USER:PASSWORD@]h1:6379[,h2:6380...]" (scheme optional, port defaults to 6379;
// "redis://:PASSWORD@h" for the default user; %XX escapes in USER and PASSWORD). Credentials may
// be given once, on the first node, or repeated identically on each.
Expected<RedisTarget> parse_redis_target(std::string_view text);
// parse_redis_target(text).nodes, for callers that take no credentials.
Expected<std::vector<RedisEndpoint>> parse_redis_url(std::string_view text);

// "3600", "90s", "30m", "12h", "7d" -> seconds (0 = no expiry).
Expected<std::chrono::seconds> parse_duration(std::string_view text);

// Sets options' redis fields from the flags' text: --cache-redis (url), --cache-redis-ttl
// (ttl; empty = keep the default, no expiry), --cache-redis-pool (pool >= 1).
Status apply_redis_flags(std::string_view url, std::string_view ttl, int pool, StoreOptions& options);

// Process-wide malloc tuning for a process that moves chunks (call once, early, from main's
// thread). glibc serves blocks above its mmap threshold (128 KiB at first) with fresh mmap'd pages
// and gives freed heap tops back to the kernel, so every loaded chunk (hundreds of KiB) was copied
// into never-touched memory: page faults made a memory-tier load ~8x slower than memcpy
// (bench-cache, BENCHMARKS.md). Raising both thresholds keeps chunk buffers on the heap and warm.
void tune_allocator_for_chunks();

// The store for these options. Fails if the disk directory cannot be created or scanned, or if
// redis refuses the credentials (kInvalidArgument, naming the node and the cause). An unreachable
// redis does not fail it (logged; the tier fails fast until redis comes back). What redis was
// connected is logged (version, standalone or cluster, user, pool, TTL). `slowest`, when given, is
// appended after the configured tiers (the peers tier of share/peers_tier.h).
Expected<std::unique_ptr<TieredStore>> open_tiered_store(const StoreOptions& options,
                                                         std::unique_ptr<Tier> slowest = nullptr);

}  // namespace kvstash::cache
