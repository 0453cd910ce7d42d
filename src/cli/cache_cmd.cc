// `kvstash cache stats|verify|clear --cache-disk DIR [--cache-redis URL]`: maintenance of the KV
// chunk tiers outside the server. stats prints entries and bytes per tier; verify checks every
// chunk's header and payload checksum and removes the bad ones; clear removes every kvstash chunk.
// Response records (docs/response-record.md: DIR/responses and redis "kvstash:response:*") are
// walked too: verify also checks each record's structure, request key and signature (removing the
// bad ones), and with --trust-keys counts records whose producer is not trusted (kept).
// `stats --server URL` also reads a running server's /metrics for what only that process knows:
// its tiers as it sees them and their pins (prompt caching pins live in the server's memory).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/http_client.h"
#include "bench/server_metrics.h"
#include "cache/disk_tier.h"
#include "cache/prefix_alias.h"
#include "cache/redis_tier.h"
#include "cache/response_record.h"
#include "identity/identity.h"
#include "cache/store_options.h"
#include "cli/commands.h"

namespace kvstash::cli {
namespace {

using cache::Bytes;
using cache::ChunkKey;
using cache::Tier;

struct Counts {
  std::uint64_t entries = 0, bytes = 0, bad = 0, errors = 0;
  std::uint64_t aliases = 0;  // of the entries, prefix aliases (cache/prefix_alias.h)
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
    if (header->meta.kv_format == cache::kAliasKvFormat) ++c.aliases;
    c.bytes += bytes->size();
  }
  return c;
}

struct RecordCounts {
  std::uint64_t ok = 0, bytes = 0, bad = 0, untrusted = 0, errors = 0;
};

// Every response record of a tier: envelope, record, key and signature checked; the bad ones
// erased with `remove_bad`. `trust` null: every validly signed record counts as ok.
RecordCounts walk_records(Tier& tier, bool remove_bad, const identity::TrustList* trust) {
  RecordCounts c;
  auto keys = tier.list_keys();
  if (!keys) {
    ++c.errors;
    return c;
  }
  for (const ChunkKey& key : *keys) {
    auto bytes = tier.get(key);
    if (!bytes) {
      if (bytes.status().code() == StatusCode::kCorrupt) ++c.bad;
      else if (bytes.status().code() != StatusCode::kNotFound) ++c.errors;
      continue;
    }
    bool good = false;
    auto header = cache::verify_chunk(*bytes);
    if (header && header->meta.key == key && header->meta.kv_format == cache::kResponseKvFormat) {
      auto view = cache::decode_chunk(*bytes, cache::response_envelope_meta(key, header->meta.model_fingerprint));
      auto record = view ? cache::decode_response_record(view->payload) : Expected<cache::ResponseRecord>(view.status());
      good = record && record->request_key == key && record->model_fingerprint == header->meta.model_fingerprint &&
             identity::verify(record->producer, cache::kResponseSignatureDomain, cache::signed_message(*record),
                              record->signature);
      if (good && trust && !trust->trusts(record->producer)) {
        ++c.untrusted;
        continue;
      }
    }
    if (!good) {
      ++c.bad;
      if (remove_bad) (void)tier.erase(key);
      continue;
    }
    ++c.ok;
    c.bytes += bytes->size();
  }
  return c;
}

// `stats --server URL`: a line per tier of the running server, from its /metrics. 0 when printed,
// 1 when the server could not be read.
int live_stats(const std::string& url, const std::string& api_key) {
  auto endpoint = bench::parse_url(url);
  if (!endpoint) {
    std::fprintf(stderr, "kvstash cache: --server: %s\n", endpoint.status().message().c_str());
    return 2;
  }
  bench::ClientOptions options;
  options.api_key = api_key;
  options.timeout_s = 10;
  bench::OpenAiClient client(*endpoint, options);
  auto text = client.get_text("/metrics");
  if (!text) {
    std::fprintf(stderr, "kvstash cache: %s: %s%s\n", url.c_str(), text.status().message().c_str(),
                 text.status().message().find("401") != std::string::npos ? " (give --api-key)" : "");
    return 1;
  }
  const bench::MetricSamples samples = bench::parse_prometheus_text(*text);
  // Tiers by name (each has a capacity sample).
  const std::string capacity = "kvstash_kv_tier_capacity_bytes{tier=\"";
  std::vector<std::string> tiers;
  for (const auto& [name, value] : samples) {
    if (name.rfind(capacity, 0) == 0) tiers.push_back(name.substr(capacity.size(), name.size() - capacity.size() - 2));
  }
  if (tiers.empty()) {
    std::printf("%s: no KV store tiers (a server without a store, or not a kvstash server)\n", url.c_str());
    return 0;
  }
  for (const std::string& tier : tiers) {
    const auto v = [&](const char* metric) {
      auto it = samples.find(std::string(metric) + "{tier=\"" + tier + "\"}");
      return static_cast<unsigned long long>(it == samples.end() ? 0 : it->second);
    };
    std::printf("%s (live, %s): entries=%llu bytes=%llu capacity=%llu evictions=%llu pinned_entries=%llu "
                "pinned_bytes=%llu pin_intents=%llu pins_refused=%llu\n",
                tier.c_str(), url.c_str(), v("kvstash_kv_tier_entries"), v("kvstash_kv_tier_used_bytes"),
                v("kvstash_kv_tier_capacity_bytes"), v("kvstash_kv_tier_evictions_total"),
                v("kvstash_kv_tier_pinned_entries"), v("kvstash_kv_tier_pinned_bytes"), v("kvstash_kv_tier_pin_intents"),
                v("kvstash_kv_tier_pins_refused_total"));
  }
  return 0;
}

}  // namespace

namespace {

struct CacheOptions {
  std::string action;  // stats | verify | clear
  std::string disk_dir, redis_url;
  std::string server_url, api_key;  // stats --server
  std::string trust_file;           // verify --trust-keys
};

// The tiers a maintenance pass walks: KV chunks, and the response records beside them (their own
// directory / redis prefix).
struct OpenedTiers {
  std::vector<std::unique_ptr<Tier>> chunks;
  std::vector<std::unique_ptr<Tier>> records;
  std::uint64_t disk_rejected_at_open = 0;  // damaged chunk files the disk tier dropped while opening
};

// 0 and the tiers, or the exit code (1: cannot open, 2: a bad flag) after printing why.
int open_tiers(const CacheOptions& o, OpenedTiers& out) {
  if (!o.disk_dir.empty()) {
    // No size bound here: a maintenance pass must not evict what the server would keep.
    auto disk = cache::DiskTier::open({.dir = o.disk_dir, .capacity_bytes = UINT64_MAX});
    if (!disk) {
      std::fprintf(stderr, "kvstash cache: %s\n", disk.status().to_string().c_str());
      return 1;
    }
    out.disk_rejected_at_open = (*disk)->stats().rejected_chunks;
    out.chunks.push_back(std::move(*disk));
    std::error_code ec;
    if (std::filesystem::is_directory(o.disk_dir + "/responses", ec)) {
      auto records = cache::DiskTier::open({.dir = o.disk_dir + "/responses", .capacity_bytes = UINT64_MAX});
      if (records) out.records.push_back(std::move(*records));
    }
  }
  if (!o.redis_url.empty()) {
    auto target = cache::parse_redis_target(o.redis_url);
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
    out.chunks.push_back(std::move(tier));
    options.key_prefix = std::string(cache::kRedisResponseKeyPrefix);
    out.records.push_back(std::make_unique<cache::RedisTier>(options));
  }
  return 0;
}

// The action over the response records; 1 when a tier could not be walked or cleared.
int walk_record_tiers(const std::string& action, OpenedTiers& tiers, const identity::TrustList* trust) {
  int rc = 0;
  for (auto& tier : tiers.records) {
    if (action == "clear") {
      auto keys = tier->list_keys();
      Status st = tier->clear();
      std::printf("%s responses: removed %zu records\n", tier->name().c_str(), keys ? keys->size() : 0);
      if (!st) rc = 1;
      continue;
    }
    RecordCounts c = walk_records(*tier, action == "verify", trust);
    if (action == "stats") {
      std::printf("%s responses: records=%llu bytes=%llu\n", tier->name().c_str(),
                  static_cast<unsigned long long>(c.ok + c.untrusted), static_cast<unsigned long long>(c.bytes));
    } else {
      std::printf("%s responses: ok=%llu bad_removed=%llu untrusted=%llu errors=%llu\n", tier->name().c_str(),
                  static_cast<unsigned long long>(c.ok), static_cast<unsigned long long>(c.bad),
                  static_cast<unsigned long long>(c.untrusted), static_cast<unsigned long long>(c.errors));
    }
    if (c.errors) rc = 1;
  }
  return rc;
}

// The action over the KV chunks; 1 when a tier could not be walked or cleared.
int walk_chunk_tiers(const std::string& action, OpenedTiers& tiers) {
  int rc = 0;
  for (auto& tier : tiers.chunks) {
    const std::uint64_t at_open = tier->name() == "disk" ? tiers.disk_rejected_at_open : 0;
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
      std::printf("%s: entries=%llu bytes=%llu (prefix aliases among the entries: %llu)\n", tier->name().c_str(),
                  static_cast<unsigned long long>(c.entries), static_cast<unsigned long long>(c.bytes),
                  static_cast<unsigned long long>(c.aliases));
    } else {
      std::printf("%s: ok=%llu bad_removed=%llu errors=%llu\n", tier->name().c_str(),
                  static_cast<unsigned long long>(c.entries), static_cast<unsigned long long>(c.bad + at_open),
                  static_cast<unsigned long long>(c.errors));
    }
    if (c.errors) rc = 1;
  }
  return rc;
}

}  // namespace

int cache_main(int argc, char** argv) {
  CLI::App app{"Inspect, verify or clear the KV chunk tiers", "kvstash cache"};
  CacheOptions o;
  app.add_option("action", o.action, "stats | verify | clear")->required()->check(CLI::IsMember({"stats", "verify", "clear"}));
  app.add_option("--cache-disk", o.disk_dir, "the disk tier's directory");
  app.add_option("--cache-redis", o.redis_url, "redis://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]");
  app.add_option("--server", o.server_url,
                 "stats: also a running server's tiers and pins, from its /metrics (http://HOST:PORT)");
  app.add_option("--api-key", o.api_key, "the server's API key, for --server (unless it serves --public-metrics)");
  app.add_option("--trust-keys", o.trust_file,
                 "verify: also count response records whose producer is not one of these keys (a file of hex keys)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!o.server_url.empty() && o.action != "stats") {
    std::fprintf(stderr, "kvstash cache: --server is for stats only (%s works on the tiers' storage)\n", o.action.c_str());
    return 2;
  }
  if (o.disk_dir.empty() && o.redis_url.empty()) {
    if (!o.server_url.empty()) return live_stats(o.server_url, o.api_key);
    std::fprintf(stderr, "kvstash cache: give --cache-disk and/or --cache-redis (stats also: --server URL)\n");
    return 2;
  }
  std::unique_ptr<identity::TrustList> trust;
  if (!o.trust_file.empty()) {
    trust = std::make_unique<identity::TrustList>();
    if (Status st = trust->add_file(o.trust_file); !st) {
      std::fprintf(stderr, "kvstash cache: --trust-keys: %s\n", st.to_string().c_str());
      return 2;
    }
  }
  OpenedTiers tiers;
  if (int rc = open_tiers(o, tiers); rc != 0) return rc;
  int rc = walk_record_tiers(o.action, tiers, trust.get());
  if (int chunks_rc = walk_chunk_tiers(o.action, tiers); chunks_rc != 0) rc = chunks_rc;
  if (!o.server_url.empty()) {
    if (int live = live_stats(o.server_url, o.api_key); live != 0) rc = live;
  }
  return rc;
}

}  // namespace kvstash::cli
