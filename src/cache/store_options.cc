#include "cache/store_options.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <malloc.h>

#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/redis_tier.h"

namespace kvstash::cache {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Expected<std::uint64_t> parse_byte_size(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number(text.substr(0, i));
  if (number.empty() || number == ".") return invalid_argument("size: no number in '" + std::string(text) + "'");
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (*end != '\0') return invalid_argument("size: bad number in '" + std::string(text) + "'");
  std::string unit = lower(text.substr(i));
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double scale = 0;
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1}, {"b", 1},
      {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},
      {"m", 1048576.0}, {"mib", 1048576.0}, {"mb", 1e6},
      {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
      {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12}};
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  if (scale == 0) return invalid_argument("size: unknown unit in '" + std::string(text) + "'");
  const double bytes = value * scale;
  if (bytes > 1.8e19) return invalid_argument("size: too large: '" + std::string(text) + "'");
  return static_cast<std::uint64_t>(std::llround(bytes));
}

Expected<std::vector<RedisEndpoint>> parse_redis_url(std::string_view text) {
  constexpr std::string_view kScheme = "redis://";
  if (text.starts_with(kScheme)) text.remove_prefix(kScheme.size());
  std::vector<RedisEndpoint> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.starts_with(kScheme)) item.remove_prefix(kScheme.size());
    while (!item.empty() && item.back() == '/') item.remove_suffix(1);
    if (item.empty()) return invalid_argument("redis url: empty host");
    RedisEndpoint ep;
    const auto colon = item.rfind(':');
    if (colon == std::string_view::npos) {
      ep.host = std::string(item);
    } else {
      ep.host = std::string(item.substr(0, colon));
      const std::string port(item.substr(colon + 1));
      char* end = nullptr;
      const long p = std::strtol(port.c_str(), &end, 10);
      if (port.empty() || *end != '\0' || p <= 0 || p > 65535) {
        return invalid_argument("redis url: bad port '" + port + "'");
      }
      ep.port = static_cast<int>(p);
    }
    if (ep.host.empty()) return invalid_argument("redis url: empty host");
    out.push_back(std::move(ep));
  }
  if (out.empty()) return invalid_argument("redis url: no servers");
  return out;
}

void tune_allocator_for_chunks() {
  // 64 MiB: above any chunk (256 tokens of a 70B-class model's KV is ~80 MiB only in f32; f16
  // chunks of the presets are <= 8 MiB). 1 GiB of free heap top is kept before trimming.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

Expected<std::unique_ptr<TieredStore>> open_tiered_store(const StoreOptions& options) {
  std::vector<std::unique_ptr<Tier>> tiers;
  if (options.ram_bytes > 0) tiers.push_back(std::make_unique<MemoryTier>(options.ram_bytes));
  if (!options.disk_dir.empty()) {
    auto disk = DiskTier::open({.dir = options.disk_dir, .capacity_bytes = options.disk_bytes});
    if (!disk) return disk.status();
    tiers.push_back(std::move(*disk));
  }
  if (!options.redis.empty()) {
    RedisTierOptions redis;
    redis.client.seeds = options.redis;
    redis.ttl = options.redis_ttl;
    tiers.push_back(std::make_unique<RedisTier>(redis));
  }
  return std::make_unique<TieredStore>(std::move(tiers), options.store);
}

}  // namespace kvstash::cache
