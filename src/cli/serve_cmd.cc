// `kvstash serve`: loads a GGUF model (or generates the tiny demo model when no -m is given),
// opens the tiered KV store (memory → disk → redis, from the --cache-* flags), starts the engine
// and the OpenAI-compatible HTTP server, and serves until SIGINT/SIGTERM.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <limits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cmath>
#include <optional>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/kv_events.h"
#include "cache/store_options.h"
#include "cli/commands.h"
#include "cli/kv_budget_flags.h"
#include "cli/speculative_flags.h"
#include "cli/model_flags.h"
#include "cli/share_flags.h"
#include "engine/engine.h"
#include "kernels/simd_dispatch.h"
#include "model/model.h"
#include "modelgen/modelgen.h"
#include "server/backend.h"
#include "server/log.h"
#include "engine/embedder.h"
#include "server/response_cache.h"
#include "server/server.h"
#include "server/startup_phases.h"

namespace kvstash::cli {
namespace {

// The step budget's cost coefficients (engine/step_cost.h) are measured once per model, thread
// count and SIMD path and kept beside the prepared weights: a later start does not measure them
// again (most of a second of a cold start on two cores); the engine's online scales follow the
// machine's load from there. A file that does not read back is measured again, with a log line.
// v2: per_pair_s measured from a prefill chunk at context (step_cost.cc); v1 files are measured again.
constexpr const char* kStepCostMagic = "kvstash-step-cost-v2";

std::optional<StepCostParams> read_step_cost(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string magic;
  StepCostParams c;
  in >> magic >> c.base_s >> c.per_decode_row_s >> c.per_row_s >> c.per_pair_s >> c.per_block_install_s;
  // Every coefficient finite and not negative (a tiny model's may measure 0), one of the engine's
  // "given" four above 0 (all zero would make the engine measure anyway).
  const bool ok = in && magic == kStepCostMagic && c.base_s >= 0 && c.per_decode_row_s >= 0 && c.per_row_s >= 0 &&
                  c.per_pair_s >= 0 && c.per_block_install_s >= 0 &&
                  std::isfinite(c.base_s + c.per_decode_row_s + c.per_row_s + c.per_pair_s + c.per_block_install_s) &&
                  (c.base_s > 0 || c.per_decode_row_s > 0 || c.per_row_s > 0 || c.per_pair_s > 0);
  if (!ok) {
    server::log_line("serve: step cost file " + path + " does not read back (damaged or of another version): measuring again");
    return std::nullopt;
  }
  return c;
}

// Writes nothing for coefficients that are all zero (read_step_cost would not take them back).
void write_step_cost(const std::string& path, const StepCostParams& c) {
  if (!(c.base_s > 0 || c.per_decode_row_s > 0 || c.per_row_s > 0 || c.per_pair_s > 0)) return;
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);  // a first start's cache
  {
    std::ofstream out(tmp);
    out.precision(17);
    out << kStepCostMagic << ' ' << c.base_s << ' ' << c.per_decode_row_s << ' ' << c.per_row_s << ' ' << c.per_pair_s << ' '
        << c.per_block_install_s << '\n';
    if (!out) return;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

using server::log_line;

// A one-shot signal: set() once (later calls do nothing), wait() until then.
struct Settled {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void set() {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

// "cost model (how): 25.0 ms a step, ..." for the log.
std::string describe_step_cost(const StepCostParams& c, const std::string& how) {
  char figures[256];
  std::snprintf(figures, sizeof figures,
                "%.1f ms a step, %.2f ms a decode row, %.2f ms a prefill token, %.3f us an attention pair, %.1f us a KV "
                "block installed",
                c.base_s * 1e3, c.per_decode_row_s * 1e3, c.per_row_s * 1e3, c.per_pair_s * 1e6, c.per_block_install_s * 1e6);
  return "cost model (" + how + "): " + figures;
}

// Where the demo model is written when no -m is given: $XDG_CACHE_HOME/kvstash, else
// ~/.cache/kvstash, else the system temp directory.
std::filesystem::path demo_model_path() {
  std::filesystem::path dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    dir = std::filesystem::path(xdg) / "kvstash";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::filesystem::path(home) / ".cache" / "kvstash";
  } else {
    dir = std::filesystem::temp_directory_path() / "kvstash";
  }
  return dir / "demo-tiny-f16.gguf";
}

Expected<std::string> ensure_demo_model() {
  std::filesystem::path path = demo_model_path();
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    log_line("no -m given: serving the demo model " + path.string() + " (tiny preset, random weights)");
    return path.string();
  }
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return io_error("cannot create " + path.parent_path().string() + ": " + ec.message());
  modelgen::GenerateOptions options;
  options.preset = "tiny";
  options.type = gguf::TensorType::kF16;
  options.out_path = path.string();
  KVSTASH_RETURN_IF_ERROR(modelgen::generate_model(options));
  log_line("no -m given: generated the demo model " + path.string() +
           " (tiny preset, random weights; its output is gibberish)");
  return path.string();
}

// Where the node's key lives when --identity is not given: $XDG_STATE_HOME/kvstash, else
// ~/.local/state/kvstash, else the system temp directory.
std::filesystem::path default_identity_path() {
  std::filesystem::path dir;
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) {
    dir = std::filesystem::path(xdg) / "kvstash";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::filesystem::path(home) / ".local" / "state" / "kvstash";
  } else {
    dir = std::filesystem::temp_directory_path() / "kvstash";
  }
  return dir / "node.key";
}

// The node's ed25519 identity and the producers it trusts (itself, plus --trust-keys).
Status load_identity(const std::string& key_path, const std::string& trust_file, server::ServerOptions& o) {
  const std::string path = key_path.empty() ? default_identity_path().string() : key_path;
  Expected<identity::NodeIdentity> id = identity::NodeIdentity::load_or_create(path);
  if (!id) return Status(id.status().code(), "--identity: " + id.status().message());
  auto trust = std::make_shared<identity::TrustList>(id->public_key());
  if (!trust_file.empty()) {
    if (Status st = trust->add_file(trust_file); !st) return Status(st.code(), "--trust-keys: " + st.message());
  }
  log_line("identity: ed25519 " + id->public_key_hex() + " (" + path + "); trusts " +
           std::to_string(trust->size() - 1) + " other producer(s)" + (trust_file.empty() ? "" : " from " + trust_file));
  o.identity = std::make_shared<const identity::NodeIdentity>(std::move(*id));
  o.trust = std::move(trust);
  return Status::ok();
}

// The memory tier's size when --cache-ram is not given: a quarter of the machine's RAM, at most
// 4 GiB, so that a default server neither hogs a small machine nor starves a big one.
std::uint64_t default_cache_ram() {
  constexpr std::uint64_t kMax = std::uint64_t{4} << 30;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return kMax;
  return std::min(kMax, static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size) / 4);
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// The --cache-* flags as given on the command line, before parsing.
struct CacheFlags {
  std::string ram;        // empty = default_cache_ram()
  std::string disk_dir;
  std::string disk_size;  // empty = StoreOptions' default
  std::string redis;
  std::string redis_ttl;  // empty = no expiry
  int redis_pool = 8;
  int chunk_tokens = 256;
  bool disabled = false;  // --no-kv-store
  std::string pin_max_ttl = "1h";  // --pin-max-ttl
  double pin_max_share = 0.5;      // --pin-max-share
};

Expected<cache::StoreOptions> store_options_from(const CacheFlags& flags, int block_size) {
  cache::StoreOptions o;
  if (flags.chunk_tokens <= 0 || flags.chunk_tokens % block_size != 0) {
    return invalid_argument("--chunk-tokens " + std::to_string(flags.chunk_tokens) +
                            ": must be a positive multiple of the KV block size " + std::to_string(block_size));
  }
  o.chunk_tokens = static_cast<std::uint32_t>(flags.chunk_tokens);
  if (flags.ram.empty()) {
    o.ram_bytes = default_cache_ram();
  } else {
    auto ram = cache::parse_byte_size(flags.ram);
    if (!ram) return invalid_argument("--cache-ram: " + ram.status().message());
    o.ram_bytes = *ram;
  }
  o.disk_dir = flags.disk_dir;
  if (!flags.disk_size.empty()) {
    auto disk = cache::parse_byte_size(flags.disk_size);
    if (!disk) return invalid_argument("--cache-disk-size: " + disk.status().message());
    if (*disk == 0) return invalid_argument("--cache-disk-size must be > 0 (omit --cache-disk for no disk tier)");
    o.disk_bytes = *disk;
  }
  if (Status st = cache::apply_redis_flags(flags.redis, flags.redis_ttl, flags.redis_pool, o); !st) return st;
  auto pin_ttl = cache::parse_duration(flags.pin_max_ttl);
  if (!pin_ttl) return invalid_argument("--pin-max-ttl: " + pin_ttl.status().message());
  o.store.max_pin_ttl = *pin_ttl;
  o.pins.max_share = flags.pin_max_share;
  return o;
}

std::string describe_store(const cache::StoreOptions& o, bool ram_defaulted) {
  std::string out;
  auto add = [&](const std::string& tier) { out += (out.empty() ? "" : " -> ") + tier; };
  if (o.ram_bytes > 0) add("memory " + human_bytes(o.ram_bytes) + (ram_defaulted ? " (default: min(4 GiB, RAM/4))" : ""));
  if (!o.disk_dir.empty()) add("disk " + o.disk_dir + " " + human_bytes(o.disk_bytes));
  if (!o.redis.empty()) {
    std::string nodes;
    for (const auto& ep : o.redis) nodes += (nodes.empty() ? "" : ",") + ep.to_string();
    add("redis " + nodes);
  }
  if (out.empty()) out = "no tiers";
  return "kv store: " + out + ", chunks of " + std::to_string(o.chunk_tokens) + " tokens";
}

// The HTTP front's flags, as given.
struct HttpFlags {
  std::string api_key_file;
  double drain_seconds = 10;
  std::string log_format = "text";
  double header_timeout_s = 10, body_timeout_s = 60, idle_timeout_s = 60, write_timeout_s = 30;
  int header_limit_kib = 16;
  int stream_buffer_kib = 1024;
};

// One line of --api-key-file: KEY, NAME:KEY or NAME:KEY:NAMESPACE.
Expected<server::ApiKey> parse_api_key_line(const std::string& line) {
  server::ApiKey key;
  const std::size_t first = line.find(':');
  if (first == std::string::npos) {
    key.key = line;
  } else {
    key.name = line.substr(0, first);
    const std::size_t second = line.find(':', first + 1);
    key.key = line.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
    if (second != std::string::npos) {
      key.cache_namespace = line.substr(second + 1);
      if (key.cache_namespace.empty()) return invalid_argument("an empty NAMESPACE after NAME:KEY: (write '*' for the common one)");
      if (key.cache_namespace.find(':') != std::string::npos) return invalid_argument("NAMESPACE must not hold ':'");
    }
    if (key.name.empty()) return invalid_argument("an empty NAME before ':' (the forms: KEY, NAME:KEY, NAME:KEY:NAMESPACE)");
  }
  if (key.key.empty()) return invalid_argument("an empty KEY");
  for (char c : line) {
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f) return invalid_argument("keys, names and namespaces are printable, without spaces");
  }
  return key;
}

void add_http_flags(CLI::App& app, server::ServerOptions& o, HttpFlags& f) {
  app.add_option("--http-threads", o.http_threads, "I/O threads of the HTTP front (all connections)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--request-workers", o.request_workers,
                 "Threads that parse, render and tokenize request bodies (never the HTTP I/O threads)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-connections", o.http.max_connections, "Open connections at most; beyond: 503")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-connections-per-client", o.http.max_connections_per_client,
                 "Open connections per client address at most (0 = no bound); beyond: 503")
      ->capture_default_str();
  app.add_option("--header-limit-kib", f.header_limit_kib, "Request line + headers, KiB; beyond: 431")->capture_default_str();
  app.add_option("--header-timeout", f.header_timeout_s, "Seconds to receive a request's header; else 408")->capture_default_str();
  app.add_option("--body-timeout", f.body_timeout_s, "Seconds to receive a request's body; else 408")->capture_default_str();
  app.add_option("--idle-timeout", f.idle_timeout_s, "Seconds a keep-alive connection may idle")->capture_default_str();
  app.add_option("--write-timeout", f.write_timeout_s, "Seconds one write may take (a stalled reader is cut)")->capture_default_str();
  app.add_option("--stream-buffer-kib", f.stream_buffer_kib,
                 "Unsent bytes of one stream, KiB; beyond: the request is cancelled")->capture_default_str();
  app.add_option("--api-key", o.api_keys,
                 "Require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every endpoint but /health, /ready (and /metrics with "
                 "--public-metrics); each key is its own cache namespace: no key sees another's cached KV or answers "
                 "(repeatable)");
  app.add_option("--api-key-file", f.api_key_file,
                 "A file of API keys, one a line ('#' comments): KEY (its own cache namespace), NAME:KEY (named in "
                 "logs, its own namespace) or NAME:KEY:NAMESPACE (keys naming the same NAMESPACE share cached KV and "
                 "answers; '*' = the node's common namespace, shared with peers). KEY must not hold ':' in the NAME: "
                 "forms");
  app.add_flag("--public-metrics", o.public_metrics, "Serve /metrics without the API key (default: it needs one)");
  app.add_flag("--parse-special-in-content", o.parse_special_in_content,
               "Let special-token text in chat message content (\"<|im_end|>\") become control tokens, for trusted "
               "clients that send raw special tokens (default: content is plain text; only the chat template's markup "
               "is control tokens)");
  app.add_option("--cors-origin", o.cors_origin, "Allow browser calls from this origin (\"*\" = any), with preflight");
  app.add_option("--request-timeout", o.request_timeout_s, "Seconds a generation may run; then it ends with \"abort\" (0 = none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--drain-seconds", f.drain_seconds, "On SIGTERM: seconds in-flight requests get to finish")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-format", f.log_format, "Request log lines: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

Status apply_http_flags(const HttpFlags& f, server::ServerOptions& o) {
  if (f.header_timeout_s <= 0 || f.body_timeout_s <= 0 || f.idle_timeout_s <= 0 || f.write_timeout_s <= 0 ||
      f.drain_seconds < 0 || f.header_limit_kib < 1 || f.stream_buffer_kib < 1 || o.http_threads < 1 ||
      o.http.max_connections < 1 || o.http.max_connections_per_client < 0 || o.request_timeout_s < 0) {
    return invalid_argument("HTTP limits and timeouts must be positive (--max-connections-per-client >= 0)");
  }
  o.http.header_timeout = millis(f.header_timeout_s);
  o.http.body_timeout = millis(f.body_timeout_s);
  o.http.idle_timeout = millis(f.idle_timeout_s);
  o.http.write_timeout = millis(f.write_timeout_s);
  o.http.header_limit = static_cast<std::size_t>(f.header_limit_kib) << 10;
  o.http.stream_buffer_limit = static_cast<std::size_t>(f.stream_buffer_kib) << 10;
  o.log_json = f.log_format == "json";
  if (!f.api_key_file.empty()) {
    std::ifstream in(f.api_key_file);
    if (!in) return invalid_argument("--api-key-file: cannot read " + f.api_key_file);
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.empty() || line[0] == '#') continue;
      Expected<server::ApiKey> key = parse_api_key_line(line);
      if (!key) {
        return invalid_argument("--api-key-file " + f.api_key_file + " line " + std::to_string(line_no) + ": " +
                                key.status().message());
      }
      o.named_api_keys.push_back(std::move(*key));
    }
    if (o.named_api_keys.empty()) return invalid_argument("--api-key-file: no keys in " + f.api_key_file);
  }
  return Status::ok();
}

// The engine settings that change answers without being part of the request, for the keys.
std::string answer_config(const EngineOptions& e) {
  const KvBudgetOptions& b = e.kv_budget;
  return "kv_budget=" + std::to_string(b.budget) + ",compact_every=" + std::to_string(b.compact_every) +
         ",sinks=" + std::to_string(b.sinks) + ",recent=" + std::to_string(b.recent) +
         ",policy=" + std::to_string(static_cast<int>(b.policy)) + ",seed=" + std::to_string(b.seed);
}

// --response-cache SIZE: a record store of its own (memory SIZE → disk DIR/responses SIZE → the
// KV store's redis under its own key prefix and TTL) behind the server's response cache.
// With --semantic-cache THRESHOLD the cache also answers near-duplicates (server/semantic_cache.h),
// embedding request texts with an Embedder of its own.
Status open_response_cache(const std::string& size_text, const std::string& ttl_text, const cache::StoreOptions& kv,
                           const EngineOptions& engine, const Model& model, float semantic_threshold,
                           server::ServerOptions& o, share::ShareNode* share_node) {
  const std::array<std::uint8_t, 32>& fingerprint = model.fingerprint();
  auto size = cache::parse_byte_size(size_text);
  if (!size) return invalid_argument("--response-cache: " + size.status().message());
  if (*size == 0) return invalid_argument("--response-cache must be > 0 (omit it for no response cache)");
  server::ResponseCacheOptions options;
  if (!ttl_text.empty()) {
    auto ttl = cache::parse_duration(ttl_text);
    if (!ttl) return invalid_argument("--response-cache-ttl: " + ttl.status().message());
    options.ttl = *ttl;
  }
  options.engine_config = answer_config(engine);
  // Each local miss may wait on a bounded DHT lookup (--dht-port): more workers keep misses flowing.
  if (share_node) options.lookup_threads = 8;
  if (share_node) options.peer_timeout = share_node->options().fetch.timeout;  // peers: never waited on longer
  if (semantic_threshold > 0.0f) {
    options.semantic.threshold = semantic_threshold;
    auto embedder = std::make_shared<Embedder>(model);
    options.embed = [embedder](std::span<const TokenId> tokens) { return embedder->embed(tokens); };
  }
  cache::StoreOptions records = kv;
  records.ram_bytes = *size;
  records.disk_bytes = *size;
  if (!kv.disk_dir.empty()) records.disk_dir = kv.disk_dir + "/responses";
  records.redis_key_prefix = std::string(cache::kRedisResponseKeyPrefix);
  records.redis_ttl = options.ttl;
  // With peer sharing, other nodes' records are the slowest tier (share/response_peers_tier.h).
  Expected<std::unique_ptr<cache::TieredStore>> store =
      cache::open_tiered_store(records, share_node ? share_node->make_response_peers_tier() : nullptr);
  if (!store) return Status(store.status().code(), "response cache: " + store.status().message());
  if (share_node) share_node->attach_response_store(store->get());
  o.response_cache = std::make_shared<server::ResponseCache>(std::move(*store), fingerprint, options, o.identity, o.trust);
  std::string tiers = "memory " + human_bytes(records.ram_bytes);
  if (!records.disk_dir.empty()) tiers += " -> disk " + records.disk_dir;
  if (!records.redis.empty()) tiers += " -> redis (" + std::string(cache::kRedisResponseKeyPrefix) + "*)";
  if (share_node) tiers += " -> peers";
  log_line("response cache: " + tiers + ", TTL " +
           (options.ttl.count() > 0 ? std::to_string(options.ttl.count()) + " s" : std::string("none")) +
           "; records signed by this node's key");
  return Status::ok();
}

// Refuses, before anything is allocated, a KV pool larger than the machine's memory (--ctx
// 100000000 would otherwise end in std::bad_alloc), naming what it would need. The pool's size is
// the engine's: max(--kv-pool-tokens or parallel * ctx / 2, ctx + one block) tokens of 16-bit K and
// V for every layer and KV head.
Status check_kv_pool_fits(const Model& model, const EngineOptions& e) {
  const ModelConfig& c = model.config();
  std::int64_t pool_tokens = e.kv_pool_tokens > 0 ? e.kv_pool_tokens : std::int64_t{e.max_running} * e.n_ctx / 2;
  pool_tokens = std::max<std::int64_t>(pool_tokens, std::int64_t{e.n_ctx} + e.block_size);
  const double bytes_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * sizeof(std::uint16_t);
  const double need = bytes_per_token * static_cast<double>(pool_tokens);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return Status::ok();  // unknown: the allocator decides
  const double have = static_cast<double>(pages) * static_cast<double>(page);
  if (need <= have) return Status::ok();
  char text[512];
  std::snprintf(text, sizeof(text),
                "--ctx %d with --parallel %d needs a KV pool of %lld tokens x %.0f bytes = %.1f GiB, more than this "
                "machine's %.1f GiB of memory; lower --ctx, --parallel or --kv-pool-tokens",
                e.n_ctx, e.max_running, static_cast<long long>(pool_tokens), bytes_per_token, need / (1u << 30),
                have / (1u << 30));
  return Status(StatusCode::kResourceExhausted, text);
}

// Thousands of connections need thousands of descriptors: raise the soft limit to the hard one.
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int serve_main(int argc, char** argv) {
  CLI::App app("OpenAI-compatible server: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics",
               "kvstash serve");
  std::string model_path;
  server::ServerOptions server_options;
  EngineOptions engine_options;
  int max_body_mib = static_cast<int>(server_options.max_body_bytes >> 20);
  app.add_option("-m,--model", model_path, "GGUF model file; without it a tiny demo model is generated");
  app.add_option("--host", server_options.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", server_options.port, "Port (0 = any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--ctx", engine_options.n_ctx,
                 "Context length: prompt + generated tokens (refused at start when its KV pool exceeds the memory)")
      ->check(CLI::Range(16, std::numeric_limits<int>::max()))
      ->capture_default_str();
  app.add_option("--parallel", engine_options.max_running, "Sequences decoded together at most")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  std::string responses_ttl = "1h";
  app.add_option("--responses-ttl", responses_ttl,
                 "How long POST /v1/responses keeps a stored response for previous_response_id (its prompt's KV pinned as long, up to --pin-max-ttl)")
      ->capture_default_str();
  app.add_option("--responses-max", server_options.responses_max, "Stored responses at most (the oldest dropped past it)")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  app.add_option("--max-n", server_options.max_n,
                 "Choices per request (OpenAI's n) at most; the running batch (--parallel) bounds it too")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  int queue = engine_options.max_queued;
  app.add_option("--queue", queue, "Requests waiting beyond the running batch (0 = none: a full batch answers 429)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--threads", engine_options.n_threads, "Compute threads (0 = all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  engine_options.itl_slo_ms = -1;  // the step budget is on by default here (docs/step-budget.md)
  app.add_option("--itl-slo-ms", engine_options.itl_slo_ms,
                 "Step-time budget while sequences decode, ms: a prefill beside them is chunked to keep each step "
                 "within it (its TTFT grows as it tightens); 0 = none, throughput first (default: 2x the step's "
                 "decode part as the engine measures it)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--min-prefill-tokens", engine_options.min_prefill_tokens,
                 "Under the step budget, prompt tokens the oldest prefill gets per step even past it (more: a shorter "
                 "TTFT beside streams where a token of prefill costs a large part of a decode step, at their gaps)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  std::string step_log_path;
  app.add_option("--step-log", step_log_path,
                 "Append one JSON line per forward step to FILE (decode rows, prefill tokens, KV installs, the "
                 "step budget, predicted and measured seconds): to see where steps pass their budget");
  app.add_option("--chat-template", server_options.chat_template,
                 "Use a built-in chat template (chatml, llama3) or this Jinja template's text instead of the model's");
  std::string chat_template_file;
  app.add_option("--chat-template-file", chat_template_file, "Use the Jinja chat template in FILE.jinja instead of the model's")
      ->check(CLI::ExistingFile)
      ->excludes("--chat-template");
  std::vector<std::string> aliases;
  app.add_option("--alias", aliases,
                 "Model name in the API (default: the model's name); more --alias: other names a request may use");
  app.add_option("--max-body-mib", max_body_mib, "Largest request body by any framing, MiB")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  HttpFlags http_flags;
  add_http_flags(app, server_options, http_flags);
  app.add_flag("--no-prefix-cache", [&](std::int64_t) { engine_options.prefix_cache = false; },
               "Do not reuse KV across requests");
  add_kv_budget_flags(app, engine_options.kv_budget);
  std::string model_draft;
  add_speculative_flags(app, engine_options.speculative, model_draft);
  app.add_option("--kv-load-timeout-ms", [&](CLI::results_t r) {
        // A number >= 0; anything else is a parse error (false), never an exception out of stoll.
        std::int64_t ms = 0;
        if (r.size() != 1 || !CLI::detail::lexical_cast(r[0], ms) || ms < 0) return false;
        engine_options.store_load_timeout = std::chrono::milliseconds(ms);
        return true;
      }, "a request whose KV is loading from the store waits this long at most, then recomputes (default 2000)");
  app.add_option("--kv-prefetch-mib", [&](CLI::results_t r) {
        std::int64_t mib = 0;
        if (r.size() != 1 || !CLI::detail::lexical_cast(r[0], mib) || mib < 0 || mib > (std::int64_t{1} << 30)) return false;
        engine_options.max_prefetched_bytes = static_cast<std::size_t>(mib) << 20;
        return true;
      }, "KV loaded from the store for requests not yet admitted, at most, MiB; a load beyond it is recomputed (default 1024)");
  int sgemm_prefill_min_tokens = 0;
  app.add_option("--sgemm-prefill-min-tokens", sgemm_prefill_min_tokens,
                 "Compute steps of at least N tokens with OpenBLAS sgemm: faster prefill of bf16/f32 weights (and of "
                 "f16 without AVX-512) on some CPUs, but a token's result then depends on its batch, so a cache hit "
                 "or a busy server can change greedy output in the last bits (0 = never: every token computes the "
                 "same whatever the batch)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--kv-pool-tokens", engine_options.kv_pool_tokens,
                 "Engine KV pool capacity, tokens (0 = parallel * ctx / 2)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  std::string identity_path, trust_keys_file;
  app.add_option("--identity", identity_path,
                 "The node's ed25519 key file, created at first start (default: " + default_identity_path().string() + ")");
  app.add_option("--trust-keys", trust_keys_file,
                 "Producers whose signed records this node accepts: a file of hex public keys, one a line (itself is always trusted)");
  CacheFlags cache_flags;
  app.add_option("--cache-ram", cache_flags.ram, "Memory tier of the KV store, e.g. 4GiB; 0 = none (default: min(4 GiB, RAM/4))");
  app.add_option("--cache-disk", cache_flags.disk_dir, "Directory of the disk tier (survives restarts)");
  app.add_option("--cache-disk-size", cache_flags.disk_size, "Bound of the disk tier (default 50GiB)");
  app.add_option("--cache-redis", cache_flags.redis,
                 "Redis tier: redis://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...] (a server or a cluster)");
  app.add_option("--cache-redis-ttl", cache_flags.redis_ttl, "Expiry of chunks stored in redis: 3600, 30m, 12h, 7d (default: none)");
  app.add_option("--cache-redis-pool", cache_flags.redis_pool, "Connections per redis node")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--chunk-tokens", cache_flags.chunk_tokens, "Tokens per stored KV chunk (a multiple of 16)")
      ->capture_default_str();
  app.add_flag("--no-kv-store", cache_flags.disabled, "No tiered KV store (only the engine's pool)");
  app.add_option("--pin-max-ttl", cache_flags.pin_max_ttl,
                 "Longest a client may pin a prompt's KV (prompt caching: cache_control, prompt_cache_retention): 300, 30m, 1h, 24h; 0 = no pins")
      ->capture_default_str();
  app.add_option("--pin-max-share", cache_flags.pin_max_share,
                 "Share of each memory and disk tier, and of the engine's KV pool, that pinned KV may hold at most (pins past it are refused)")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  cache::KvEventLogOptions kv_event_options;
  bool no_kv_events = false;
  app.add_option("--kv-events-retained", kv_event_options.retained,
                 "KV events kept for routers that resume (GET /v1/kv/events?since=N); older: a gap, then a snapshot")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-kv-events", no_kv_events, "Do not serve /v1/kv/info and /v1/kv/events (for cache-aware routers)");
  std::string role = "colocated";
  app.add_option("--role", role,
                 "This node's role for prefill/decode disaggregation, reported in /v1/kv/info to `kvstash route`: "
                 "colocated (answers requests), prefill (the router sends it only the prefill of long prompts; needs "
                 "a store shared with the decode workers: --cache-redis or peers) or decode (answers, never prefills "
                 "for others) (docs/router.md)")
      ->check(CLI::IsMember({"colocated", "prefill", "decode"}))
      ->capture_default_str();
  ShareFlags share_flags;
  add_share_flags(app, share_flags);
  std::string response_cache_size, response_cache_ttl;
  app.add_option("--response-cache", response_cache_size,
                 "Answer repeated deterministic requests (temperature 0 or a seed) from signed records: the bound of "
                 "their memory tier, e.g. 256MiB, also of their disk tier (DIR/responses of --cache-disk); they go "
                 "to --cache-redis too (default: off)");
  float semantic_threshold = 0.0f;
  app.add_option("--semantic-cache", semantic_threshold,
                 "With --response-cache: also answer a near-duplicate request (cosine of the embeddings of its last user "
                 "message >= THRESHOLD, e.g. 0.95) from the cached answer, only under the same model, salt, context and "
                 "sampling parameters, never with a seed or logprobs, never when numbers or quoted strings differ "
                 "(docs/semantic-cache.md; default: off)")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--response-cache-ttl", response_cache_ttl,
                 "Age after which a response record is a miss: 3600, 30m, 12h, 7d; also its redis expiry (default: none)");
  ModelLoadOptions model_load;
  add_model_load_flags(app, model_load);
  bool prepare_before_serving = false;
  app.add_flag("--prepare-before-serving", prepare_before_serving,
               "when this start prepares the weights (a first start, no usable prepared file), copy every matrix into "
               "huge pages before listening; by default the ones that keep their file layout are copied while the "
               "server already answers from the file mapping (the same bits; decode at the mapping's speed until the "
               "swap: docs/startup.md)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (engine_options.n_ctx < 16 || engine_options.max_running < 1 || max_body_mib < 1) {
    std::fprintf(stderr, "serve: --ctx must be >= 16, --parallel >= 1, --max-body-mib >= 1\n");
    return 1;
  }
  if (queue < 0) {
    std::fprintf(stderr, "serve: --queue must be >= 0\n");
    return 1;
  }
  // The role is only what /v1/kv/info tells a router: without that endpoint, or (a prefill node)
  // without a store to write the prefilled KV to, it could only be ignored.
  if (role != "colocated" && no_kv_events) {
    std::fprintf(stderr, "serve: --role %s is reported in /v1/kv/info, which --no-kv-events turns off\n", role.c_str());
    return 1;
  }
  if (role == "prefill" && cache_flags.disabled) {
    std::fprintf(stderr, "serve: --role prefill writes the prompts' KV to the KV store, which --no-kv-store turns off\n");
    return 1;
  }
  if (role == "prefill" && cache_flags.redis.empty() && share_flags.dht_port < 0) {
    log_line("serve: warning: --role prefill without --cache-redis or peer sharing (--dht-port): decode workers cannot "
             "load the KV this node prefills, so its prefill hops only cost time");
  }
  server_options.kv_info.role = role;
  // The server admits --parallel + --queue requests at once (ServerOptions::max_active_requests);
  // the engine's own queue bound (which counts requests not yet in the batch) is set so that it
  // never refuses one the server admitted.
  server_options.max_active_requests = engine_options.max_running + queue;
  engine_options.max_queued = engine_options.max_running + queue;
  if (engine_options.kv_pool_tokens < 0) {
    std::fprintf(stderr, "serve: --kv-pool-tokens must be >= 0\n");
    return 1;
  }
  Expected<cache::StoreOptions> store_options = store_options_from(cache_flags, engine_options.block_size);
  if (!store_options) {
    std::fprintf(stderr, "serve: %s\n", store_options.status().message().c_str());
    return 1;
  }
  if (auto ttl = cache::parse_duration(responses_ttl); ttl && ttl->count() > 0) {
    server_options.responses_ttl = *ttl;
  } else {
    std::fprintf(stderr, "serve: --responses-ttl %s: a duration such as 3600, 30m, 1h, 7d (more than 0)\n", responses_ttl.c_str());
    return 1;
  }
  if (!chat_template_file.empty()) {
    std::ifstream in(chat_template_file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || (text.str().find("{{") == std::string::npos && text.str().find("{%") == std::string::npos)) {
      std::fprintf(stderr, "serve: %s: cannot read a Jinja chat template\n", chat_template_file.c_str());
      return 1;
    }
    server_options.chat_template = text.str();  // a template's text is an override as a name is
  }
  server_options.max_body_bytes = static_cast<std::size_t>(max_body_mib) << 20;
  if (!aliases.empty()) {
    server_options.model_id = aliases.front();
    server_options.aliases.assign(aliases.begin() + 1, aliases.end());
  }
  if (Status st = apply_http_flags(http_flags, server_options); !st.is_ok()) {
    std::fprintf(stderr, "serve: %s\n", st.message().c_str());
    return 1;
  }
  raise_descriptor_limit();
  kernels::set_sgemm_prefill_min_tokens(sgemm_prefill_min_tokens);
  if (Status st = load_identity(identity_path, trust_keys_file, server_options); !st) {
    log_line("serve: " + st.to_string());
    return 1;
  }
  // Peer sharing (--dht-port): its DHT node starts now; its peers tier joins the store below. It
  // outlives the store (declared first): the store's last queued writes still announce.
  std::shared_ptr<share::ShareNode> share_node;
  {
    auto share_options = share_options_from(share_flags);
    if (!share_options) {
      log_line("serve: " + share_options.status().message());
      return 1;
    }
    if (*share_options && cache_flags.disabled) {
      log_line("serve: peer sharing (--dht-port) needs the KV store (drop --no-kv-store)");
      return 1;
    }
    if (*share_options) {
      // Bans survive restarts, next to the identity key (the node's state).
      (*share_options)->ban_file = (identity_path.empty() ? default_identity_path().string() : identity_path) + ".banned";
      auto started = share::ShareNode::start(**share_options, server_options.identity, server_options.trust);
      if (!started) {
        log_line("serve: peer sharing: " + started.status().to_string());
        return 1;
      }
      share_node = std::move(*started);
    }
  }

  if (model_path.empty()) {
    Expected<std::string> demo = ensure_demo_model();
    if (!demo) {
      log_line("serve: cannot generate the demo model: " + demo.status().to_string());
      return 1;
    }
    model_path = *demo;
  }
  // The prepared-weights file of a first start is written after the server listens (below), and
  // the weights that keep their file layout are copied into huge pages while it serves from the
  // file mapping: the same bits, swapped in between two steps (model.h).
  model_load.defer_weights_cache_write = true;
  model_load.prepare_in_background = !prepare_before_serving;
  auto startup = std::make_shared<server::StartupPhases>();
  Expected<std::unique_ptr<Model>> model = Model::load(model_path, model_load);
  if (!model) {
    log_line("serve: " + model.status().to_string());
    return 1;
  }
  {
    const ModelLoadReport& r = (*model)->load_report();
    startup->record("map", r.map_seconds);
    startup->record("fingerprint", r.fingerprint_seconds);
    startup->record("prepare", r.prepare_seconds);
    // Set before the engine exists: its deferred calibration waits for the write (below).
    if (r.cache_write_due) startup->set_weights_cache_writing(true);
    if (model_load.weights == WeightMemory::kHugePages) log_line("serve: weights cache: " + r.weights_cache);
    if (r.fingerprint_beside_copy) {
      char hashed[32];
      std::snprintf(hashed, sizeof hashed, "%.3f s", r.hashed_seconds);
      log_line(std::string("serve: fingerprint: first start of this file, hashed in ") + hashed +
               " beside the copy of the weights (remembered for later starts)");
    }
  }
  log_line("serve: " + (*model)->weight_memory_summary());
  // The background copy's end, in the log and /metrics. Joined before the model goes (declared
  // after it); the copy ends by itself.
  std::jthread weights_swap_watch;
  if (!(*model)->weights_prepared()) {
    startup->set_weights_preparing(true);
    weights_swap_watch = std::jthread([&m = **model, startup] {
      char line[160];
      std::snprintf(line, sizeof line, "serve: weights: copied into huge-page memory in %.3f s in the background, swapped in",
                    m.wait_weights_prepared());
      startup->set_weights_preparing(false);
      log_line(line);
    });
  }
  std::unique_ptr<Model> draft_model;  // outlives the engine (declared before it)
  engine_options.pool_pin_max_share = cache_flags.pin_max_share;
  if (Status st = load_draft_model(model_draft, model_load, engine_options.speculative, draft_model); !st) {
    log_line("serve: " + st.to_string());
    return 1;
  }
  if (draft_model) log_line("serve: draft model " + model_draft + ": " + draft_model->weight_memory_summary());
  auto phase_start = std::chrono::steady_clock::now();
  auto end_phase = [&](const char* name) {
    const auto now = std::chrono::steady_clock::now();
    startup->record(name, std::chrono::duration<double>(now - phase_start).count());
    phase_start = now;
  };
  // The event log outlives the store and the engine that publish to it (declared before both).
  std::unique_ptr<cache::KvEventLog> kv_events;
  if (!no_kv_events) kv_events = std::make_unique<cache::KvEventLog>(kv_event_options);
  // The store outlives the engine (declared first, destroyed last); its destructor finishes the
  // queued writes.
  std::unique_ptr<cache::TieredStore> store;
  // Sharing stops before the store goes, on every return path (its re-announcer reads the tiers).
  struct StopSharing {
    std::shared_ptr<share::ShareNode>& node;
    ~StopSharing() {
      if (node) node->stop();
    }
  } stop_sharing{share_node};
  if (!cache_flags.disabled) {
    Expected<std::unique_ptr<cache::TieredStore>> opened =
        cache::open_tiered_store(*store_options, share_node ? share_node->make_peers_tier() : nullptr);
    if (!opened) {
      log_line("serve: kv store: " + opened.status().to_string());
      return 1;
    }
    store = std::move(*opened);
    end_phase("store index");
    cache::tune_allocator_for_chunks();
    engine_options.kv_store = store.get();
    engine_options.chunk_tokens = static_cast<int>(store_options->chunk_tokens);
    log_line(describe_store(*store_options, cache_flags.ram.empty()) + (share_node ? " -> peers" : ""));
    if (kv_events) {
      cache::attach_tier_events(*store, *kv_events);
      server_options.kv_info.chunk_tokens = engine_options.chunk_tokens;
      for (std::size_t i = 0; i < store->tier_count(); ++i) {
        if (cache::kv_source_from_name(store->tier(i).name())) server_options.kv_info.tiers.push_back(store->tier(i).name());
      }
    }
    if (share_node) {
      share_node->attach_store(store.get());
      // A chunk derived from a banned producer is a miss wherever a load meets it (redis included).
      store->set_chunk_filter([node = share_node.get()](const cache::ChunkHeader& h) { return node->chunk_acceptable(h); });
      server_options.share_handler = share_node;
      server_options.extra_metrics = [node = share_node.get(), startup] {
        return startup->render_metrics() + node->render_metrics();
      };
    }
  } else {
    log_line("kv store: off (--no-kv-store)");
  }
  engine_options.kv_events = kv_events.get();
  if (!response_cache_size.empty()) {
    if (Status st = open_response_cache(response_cache_size, response_cache_ttl, *store_options, engine_options,
                                        **model, semantic_threshold, server_options, share_node.get());
        !st) {
      log_line("serve: " + st.to_string());
      return 1;
    }
  } else if (!response_cache_ttl.empty() || semantic_threshold > 0.0f) {
    log_line(std::string("serve: ") + (semantic_threshold > 0.0f ? "--semantic-cache" : "--response-cache-ttl") +
             " needs --response-cache SIZE");
    return 1;
  }
  // A ban reaches the engine's prefix cache through this holder, emptied before the engine goes
  // (a ban may come from the store's peers writer while the engine shuts down).
  struct BanSink {
    std::mutex mu;
    Engine* engine = nullptr;
  };
  auto ban_sink = std::make_shared<BanSink>();
  if (share_node) {
    share_node->on_ban([ban_sink](const identity::PublicKey& producer) {
      std::lock_guard lock(ban_sink->mu);
      if (ban_sink->engine) ban_sink->engine->forget_producer(producer);
    });
  }
  if (Status st = check_kv_pool_fits(**model, engine_options); !st) {
    log_line("serve: " + st.message());
    return 1;
  }
  std::shared_ptr<std::FILE> step_log;
  if (!step_log_path.empty()) {
    step_log.reset(std::fopen(step_log_path.c_str(), "a"), [](std::FILE* f) {
      if (f) std::fclose(f);
    });
    if (!step_log) {
      log_line("serve: --step-log: cannot open " + step_log_path + " for appending");
      return 1;
    }
    // The engine's thread calls this once a step, after the step's tokens went out: a buffered line.
    engine_options.on_step_record = [step_log](const StepRecord& r) {
      std::fprintf(step_log.get(),
                   "{\"step\":%lld,\"decode_rows\":%d,\"prefill_tokens\":%d,\"installed_blocks\":%d,"
                   "\"budget_s\":%.6f,\"predicted_s\":%.6f,\"measured_s\":%.6f,\"install_s\":%.6f,\"forced_progress\":%s,"
                   "\"prefill_cut\":%s}\n",
                   static_cast<long long>(r.step), r.decode_rows, r.prefill_tokens, r.installed_blocks, r.budget_s,
                   r.predicted_s, r.measured_s, r.install_s, r.forced_progress ? "true" : "false", r.prefill_cut ? "true" : "false");
      if (r.decode_rows == 0) std::fflush(step_log.get());  // idle-ish moments: keep the file current
    };
  }
  // The engine calls this once it has settled: idle for a moment after start-up, or busy for a
  // while (EngineOptions::on_settled).
  auto engine_settled = std::make_shared<Settled>();
  engine_options.on_settled = [engine_settled] { engine_settled->set(); };
  std::string step_cost_file;
  bool step_cost_read = false;
  if (engine_options.itl_slo_ms != 0 && !model_load.weights_cache_dir.empty()) {
    step_cost_file = (std::filesystem::path(model_load.weights_cache_dir) /
                      ((*model)->fingerprint_hex() + "-t" + std::to_string(engine_options.n_threads) + "-" +
                       kernels::simd_path() + ".stepcost"))
                         .string();
    if (std::optional<StepCostParams> c = read_step_cost(step_cost_file)) {
      engine_options.step_cost = *c;
      step_cost_read = true;
    }
  }
  if (engine_options.itl_slo_ms != 0 && !step_cost_read) {
    // Measured by the engine in its first idle second, not here: a first start's second of
    // calibration forwards would come before the first answer (issue 37). Not while the prepared
    // weights are written (their copy would slow the timed forwards).
    engine_options.calibrate_when_idle = true;
    engine_options.calibration_may_start = [startup] {
      return !startup->weights_cache_writing() && !startup->weights_preparing();
    };
    engine_options.on_step_cost_measured = [step_cost_file, startup](const Expected<StepCostParams>& c) {
      startup->set_step_cost_pending(false);
      if (!c) {
        log_line("step budget: the cost model could not be measured (" + c.status().to_string() + "): no step budget");
        return;
      }
      if (!step_cost_file.empty()) write_step_cost(step_cost_file, *c);
      log_line("step budget: " + describe_step_cost(*c, step_cost_file.empty() ? "measured when idle"
                                                                             : "measured when idle, saved to " + step_cost_file));
    };
    startup->set_step_cost_pending(true);
  }
  Expected<std::unique_ptr<Engine>> engine = [&]() -> Expected<std::unique_ptr<Engine>> {
    try {
      return Engine::create(**model, engine_options);
    } catch (const std::bad_alloc&) {  // the check above is an estimate: the last word is the allocator's
      return Status(StatusCode::kResourceExhausted,
                    "cannot allocate the engine's KV pool and buffers for --ctx " + std::to_string(engine_options.n_ctx) +
                        " x --parallel " + std::to_string(engine_options.max_running) + "; lower them or --kv-pool-tokens");
    }
  }();
  if (!engine) {
    log_line("serve: " + engine.status().to_string());
    return 1;
  }
  end_phase("pool");
  if (engine_options.itl_slo_ms != 0) {
    const std::string budget = engine_options.itl_slo_ms > 0
                                   ? CLI::detail::to_string(engine_options.itl_slo_ms) + " ms"
                                   : "a factor " + CLI::detail::to_string(engine_options.itl_slo_factor) + " of the decode part";
    log_line("step budget: " + budget + " while sequences decode; " +
             (step_cost_read ? describe_step_cost((*engine)->stats().step_cost, "read from " + step_cost_file)
                             : "cost model measured in the first idle second (none applies until then)"));
  }
  {
    std::lock_guard lock(ban_sink->mu);
    ban_sink->engine = engine->get();
  }
  struct DetachBans {
    std::shared_ptr<BanSink> sink;
    ~DetachBans() {
      std::lock_guard lock(sink->mu);
      sink->engine = nullptr;
    }
  } detach_bans{ban_sink};
  if (kv_events) {
    server_options.kv_events = kv_events.get();
    server_options.kv_info.model_fingerprint = (*model)->fingerprint_hex();
    server_options.kv_info.kv_format = (*engine)->kv_format();
    server_options.kv_info.block_size = engine_options.block_size;
    server_options.kv_info.prefix_cache = engine_options.prefix_cache;
  }
  if (!server_options.extra_metrics) server_options.extra_metrics = [startup] { return startup->render_metrics(); };
  std::unique_ptr<server::GenerationBackend> backend = server::make_engine_backend(**engine, server_options.model_id);
  Expected<std::unique_ptr<server::Server>> http = server::Server::create(*backend, server_options);
  if (!http) {
    log_line("serve: " + http.status().to_string());
    return 1;
  }

  // Block the stop signals in every thread (the server's threads inherit the mask), then wait
  // for one here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (Status st = (*http)->start(); !st.is_ok()) {
    log_line("serve: " + st.to_string());
    return 1;
  }
  if (share_node) share_node->set_peer_url("http://" + server_options.host + ":" + std::to_string((*http)->port()));
  end_phase("listening");
  log_line(startup->summary());
  // A first start writes its prepared weights while it serves (the write only reads the weights),
  // from when the engine has settled (engine_settled above): not beside the first request. Joined
  // before the model goes (declared after it); a stop before then writes at once.
  struct JoinOnExit {
    std::shared_ptr<Settled> settled;
    std::thread thread;
    ~JoinOnExit() {
      settled->set();
      if (thread.joinable()) thread.join();
    }
  } weights_writer{engine_settled, {}};
  if ((*model)->load_report().cache_write_due) {
    weights_writer.thread = std::thread([&m = **model, startup, settled = engine_settled] {
      settled->wait();
      const auto start = std::chrono::steady_clock::now();
      const Status st = m.save_prepared_weights();
      startup->set_weights_cache_writing(false);
      log_line(st ? "serve: weights cache: written in " +
                        std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) + " s"
                  : "serve: weights cache: cannot write it: " + st.message());
    });
  }
  const ModelConfig& config = (*model)->config();
  log_line("serving " + backend->model_info().id + " (" + config.architecture + ", " +
           std::to_string(config.n_layers) + " layers, vocab " + std::to_string(config.n_vocab) + ") from " +
           model_path + " on http://" + server_options.host + ":" + std::to_string((*http)->port()) +
           " (ctx " + std::to_string(engine_options.n_ctx) + ", parallel " +
           std::to_string(engine_options.max_running) + ")");
  int signal = 0;
  sigwait(&stop_signals, &signal);
  log_line(std::string("received ") + (signal == SIGINT ? "SIGINT" : "SIGTERM") + ", draining for up to " +
           std::to_string(http_flags.drain_seconds) + " s");
  // Stop accepting; in-flight requests finish within --drain-seconds, the rest end with "abort".
  (*http)->drain(std::chrono::milliseconds(static_cast<std::int64_t>(http_flags.drain_seconds * 1000)));
  return 0;
}

}  // namespace kvstash::cli
