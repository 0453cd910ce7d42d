// cache_bench: each tier's load bandwidth for 1-16 MiB chunks, divided by the bandwidth of the
// plain operation that bounds it, measured in the same run: memcpy for the memory tier, a
// sequential read of an equal-size file for the disk tier, a plain GET of an equal-size value for
// redis. A ratio near 1 means the tier adds little over its medium.
//
//   cache_bench [--dir DIR (default /tmp)] [--redis HOST:PORT] [--seconds S (default 0.3)]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/redis_tier.h"
#include "cache/store_options.h"

using namespace kvstash;
using namespace kvstash::cache;

namespace {

double seconds_per_run = 0.3;

// GiB/s of fn, which moves `bytes` per call; runs for about seconds_per_run after one warm-up.
double bandwidth(std::size_t bytes, const std::function<void()>& fn) {
  fn();
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds_per_run);
  return static_cast<double>(bytes) * calls / elapsed / (1 << 30);
}

void report(const char* tier, std::size_t mib, double tier_bw, const char* limit, double limit_bw) {
  std::printf("%-7s %3zu MiB  tier %7.2f GiB/s  %-10s %7.2f GiB/s  ratio %.2f\n", tier, mib, tier_bw,
              limit, limit_bw, tier_bw / limit_bw);
}

Bytes make_chunk(const ChunkKey& key, std::size_t payload_bytes) {
  ChunkMeta meta;
  meta.key = key;
  meta.kv_format = "bench";
  Bytes payload(payload_bytes);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 7);
  return *encode_chunk(meta, payload);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp", redis;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--redis")) redis = argv[i + 1];
    if (!std::strcmp(argv[i], "--seconds")) seconds_per_run = std::atof(argv[i + 1]);
  }
  const std::string disk_dir = dir + "/cache_bench." + std::to_string(::getpid());
  for (std::size_t mib : {1, 4, 16}) {
    ChunkKey key;
    key.bytes[0] = static_cast<std::uint8_t>(mib);
    const Bytes chunk = make_chunk(key, mib << 20);

    MemoryTier memory(std::uint64_t{64} << 20);
    (void)memory.put(key, chunk);
    Bytes dst(chunk.size());
    double copy = bandwidth(chunk.size(), [&] { std::memcpy(dst.data(), chunk.data(), chunk.size()); });
    double mem = bandwidth(chunk.size(), [&] { auto b = memory.get(key); });
    report("memory", mib, mem, "memcpy", copy);

    auto disk = DiskTier::open({.dir = disk_dir, .capacity_bytes = std::uint64_t{1} << 30});
    if (!disk) {
      std::fprintf(stderr, "disk: %s\n", disk.status().to_string().c_str());
      return 1;
    }
    (void)(*disk)->put(key, chunk);
    const std::string plain = disk_dir + "/plain.bin";
    (void)posix_file_system()->write_file_synced(plain, chunk);
    double read = bandwidth(chunk.size(), [&] { auto b = posix_file_system()->read_file(plain); });
    double dsk = bandwidth(chunk.size(), [&] { auto b = (*disk)->get(key); });
    report("disk", mib, dsk, "file read", read);

    if (!redis.empty()) {
      auto endpoints = parse_redis_url(redis);
      if (!endpoints) return 1;
      RedisTierOptions options;
      options.client.seeds = *endpoints;
      options.client.command_timeout = std::chrono::milliseconds(5000);
      RedisTier tier(options);
      if (!tier.put(key, chunk)) {
        std::fprintf(stderr, "redis: put failed\n");
        return 1;
      }
      const std::string plain_key = "cache_bench:plain";
      std::string_view value(reinterpret_cast<const char*>(chunk.data()), chunk.size());
      (void)tier.client().command(plain_key, {"SET", plain_key, value});
      auto check = tier.client().command(plain_key, {"GET", plain_key});
      if (!check || (*check)->type != REDIS_REPLY_STRING || (*check)->len != chunk.size()) {
        std::fprintf(stderr, "redis: plain GET did not return the value\n");
        return 1;
      }
      double red = bandwidth(chunk.size(), [&] { auto b = tier.get(key); });
      double get = bandwidth(chunk.size(), [&] { auto r = tier.client().command(plain_key, {"GET", plain_key}); });
      report("redis", mib, red, "plain GET", get);
      (void)tier.erase(key);
      (void)tier.client().command(plain_key, {"DEL", plain_key});
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(disk_dir, ec);
  return 0;
}
