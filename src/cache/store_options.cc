#include "cache/store_options.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <malloc.h>

#include "cache/disk_tier.h"
#include "cache/log.h"
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

namespace {

// %XX escapes of URL userinfo.
Expected<std::string> percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return invalid_argument("redis url: bad % escape");
    const std::string hex(text.substr(i + 1, 2));
    char* end = nullptr;
    const long v = std::strtol(hex.c_str(), &end, 16);
    if (hex.size() != 2 || *end != '\0') return invalid_argument("redis url: bad % escape");
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

}  // namespace

Expected<RedisTarget> parse_redis_target(std::string_view text) {
  constexpr std::string_view kScheme = "redis://";
  if (text.starts_with(kScheme)) text.remove_prefix(kScheme.size());
  RedisTarget out;
  bool have_credentials = false;
  while (!text.empty()) {
    const auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.starts_with(kScheme)) item.remove_prefix(kScheme.size());
    while (!item.empty() && item.back() == '/') item.remove_suffix(1);
    if (const auto at = item.rfind('@'); at != std::string_view::npos) {
      const std::string_view userinfo = item.substr(0, at);
      item.remove_prefix(at + 1);
      const auto colon = userinfo.find(':');
      auto user = percent_decode(colon == std::string_view::npos ? std::string_view{} : userinfo.substr(0, colon));
      // "redis://secret@host" is a password alone, as redis-cli reads it.
      auto password = percent_decode(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
      if (!user) return user.status();
      if (!password) return password.status();
      if (password->empty()) return invalid_argument("redis url: empty password");
      if (have_credentials && (*user != out.user || *password != out.password)) {
        return invalid_argument("redis url: different credentials for different nodes");
      }
      out.user = std::move(*user);
      out.password = std::move(*password);
      have_credentials = true;
    }
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
    out.nodes.push_back(std::move(ep));
  }
  if (out.nodes.empty()) return invalid_argument("redis url: no servers");
  return out;
}

Expected<std::vector<RedisEndpoint>> parse_redis_url(std::string_view text) {
  auto target = parse_redis_target(text);
  if (!target) return target.status();
  return std::move(target->nodes);
}

Expected<std::chrono::seconds> parse_duration(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 12) return invalid_argument("duration: expected a whole number of seconds in '" + std::string(text) + "'");
  const long long value = std::stoll(std::string(text.substr(0, i)));
  const std::string unit = lower(text.substr(i));
  long long scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  if (unit == "m") scale = 60;
  if (unit == "h") scale = 3600;
  if (unit == "d") scale = 86400;
  if (scale == 0) return invalid_argument("duration: unknown unit in '" + std::string(text) + "' (s, m, h, d)");
  return std::chrono::seconds(value * scale);
}

Status apply_redis_flags(std::string_view url, std::string_view ttl, int pool, StoreOptions& options) {
  if (!url.empty()) {
    auto target = parse_redis_target(url);
    if (!target) return invalid_argument("--cache-redis: " + target.status().message());
    options.redis = std::move(target->nodes);
    options.redis_user = std::move(target->user);
    options.redis_password = std::move(target->password);
  }
  if (!ttl.empty()) {
    auto seconds = parse_duration(ttl);
    if (!seconds) return invalid_argument("--cache-redis-ttl: " + seconds.status().message());
    options.redis_ttl = *seconds;
  }
  if (pool < 1 || pool > 1024) return invalid_argument("--cache-redis-pool must be in [1, 1024]");
  options.redis_pool = static_cast<std::size_t>(pool);
  return Status::ok();
}

void tune_allocator_for_chunks() {
  // 64 MiB: above any chunk (256 tokens of a 70B-class model's KV is ~80 MiB only in f32; f16
  // chunks of the presets are <= 8 MiB). 1 GiB of free heap top is kept before trimming.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

Expected<std::unique_ptr<TieredStore>> open_tiered_store(const StoreOptions& options, std::unique_ptr<Tier> slowest) {
  std::vector<std::unique_ptr<Tier>> tiers;
  if (options.ram_bytes > 0) tiers.push_back(std::make_unique<MemoryTier>(options.ram_bytes, options.pins));
  if (!options.disk_dir.empty()) {
    auto disk = DiskTier::open({.dir = options.disk_dir, .capacity_bytes = options.disk_bytes, .pins = options.pins});
    if (!disk) return disk.status();
    tiers.push_back(std::move(*disk));
  }
  if (!options.redis.empty()) {
    RedisTierOptions redis;
    redis.client.seeds = options.redis;
    redis.client.user = options.redis_user;
    redis.client.password = options.redis_password;
    redis.client.pool_size = options.redis_pool;
    redis.ttl = options.redis_ttl;
    redis.key_prefix = options.redis_key_prefix;
    auto tier = std::make_unique<RedisTier>(redis);
    auto connected = tier->client().connect_now();
    const std::string ttl = options.redis_ttl.count() > 0 ? std::to_string(options.redis_ttl.count()) + " s" : "none";
    if (connected) {
      log_info("connected to " + *connected + ", chunk TTL " + ttl);
    } else if (connected.status().code() == StatusCode::kInvalidArgument) {
      return connected.status();  // wrong credentials: a configuration error, not an outage
    } else {
      log_warning("redis not reachable at start (" + connected.status().message() +
                  "); the redis tier fails fast until it answers");
    }
    tiers.push_back(std::move(tier));
  }
  if (slowest) tiers.push_back(std::move(slowest));
  return std::make_unique<TieredStore>(std::move(tiers), options.store);
}

}  // namespace kvstash::cache
