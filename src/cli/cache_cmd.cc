// `kvstash cache stats|verify|clear --cache-disk DIR [--cache-redis URL]`: maintenance of the KV
// chunk tiers outside the server. stats prints entries and bytes per tier; verify checks every
// chunk's header and payload checksum and removes the bad ones; clear removes every kvstash chunk.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache/disk_tier.h"
#include "cache/redis_tier.h"
#include "cache/store_options.h"
#include "cli/commands.h"

namespace kvstash::cli {
namespace {

using cache::Bytes;
using cache::ChunkKey;
using cache::Tier;

struct Counts {
  std::uint64_t entries = 0, bytes = 0, bad = 0, errors = 0;
};

// Reads every chunk of the tier; with `remove_bad`, erases those that fail verify_chunk().
Counts walk(Tier& tier, bool remove_bad) {
  Counts c;
  auto keys = tier.list_keys();
  if (!keys) {
    std::fprintf(stderr, "%s: %s\n", tier.name().c_str(), keys.status().to_string().c_str());
    ++c.errors;
    return c;
  }
  for (const ChunkKey& key : *keys) {
    auto bytes = tier.get(key);
    if (!bytes) {
      // The disk tier finds and deletes damaged files itself: that is a bad chunk, not an error.
      if (bytes.status().code() == StatusCode::kCorrupt) {
        ++c.bad;
      } else if (bytes.status().code() != StatusCode::kNotFound) {
        ++c.errors;
      }
      continue;
    }
    auto header = cache::verify_chunk(*bytes);
    if (!header || header->meta.key != key) {
      ++c.bad;
      if (remove_bad) (void)tier.erase(key);
      continue;
    }
    ++c.entries;
    c.bytes += bytes->size();
  }
  return c;
}

}  // namespace

int cache_main(int argc, char** argv) {
  CLI::App app{"Inspect, verify or clear the KV chunk tiers", "kvstash cache"};
  std::string action;
  std::string disk_dir;
  std::string redis_url;
  app.add_option("action", action, "stats | verify | clear")->required()->check(
      CLI::IsMember({"stats", "verify", "clear"}));
  app.add_option("--cache-disk", disk_dir, "the disk tier's directory");
  app.add_option("--cache-redis", redis_url, "redis://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (disk_dir.empty() && redis_url.empty()) {
    std::fprintf(stderr, "kvstash cache: give --cache-disk and/or --cache-redis\n");
    return 2;
  }

  std::vector<std::unique_ptr<Tier>> tiers;
  std::uint64_t disk_rejected_at_open = 0;
  if (!disk_dir.empty()) {
    // No size bound here: a maintenance pass must not evict what the server would keep.
    auto disk = cache::DiskTier::open({.dir = disk_dir, .capacity_bytes = UINT64_MAX});
    if (!disk) {
      std::fprintf(stderr, "kvstash cache: %s\n", disk.status().to_string().c_str());
      return 1;
    }
    disk_rejected_at_open = (*disk)->stats().rejected_chunks;
    tiers.push_back(std::move(*disk));
  }
  if (!redis_url.empty()) {
    auto target = cache::parse_redis_target(redis_url);
    if (!target) {
      std::fprintf(stderr, "kvstash cache: %s\n", target.status().to_string().c_str());
      return 2;
    }
    cache::RedisTierOptions options;
    options.client.seeds = target->nodes;
    options.client.user = target->user;
    options.client.password = target->password;
    auto tier = std::make_unique<cache::RedisTier>(options);
    if (auto connected = tier->client().connect_now(); !connected) {
      std::fprintf(stderr, "kvstash cache: %s\n", connected.status().to_string().c_str());
      return 1;
    }
    tiers.push_back(std::move(tier));
  }

  int rc = 0;
  for (auto& tier : tiers) {
    const std::uint64_t at_open = tier->name() == "disk" ? disk_rejected_at_open : 0;
    if (action == "clear") {
      auto keys = tier->list_keys();
      Status st = tier->clear();
      std::printf("%s: removed %zu chunks%s\n", tier->name().c_str(), keys ? keys->size() : 0,
                  st ? "" : (" (" + st.to_string() + ")").c_str());
      if (!st) rc = 1;
      continue;
    }
    Counts c = walk(*tier, action == "verify");
    if (action == "stats") {
      std::printf("%s: entries=%llu bytes=%llu\n", tier->name().c_str(),
                  static_cast<unsigned long long>(c.entries), static_cast<unsigned long long>(c.bytes));
    } else {
      std::printf("%s: ok=%llu bad_removed=%llu errors=%llu\n", tier->name().c_str(),
                  static_cast<unsigned long long>(c.entries),
                  static_cast<unsigned long long>(c.bad + at_open),
                  static_cast<unsigned long long>(c.errors));
    }
    if (c.errors) rc = 1;
  }
  return rc;
}

}  // namespace kvstash::cli
