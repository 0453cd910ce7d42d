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
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cache/chunk_key.h"
#include "cache/disk_tier.h"
#include "cache/memory_tier.h"
#include "cache/redis_tier.h"
#include "cache/store_options.h"
#include "cli/commands.h"
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

  // TTFT of one request on a fresh engine (empty pool) in front of `store`.
  Expected<GenerationResult> ttft(cache::TieredStore* store, const std::vector<TokenId>& prompt) {
    EngineOptions o = engine_options;
    o.kv_store = store;
    auto engine = Engine::create(model, o);
    if (!engine) return engine.status();
    kv_format = (*engine)->kv_format();
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 1;
    return generate(**engine, std::move(r));
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

// Bytes per second of GET of one value of `bytes` (best of 3), the redis tier's limit.
double redis_get_bandwidth(const std::vector<cache::RedisEndpoint>& seeds, std::size_t bytes) {
  cache::RedisOptions o;
  o.seeds = seeds;
  o.command_timeout = std::chrono::milliseconds(30000);
  cache::RedisClient client(o);
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
  int prompt_tokens = 4096, uncached_tokens = 64, chunk_tokens = 64, n_threads = 0, repeats = 3;
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("--prompt-tokens", prompt_tokens, "prompt length")->capture_default_str();
  app.add_option("--uncached-tokens", uncached_tokens, "trailing tokens not in the store")->capture_default_str();
  app.add_option("--chunk-tokens", chunk_tokens, "tokens per chunk (64 makes prompt - uncached whole chunks)")
      ->capture_default_str();
  app.add_option("--cache-disk", disk_dir, "disk tier directory (emptied first); default: a temp dir");
  app.add_option("--cache-redis", redis_url, "redis tier (flushed of kvstash chunks first); none = no redis row");
  app.add_option("-t,--threads", n_threads, "threads; 0 = all cores")->capture_default_str();
  app.add_option("--repeats", repeats, "best of this many hits and loads per tier")->capture_default_str();
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
  std::vector<cache::RedisEndpoint> redis;
  if (!redis_url.empty()) {
    auto parsed = cache::parse_redis_url(redis_url);
    if (!parsed) return fail(parsed.status());
    redis = *parsed;
  }
  if (disk_dir.empty()) disk_dir = (std::filesystem::temp_directory_path() / "kvstash-bench-cache").string();
  std::filesystem::remove_all(disk_dir);

  cache::tune_allocator_for_chunks();  // as serve does
  auto loaded = Model::load(model_path);
  if (!loaded) return fail(loaded.status());
  const Model& model = **loaded;
  Bench bench{model, {}};
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
  all.chunk_tokens = static_cast<std::uint32_t>(chunk_tokens);
  auto populated = cache::open_tiered_store(all);
  if (!populated) return fail(populated.status());
  if (!redis.empty()) (void)(*populated)->tier((*populated)->tier_count() - 1).clear();
  std::fprintf(stderr, "… cold prefill of %d tokens\n", prompt_tokens);
  auto cold = bench.ttft(populated->get(), prompt);
  if (!cold) return fail(cold.status());
  (*populated)->flush();
  const auto metas = chunk_metas(model, bench.kv_format, std::span<const TokenId>(hit_prompt.data(), static_cast<std::size_t>(cached / chunk_tokens * chunk_tokens)), chunk_tokens);

  struct Row {
    std::string tier;
    double ttft_s = 0;
    int cached_tokens = 0;
    double load_s = 0;
    std::uint64_t load_bytes = 0;
    double limit_bps = 0;
    std::string note;
  };
  std::vector<Row> rows;
  // Best of `repeats` for both figures: the machine is shared, and the best run is the one the
  // least disturbed by others.
  auto measure = [&](const std::string& name, cache::TieredStore& store, auto before_each) -> Status {
    Row row{name};
    row.ttft_s = row.load_s = 1e30;
    for (int r = 0; r < repeats; ++r) {
      before_each();
      auto hit = bench.ttft(&store, hit_prompt);
      if (!hit) return hit.status();
      row.ttft_s = std::min(row.ttft_s, hit->ttft_s);
      row.cached_tokens = hit->cached_tokens;
    }
    for (int r = 0; r < repeats; ++r) {
      // The store's load alone (get + verify + decode of every chunk), timed from outside.
      before_each();
      const auto t0 = Clock::now();
      auto chunks = store.load(metas);
      row.load_s = std::min(row.load_s, seconds_since(t0));
      row.load_bytes = 0;
      for (const auto& c : chunks) row.load_bytes += c.bytes.size();
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
    cache::TieredStore store(std::move(tiers));
    Status st = measure("disk", store, [&] { evict_method = drop_page_cache(disk_dir); });
    if (!st) return fail(st);
  }
  if (!redis.empty()) {
    std::fprintf(stderr, "… redis tier\n");
    cache::RedisTierOptions ro;
    ro.client.seeds = redis;
    std::vector<std::unique_ptr<cache::Tier>> tiers;
    tiers.push_back(std::make_unique<cache::RedisTier>(ro));
    cache::TieredStore store(std::move(tiers));
    Status st = measure("redis", store, [] {});
    if (!st) return fail(st);
  }
  std::fprintf(stderr, "… limits\n");
  const std::size_t bytes = rows.empty() ? 0 : rows[0].load_bytes;
  for (Row& r : rows) {
    if (r.tier == "memory") r.limit_bps = memcpy_bandwidth(bytes), r.note = "memcpy";
    if (r.tier == "disk") r.limit_bps = disk_read_bandwidth(disk_dir, bytes), r.note = "sequential read, " + evict_method;
    if (r.tier == "redis") r.limit_bps = redis_get_bandwidth(redis, bytes), r.note = "GET of one value";
  }

  std::printf("model %s, prompt %d tokens, %d cached (%zu chunks of %d, %.1f MiB), %d prefilled on a hit\n",
              model.config().name.c_str(), prompt_tokens, cached / chunk_tokens * chunk_tokens, metas.size(),
              chunk_tokens, static_cast<double>(bytes) / (1 << 20), prompt_tokens - cached / chunk_tokens * chunk_tokens);
  std::printf("cold TTFT %.3f s\n\n", cold->ttft_s);
  std::printf("| tier | TTFT (s) | TTFT / cold | cached tokens | load (ms) | load GB/s | limit GB/s | load / limit | limit measured by |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double bw = r.load_s > 0 ? static_cast<double>(r.load_bytes) / r.load_s : 0;
    std::printf("| %s | %.3f | %.2f%% | %d | %.1f | %.2f | %.2f | %.0f%% | %s |\n", r.tier.c_str(), r.ttft_s,
                100 * r.ttft_s / cold->ttft_s, r.cached_tokens, 1e3 * r.load_s, bw / 1e9, r.limit_bps / 1e9,
                r.limit_bps > 0 ? 100 * bw / r.limit_bps : 0.0, r.note.c_str());
  }
  return 0;
}

}  // namespace kvstash::cli
