// kvstash bench-cache: time to first token of a long prompt whose leading chunks are served by
// one tier of the KV store (memory, disk, redis), against the same prompt computed cold, and each
// tier's load bandwidth against that medium's own limit measured in the same run (memcpy for
// memory, a sequential read of an equal-size file for disk, a GET of an equal-size value for redis).
//
// Method: one cold request (a store with every tier attached, so its chunks are written to all of
// them) on prompt P; then, per tier, a fresh engine (empty pool) with a store holding only that
// tier serves P' = P's first (prompt − uncached) tokens + different ones, so exactly the leading
// chunks hit and `uncached` tokens are prefilled. The disk tier's files are evicted from the page
// cache first (drop_caches if permitted, else posix_fadvise(DONTNEED) per file; the output says which).
//
// A load is timed as the engine will run it (issue 10): plan_load() over the prefix's keys (one
// round trip per tier), then load(metas, plan). The redis limit is one GET of a value as large as
// the whole load, through the same RedisClient (same connection pool) as the tier's loads.
// --bandwidth-only skips the engine runs (TTFT) and stores synthetic chunks of the model's KV size.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "cache/chunk_key.h"
#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/redis_tier.h"
#include "cache/store_options.h"
#include "cli/bench_cache_stall.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace kvstash::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Evicts a file's pages from the page cache (clean pages only: fsync first).
void evict_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Drops the page cache if this process may; else evicts every file under dir. Returns the method.
std::string drop_page_cache(const std::string& dir) {
  ::sync();
  if (std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w")) {
    const bool ok = std::fputs("3", f) >= 0;
    if (std::fclose(f) == 0 && ok) return "drop_caches";
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) evict_file(e.path().string());
  }
  return "fadvise(DONTNEED) per file (drop_caches not permitted)";
}

// The expectations the engine checks chunks against (as Engine makes them), for timing load().
std::vector<cache::ChunkMeta> chunk_metas(const Model& model, const std::string& kv_format,
                                          std::span<const TokenId> tokens, int chunk_tokens) {
  const ModelConfig& c = model.config();
  std::vector<cache::ChunkMeta> out;
  const auto keys = cache::chunk_keys(model.fingerprint(), kv_format, "", tokens, static_cast<std::size_t>(chunk_tokens));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    cache::ChunkMeta m;
    m.key = keys[i];
    m.model_fingerprint = model.fingerprint();
    m.kv_format = kv_format;
    m.token_count = static_cast<std::uint32_t>(chunk_tokens);
    m.first_position = static_cast<std::uint32_t>(i * static_cast<std::size_t>(chunk_tokens));
    m.n_layers = static_cast<std::uint32_t>(c.n_layers);
    m.n_kv_heads = static_cast<std::uint32_t>(c.n_kv_heads);
    m.head_dim = static_cast<std::uint32_t>(c.head_dim);
    m.element_type = static_cast<std::uint32_t>(gguf::TensorType::kF16);
    out.push_back(std::move(m));
  }
  return out;
}

struct Bench {
  const Model& model;
  EngineOptions engine_options;
  std::string kv_format;  // the engine's, learnt on the first request

  // A fresh engine (empty pool) in front of `store`.
  Expected<std::unique_ptr<Engine>> engine_for(cache::TieredStore* store) {
    EngineOptions o = engine_options;
    o.kv_store = store;
    auto engine = Engine::create(model, o);
    if (engine) kv_format = (*engine)->kv_format();
    return engine;
  }

  // TTFT of one greedy token of `prompt` on `engine`.
  static Expected<GenerationResult> first_token(Engine& engine, const std::vector<TokenId>& prompt) {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 1;
    return generate(engine, std::move(r));
  }

  // TTFT of one request on a fresh engine (empty pool) in front of `store`.
  Expected<GenerationResult> ttft(cache::TieredStore* store, const std::vector<TokenId>& prompt) {
    auto engine = engine_for(store);
    if (!engine) return engine.status();
    return first_token(**engine, prompt);
  }

  // Cold TTFT of `prompt` in front of `store`, then, on the same engine, the TTFT of `hit_prompt`
  // whose leading blocks that run left in the pool: the tail's prefill at full context and nothing
  // loaded (the "+ tail prefill" of the physical-limit bound).
  Expected<std::pair<GenerationResult, GenerationResult>> cold_then_pool_hit(cache::TieredStore* store, const std::vector<TokenId>& prompt,
                                                                             const std::vector<TokenId>& hit_prompt, int cached_tokens,
                                                                             int repeats) {
    auto engine = engine_for(store);
    if (!engine) return engine.status();
    auto cold = first_token(**engine, prompt);
    if (!cold) return cold.status();
    if (store) store->flush();  // the cold run's chunks are written before the timed runs, not during
    // Best of `repeats`, each with a tail of its own (a repeated tail would hit the pool too).
    std::optional<GenerationResult> best;
    const int nv = model.config().n_vocab;
    for (int r = 0; r < repeats; ++r) {
      std::vector<TokenId> p = hit_prompt;
      for (std::size_t i = static_cast<std::size_t>(cached_tokens); r > 0 && i < p.size(); ++i) {
        p[i] = static_cast<TokenId>((static_cast<int>(i) * 31 + 5 + r * 977) % nv);
      }
      auto pool = first_token(**engine, p);
      if (!pool) return pool.status();
      if (!best || pool->ttft_s < best->ttft_s) best = std::move(*pool);
    }
    return std::make_pair(std::move(*cold), std::move(*best));
  }
};

// Bytes per second of memcpy over `bytes` (best of 3), the memory tier's limit.
double memcpy_bandwidth(std::size_t bytes) {
  std::vector<std::uint8_t> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, seconds_since(t0));
  }
  return static_cast<double>(bytes) / best;
}

// Bytes per second of a cold sequential read of one file of `bytes` in dir (best of 3), the disk
// tier's limit.
double disk_read_bandwidth(const std::string& dir, std::size_t bytes) {
  const std::string path = dir + "/bench-cache-limit.bin";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    std::vector<char> block(1 << 20, 7);
    for (std::size_t done = 0; done < bytes; done += block.size()) out.write(block.data(), static_cast<std::streamsize>(std::min(block.size(), bytes - done)));
  }
  std::vector<char> buf(1 << 20);
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    drop_page_cache(dir);
    evict_file(path);
    const int fd = ::open(path.c_str(), O_RDONLY);
    const auto t0 = Clock::now();
    std::size_t total = 0;
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += static_cast<std::size_t>(n);
    best = std::max(best, static_cast<double>(total) / seconds_since(t0));
    ::close(fd);
  }
  std::filesystem::remove(path);
  return best;
}

// Bytes per second of GET of one value of `bytes` (best of 3) through `client`, the redis tier's
// limit.
double redis_get_bandwidth(cache::RedisClient& client, std::size_t bytes) {
  const std::string key = "kvstash:bench-cache-limit", value(bytes, 'x');
  if (!client.command(key, {"SET", key, value})) return 0;
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    auto r = client.command(key, {"GET", key});
    const double s = seconds_since(t0);
    if (!r || (*r)->type != REDIS_REPLY_STRING || (*r)->len != bytes) return 0;
    best = std::min(best, s);
  }
  (void)client.command(key, {"DEL", key});
  return static_cast<double>(bytes) / best;
}

}  // namespace

int bench_cache_main(int argc, char** argv) {
  CLI::App app{"TTFT with the prompt's leading chunks served from each KV store tier, against cold TTFT; "
               "each tier's load bandwidth against its medium's limit.",
               "kvstash bench-cache"};
  std::string model_path, disk_dir, redis_url;
  std::string redis_cluster_url;
  int prompt_tokens = 4096, uncached_tokens = 64, chunk_tokens = 64, n_threads = 0, repeats = 3;
  int load_threads = 4, load_depth = 8, redis_pool = 8, stall_streams = 0;
  bool bandwidth_only = false;
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("--prompt-tokens", prompt_tokens, "prompt length")->capture_default_str();
  app.add_option("--uncached-tokens", uncached_tokens, "trailing tokens not in the store")->capture_default_str();
  app.add_option("--chunk-tokens", chunk_tokens, "tokens per chunk (64 makes prompt - uncached whole chunks)")
      ->capture_default_str();
  app.add_option("--cache-disk", disk_dir, "disk tier directory (emptied first); default: a temp dir");
  app.add_option("--cache-redis", redis_url, "redis tier (flushed of kvstash chunks first); none = no redis row");
  app.add_option("--cache-redis-cluster", redis_cluster_url,
                 "a Redis Cluster (any node; flushed of kvstash chunks first); none = no redis-cluster row");
  app.add_option("--load-threads", load_threads, "the store's I/O threads for loads (TieredStoreOptions)")
      ->capture_default_str();
  app.add_option("--load-depth", load_depth, "gets in flight per load")->capture_default_str();
  app.add_option("--redis-pool", redis_pool, "connections per redis node")->capture_default_str();
  app.add_flag("--bandwidth-only", bandwidth_only, "no engine runs: load bandwidth of synthetic chunks only");
  app.add_option("--stall", stall_streams,
                 "N > 0: N streams decode while a request loads the cached prefix from redis, then from disk; "
                 "their inter-token latency with and without the load")
      ->capture_default_str();
  app.add_option("-t,--threads", n_threads, "threads; 0 = all cores")->capture_default_str();
  app.add_option("--repeats", repeats, "best of this many hits and loads per tier")->capture_default_str();
  ModelLoadOptions model_load;
  add_model_load_flags(app, model_load);
  CLI11_PARSE(app, argc, argv);
  if (chunk_tokens <= 0 || chunk_tokens % 16 != 0 || uncached_tokens < 1 || uncached_tokens >= prompt_tokens ||
      repeats < 1) {
    std::fprintf(stderr, "bench-cache: --chunk-tokens must be a multiple of 16, 1 <= --uncached-tokens < --prompt-tokens\n");
    return 1;
  }
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "bench-cache: %s\n", st.to_string().c_str());
    return 1;
  };
  if (load_threads < 0 || load_depth < 0 || redis_pool < 1) {
    std::fprintf(stderr, "bench-cache: --load-threads, --load-depth >= 0, --redis-pool >= 1\n");
    return 1;
  }
  cache::TieredStoreOptions store_options;
  store_options.load_threads = static_cast<std::size_t>(load_threads);
  store_options.load_depth = static_cast<std::size_t>(load_depth);
  // The redis tiers as serve builds them (credentials from the URL), with a command timeout long
  // enough for the one-value limit measurement.
  auto redis_options = [&](const std::string& url) -> Expected<cache::RedisTierOptions> {
    auto target = cache::parse_redis_target(url);
    if (!target) return target.status();
    cache::RedisTierOptions o;
    o.client.seeds = target->nodes;
    o.client.user = target->user;
    o.client.password = target->password;
    o.client.pool_size = static_cast<std::size_t>(redis_pool);
    o.client.command_timeout = std::chrono::milliseconds(30000);
    return o;
  };
  std::vector<cache::RedisEndpoint> redis;
  std::string redis_user, redis_password;
  if (!redis_url.empty()) {
    auto parsed = cache::parse_redis_target(redis_url);
    if (!parsed) return fail(parsed.status());
    redis = parsed->nodes;
    redis_user = parsed->user;
    redis_password = parsed->password;
  }
  if (disk_dir.empty()) disk_dir = (std::filesystem::temp_directory_path() / "kvstash-bench-cache").string();
  std::filesystem::remove_all(disk_dir);

  cache::tune_allocator_for_chunks();  // as serve does
  auto loaded = Model::load(model_path, model_load);
  if (!loaded) return fail(loaded.status());
  const Model& model = **loaded;
  Bench bench{model, {}, {}};
  bench.engine_options.n_ctx = prompt_tokens + 16;
  bench.engine_options.kv_pool_tokens = prompt_tokens + 64;
  bench.engine_options.max_running = 1;
  bench.engine_options.n_threads = n_threads;
  bench.engine_options.chunk_tokens = chunk_tokens;

  std::vector<TokenId> prompt(static_cast<std::size_t>(prompt_tokens));
  const int nv = model.config().n_vocab;
  for (int i = 0; i < prompt_tokens; ++i) prompt[static_cast<std::size_t>(i)] = static_cast<TokenId>((i * 7919 + 13) % nv);
  std::vector<TokenId> hit_prompt = prompt;  // same leading tokens, different tail: the tail's chunk misses
  const int cached = prompt_tokens - uncached_tokens;
  for (int i = cached; i < prompt_tokens; ++i) hit_prompt[static_cast<std::size_t>(i)] = static_cast<TokenId>((i * 31 + 5) % nv);

  // Cold, with every tier attached so the chunks land in all of them.
  cache::StoreOptions all;
  all.ram_bytes = std::uint64_t{8} << 30;
  all.disk_dir = disk_dir;
  all.redis = redis;
  all.redis_user = redis_user;
  all.redis_password = redis_password;
  all.redis_pool = static_cast<std::size_t>(redis_pool);
  all.chunk_tokens = static_cast<std::uint32_t>(chunk_tokens);
  all.store = store_options;
  auto populated = cache::open_tiered_store(all);
  if (!populated) return fail(populated.status());
  if (!redis.empty()) (void)(*populated)->tier((*populated)->tier_count() - 1).clear();
  std::optional<GenerationResult> cold, pool_hit;
  if (bandwidth_only) {
    // The engine's kv_format without a run; chunks of the engine's payload size, stored as the
    // engine stores them (each with its predecessors).
    auto engine = bench.engine_for(nullptr);
    if (!engine) return fail(engine.status());
  } else {
    std::fprintf(stderr, "… cold prefill of %d tokens\n", prompt_tokens);
    auto runs = bench.cold_then_pool_hit(populated->get(), prompt, hit_prompt, cached, repeats);
    if (!runs) return fail(runs.status());
    cold = std::move(runs->first);
    pool_hit = std::move(runs->second);
  }
  const auto metas = chunk_metas(model, bench.kv_format, std::span<const TokenId>(hit_prompt.data(), static_cast<std::size_t>(cached / chunk_tokens * chunk_tokens)), chunk_tokens);
  std::vector<cache::ChunkKey> keys;
  for (const auto& m : metas) keys.push_back(m.key);
  if (bandwidth_only) {
    const ModelConfig& c = model.config();
    const std::size_t payload = static_cast<std::size_t>(c.n_layers) * 2 * static_cast<std::size_t>(chunk_tokens) *
                                static_cast<std::size_t>(c.n_kv_heads) * static_cast<std::size_t>(c.head_dim) * 2;
    std::vector<std::uint8_t> bytes(payload);
    for (std::size_t i = 0; i < metas.size(); ++i) {
      for (std::size_t b = 0; b < payload; ++b) bytes[b] = static_cast<std::uint8_t>(b * 31 + i * 7);
      Status st = (*populated)->store(metas[i], bytes, std::span<const cache::ChunkKey>(keys.data(), i));
      if (!st) return fail(st);
      (*populated)->flush();  // each write lands (the queue's bound is no part of this measurement)
    }
  }
  (*populated)->flush();

  struct Row {
    std::string tier;
    double ttft_s = 0;
    int cached_tokens = 0;
    double load_s = 0;
    std::uint64_t load_bytes = 0;
    double limit_bps = 0;
    double plan_s = 0;
    std::size_t chunks = 0;
    std::string note;
    cache::RedisClient* client = nullptr;  // redis rows: the tier's client, for the limit
  };
  std::vector<Row> rows;
  // Best of `repeats` for both figures: the machine is shared, and the best run is the one the
  // least disturbed by others.
  auto measure = [&](const std::string& name, cache::TieredStore& store, auto before_each) -> Status {
    Row row;
    row.tier = name;
    row.ttft_s = row.load_s = 1e30;
    for (int r = 0; r < repeats && !bandwidth_only; ++r) {
      before_each();
      auto hit = bench.ttft(&store, hit_prompt);
      if (!hit) return hit.status();
      row.ttft_s = std::min(row.ttft_s, hit->ttft_s);
      row.cached_tokens = hit->cached_tokens;
    }
    for (int r = 0; r < repeats; ++r) {
      // The store's load alone, as the engine runs it: one plan (a round trip per tier), then the
      // gets, verification and decode of every chunk; timed from outside.
      before_each();
      const auto t0 = Clock::now();
      const cache::LoadPlan plan = store.plan_load(keys);
      const double plan_s = seconds_since(t0);
      auto chunks = store.load(metas, plan);
      const double load_s = seconds_since(t0);
      if (load_s < row.load_s) row.plan_s = plan_s;
      row.load_s = std::min(row.load_s, load_s);
      row.chunks = chunks.size();
      row.load_bytes = 0;
      for (const auto& c : chunks) row.load_bytes += c.bytes->size();
    }
    rows.push_back(std::move(row));
    return Status::ok();
  };
  std::fprintf(stderr, "… memory tier\n");
  {
    // The populated store's tier 0 is the memory tier; a fresh engine's pool is empty.
    Status st = measure("memory", **populated, [] {});
    if (!st) return fail(st);
  }
  std::string evict_method;
  std::fprintf(stderr, "… disk tier\n");
  {
    auto disk = cache::DiskTier::open({.dir = disk_dir, .capacity_bytes = all.disk_bytes});
    if (!disk) return fail(disk.status());
    std::vector<std::unique_ptr<cache::Tier>> tiers;
    tiers.push_back(std::move(*disk));
    cache::TieredStore store(std::move(tiers), store_options);
    Status st = measure("disk", store, [&] { evict_method = drop_page_cache(disk_dir); });
    if (!st) return fail(st);
  }
  // Redis tiers stay open until the limits are measured: the limit is a GET through the same client.
  std::vector<std::unique_ptr<cache::TieredStore>> redis_stores;
  std::vector<std::string> redis_store_names;
  auto measure_redis = [&](const std::string& name, const std::string& url) -> Status {
    std::fprintf(stderr, "… %s tier\n", name.c_str());
    auto ro = redis_options(url);
    if (!ro) return ro.status();
    auto tier = std::make_unique<cache::RedisTier>(*ro);
    auto connected = tier->client().connect_now();
    if (!connected) return connected.status();
    std::fprintf(stderr, "  %s\n", connected->c_str());
    cache::RedisClient* client = &tier->client();
    if (name == "redis-cluster") {
      // Not populated by the cold run: copy the chunks over from the memory tier.
      KVSTASH_RETURN_IF_ERROR(tier->clear());
      for (const auto& m : metas) {
        auto bytes = (*populated)->tier(0).get(m.key);
        if (!bytes) return bytes.status();
        KVSTASH_RETURN_IF_ERROR(tier->put(m.key, *bytes));
      }
    }
    std::vector<std::unique_ptr<cache::Tier>> tiers;
    tiers.push_back(std::move(tier));
    redis_stores.push_back(std::make_unique<cache::TieredStore>(std::move(tiers), store_options));
    redis_store_names.push_back(name);
    KVSTASH_RETURN_IF_ERROR(measure(name, *redis_stores.back(), [] {}));
    rows.back().client = client;
    return Status::ok();
  };
  if (!redis.empty()) {
    Status st = measure_redis("redis", redis_url);
    if (!st) return fail(st);
  }
  if (!redis_cluster_url.empty()) {
    Status st = measure_redis("redis-cluster", redis_cluster_url);
    if (!st) return fail(st);
  }
  std::fprintf(stderr, "… limits\n");
  const std::size_t bytes = rows.empty() ? 0 : rows[0].load_bytes;
  for (Row& r : rows) {
    if (r.tier == "memory") r.limit_bps = memcpy_bandwidth(bytes), r.note = "memcpy";
    if (r.tier == "disk") r.limit_bps = disk_read_bandwidth(disk_dir, bytes), r.note = "sequential read, " + evict_method;
    if (r.client) r.limit_bps = redis_get_bandwidth(*r.client, bytes), r.note = "one GET of one value, same client";
  }

  std::printf("model %s, prompt %d tokens, %d cached (%zu chunks of %d, %.1f MiB), %d prefilled on a hit\n",
              model.config().name.c_str(), prompt_tokens, cached / chunk_tokens * chunk_tokens, metas.size(),
              chunk_tokens, static_cast<double>(bytes) / (1 << 20), prompt_tokens - cached / chunk_tokens * chunk_tokens);
  std::printf("store: load_threads %d, load_depth %d, redis pool %d per node\n", load_threads, load_depth, redis_pool);
  if (cold) std::printf("cold TTFT %.3f s\n", cold->ttft_s);
  if (pool_hit) {
    std::printf("tail prefill: TTFT with the %d cached tokens already in the engine's pool (nothing loaded), best of %d: %.3f s, %d prefilled\n",
                pool_hit->cached_tokens, repeats, pool_hit->ttft_s, prompt_tokens - pool_hit->cached_tokens);
  }
  std::printf("\n| tier | TTFT (s) | TTFT / cold | cached tokens | chunks loaded | plan (ms) | plan + load (ms) | load GB/s | limit GB/s | load / limit | limit measured by |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double bw = r.load_s > 0 ? static_cast<double>(r.load_bytes) / r.load_s : 0;
    char ttft[32] = "-", ratio[32] = "-";
    if (cold) {
      std::snprintf(ttft, sizeof ttft, "%.3f", r.ttft_s);
      std::snprintf(ratio, sizeof ratio, "%.2f%%", 100 * r.ttft_s / cold->ttft_s);
    }
    std::printf("| %s | %s | %s | %d | %zu | %.2f | %.1f | %.2f | %.2f | %.0f%% | %s |\n", r.tier.c_str(), ttft, ratio, cold ? r.cached_tokens : 0, r.chunks, 1e3 * r.plan_s, 1e3 * r.load_s, bw / 1e9,
                r.limit_bps / 1e9, r.limit_bps > 0 ? 100 * bw / r.limit_bps : 0.0, r.note.c_str());
  }
  if (pool_hit) {
    // The physical limit of a hit: read the KV at the tier's measured rate, then prefill the tail.
    std::printf("\n| tier | TTFT (s) | KV bytes / limit (s) | + tail prefill (s) = bound (s) | TTFT / bound (target <= 1.5) |\n|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      if (r.limit_bps <= 0) continue;
      const double read_s = static_cast<double>(r.load_bytes) / r.limit_bps;
      const double bound = read_s + pool_hit->ttft_s;
      std::printf("| %s | %.3f | %.3f | %.3f | %.2f× |\n", r.tier.c_str(), r.ttft_s, read_s, bound, r.ttft_s / bound);
    }
  }
  if (stall_streams > 0) {
    std::printf("\n%d streams decoding while a request with %d cached tokens arrives and loads them\n",
                stall_streams, cached / chunk_tokens * chunk_tokens);
    std::printf("\"load\": from the arrival's submit until its KV is loaded; \"through first token\": until its tail is prefilled too\n");
    std::printf("| tier | ITL p99 before (ms) | load (ms) | ITL p99 during load (ms) | during load / before | ITL p99 through first token (ms) | through first token / before | ITL max (ms) | samples before / load / through | arrival TTFT (s) | cached tokens |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    auto stall_row = [&](const std::string& name, cache::TieredStore& store,
                         const std::vector<TokenId>* pool_prompt = nullptr) -> Status {
      std::fprintf(stderr, "… stall, %s\n", name.c_str());
      auto r = measure_stall(model, bench.engine_options, &store, hit_prompt, stall_streams, pool_prompt);
      if (!r) return r.status();
      const double before = r->itl_before_p99_s > 0 ? r->itl_before_p99_s : 1;
      char load_ratio[32] = "-";
      if (r->itl_load_n > 0) std::snprintf(load_ratio, sizeof load_ratio, "%.2f×", r->itl_load_p99_s / before);
      std::printf("| %s | %.1f | %.1f | %.1f | %s | %.1f | %.2f× | %.1f | %zu / %zu / %zu | %.3f | %d |\n", name.c_str(),
                  1e3 * r->itl_before_p99_s, 1e3 * r->load_s, 1e3 * r->itl_load_p99_s, load_ratio, 1e3 * r->itl_during_p99_s,
                  r->itl_during_p99_s / before, 1e3 * r->itl_during_max_s, r->itl_before_n, r->itl_load_n, r->itl_during_n,
                  r->arrival_ttft_s, r->arrival_cached_tokens);
      std::fflush(stdout);
      return Status::ok();
    };
    {
      // Control: the prefix already in the engine's pool, nothing loaded; only the tail's prefill.
      // The cold prompt shares the hit prompt's cached tokens, not its tail: the same tail prefill.
      Status st = stall_row("control: pool hit, nothing loaded", **populated, &prompt);
      if (!st) return fail(st);
    }
    for (std::size_t i = 0; i < redis_stores.size(); ++i) {
      Status st = stall_row(redis_store_names[i], *redis_stores[i]);
      if (!st) return fail(st);
    }
    auto disk = cache::DiskTier::open({.dir = disk_dir, .capacity_bytes = all.disk_bytes});
    if (!disk) return fail(disk.status());
    std::vector<std::unique_ptr<cache::Tier>> tiers;
    tiers.push_back(std::move(*disk));
    cache::TieredStore store(std::move(tiers), store_options);
    (void)drop_page_cache(disk_dir);
    Status st = stall_row("disk", store);
    if (!st) return fail(st);
  }
  return 0;
}

}  // namespace kvstash::cli
