// For the tiered KV store's end-to-end tests (header only, test code): a fixture that starts a
// no-cache reference server once per suite and `kvstash serve` processes per test, deterministic
// token-id prompts, and helpers over the disk tier's chunk files.
//
// Every check compares a greedy completion served with a cache hit against the same completion
// from a server with no cache at all (--no-prefix-cache --no-kv-store), token for token, and
// reads /metrics to see which tier served it. Every wait is a bounded poll.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cache/chunk_codec.h"
#include "cache/prefix_alias.h"
#include "cache/redis_test_server.h"
#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "server/serve_process.h"

namespace kvstash::server::testing {

using cache::testing::RedisTestServer;
using cache::testing::ScratchDir;

namespace fs = std::filesystem;
using cache::testing::RedisTestServer;
using cache::testing::ScratchDir;

constexpr int kChunk = 32;       // --chunk-tokens: small, so short prompts span several chunks
constexpr int kMaxTokens = 12;   // generated tokens per request

// A prompt of token ids, distinct per seed (ids well inside the tiny model's vocabulary).
inline std::vector<int> prompt(int seed, int n_tokens = 7 * kChunk + 5) {
  std::vector<int> out;
  std::uint32_t x = 2654435761u * static_cast<std::uint32_t>(seed + 1);
  for (int i = 0; i < n_tokens; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(3 + static_cast<int>((x >> 8) % 240));
  }
  return out;
}

inline std::string tier_metric(const char* family, const char* tier) {
  return std::string(family) + "{tier=\"" + tier + "\"}";
}

inline cache::Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return cache::Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every *.kvc file under a disk tier's directory that holds KV (or anything but a prefix alias:
// a damaged file counts), or, with aliases = true, only the prefix aliases (cache/prefix_alias.h).
inline std::vector<fs::path> chunk_files(const std::string& dir, bool aliases = false) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".kvc") continue;
    auto h = cache::parse_chunk_header(read_bytes(e.path()));
    const bool alias = h && h->meta.kv_format == cache::kAliasKvFormat;
    if (alias == aliases) out.push_back(e.path());
  }
  return out;
}
inline void write_bytes(const fs::path& p, const cache::Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// The disk chunk files of a directory by the first position their header declares.
inline std::multimap<std::uint32_t, fs::path> files_by_position(const std::string& dir) {
  std::multimap<std::uint32_t, fs::path> out;
  for (const auto& p : chunk_files(dir)) {
    auto h = cache::parse_chunk_header(read_bytes(p));
    if (h) out.emplace(h->meta.first_position, p);
  }
  return out;
}

class KvStoreE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16));
    scratch_ = new ScratchDir();
    reference_ = new ServeProcess(*model_, {"--no-prefix-cache", "--no-kv-store"}, scratch_->path() + "/ref.log");
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete scratch_;
    delete model_;
  }
  void SetUp() override {
    ASSERT_FALSE(model_->empty());
    ASSERT_TRUE(fs::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
    ASSERT_TRUE(reference_->ready()) << reference_->log();
  }

  // A server with the store flags `args` (plus --chunk-tokens kChunk), logging to logs/NAME.log.
  std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> args) {
    args.push_back("--chunk-tokens");
    args.push_back(std::to_string(kChunk));
    auto p = std::make_unique<ServeProcess>(*model_, args, dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << p->log();
    return p;
  }
  // The greedy output of the no-cache server (the truth every hit is compared with).
  static std::vector<std::string> reference(const std::vector<int>& p) {
    json r = reference_->complete(p, kMaxTokens);
    EXPECT_FALSE(r.is_null());
    EXPECT_EQ(cached_of(r), 0);
    return tokens_of(r);
  }
  // A test that needs Redis fails without it (never skips): CI installs it.
  static bool redis_ok() { return cache::testing::redis_installed(); }
  static constexpr const char* kRedisMissing =
      "redis-server / redis-cli are not installed: this test needs them (scripts/install-deps.sh)";

  // Server A prefills prompt(seed); server B (another process, same redis, no disk, no memory
  // tier) gets the same prompt and loads all of it from redis.
  void expect_shared_through_redis(const std::string& url, int seed) {
    const auto p = prompt(seed);
    const auto want = reference(p);
    auto a = serve("redis-a", {"--cache-ram", "16MiB", "--cache-redis", url});
    EXPECT_EQ(tokens_of(a->complete(p, kMaxTokens)), want);
    ASSERT_TRUE(a->wait_writes_done());
    EXPECT_GE(a->metric(tier_metric("kvstash_kv_tier_written_bytes_total", "redis")), 1);
    auto b = serve("redis-b", {"--cache-ram", "0", "--cache-redis", url});
    json again = b->complete(p, kMaxTokens);
    EXPECT_EQ(tokens_of(again), want) << text_of(again);
    EXPECT_EQ(cached_of(again), 7 * kChunk);
    EXPECT_EQ(b->metric(tier_metric("kvstash_kv_tier_hits_total", "redis")), 7);
    EXPECT_EQ(b->metric("kvstash_prompt_tokens_from_store_total"), 7 * kChunk);
  }

  static inline std::string* model_ = nullptr;
  static inline ScratchDir* scratch_ = nullptr;
  static inline ServeProcess* reference_ = nullptr;
  ScratchDir dir_;
};

}  // namespace kvstash::server::testing
