// The node's front, hardened (issue 31), against real `kvstash serve` processes over sockets:
// tenants behind different API keys never share a cache hit (KV or answer) unless the key file
// puts them in one namespace; every endpoint but the probes needs the key; /health stays fast
// while clients post 8 MiB bodies; flags out of range are refused with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/serve_process.h"

namespace kvstash::server::testing {
namespace {

// The time and memory bounds of issue 31 are asserted in the release build (what ships, the first
// pass of scripts/test.sh). Under ASan (its quarantine keeps freed bodies resident) and TSan (5-15x
// slower threads) the same runs check everything else: cached tokens, answers, metrics.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kBoundsAsserted = false;
#else
constexpr bool kBoundsAsserted = true;
#endif

struct Answer {
  int status = 0;
  std::string cache;  // x-kvstash-cache
  json body;
};

class FrontHardeningE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new std::string(kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16)); }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    ASSERT_FALSE(model_->empty());
    ASSERT_TRUE(std::filesystem::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
  }

  std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> all = {"--identity", dir_.path() + "/" + name + ".key", "--alias", "tiny"};
    all.insert(all.end(), args.begin(), args.end());
    auto p = std::make_unique<ServeProcess>(*model_, all, dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << p->log();
    return p;
  }

  std::string key_file(const std::string& text) {
    const std::string path = dir_.path() + "/keys.txt";
    std::ofstream(path) << text;
    return path;
  }

  static Answer post(const ServeProcess& s, const std::string& path, const json& body, const std::string& key) {
    Answer a;
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
    auto r = s.client(120)->Post(path, headers, s.named(path, body.dump()), "application/json");
    if (!r) return a;
    a.status = r->status;
    a.cache = r->get_header_value("x-kvstash-cache");
    a.body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    return a;
  }

  static int cached_tokens(const Answer& a) {
    if (a.status != 200) {
      ADD_FAILURE() << a.status << " " << a.body.dump();
      return -1;
    }
    return a.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  }

  // A greedy completion of 64 token ids; `response_cache` false asks the engine (KV reuse only).
  static json completion(int seed_token, bool response_cache) {
    std::vector<int> prompt;
    for (int i = 0; i < 64; ++i) prompt.push_back(seed_token + (i * 7) % 50);
    return json{{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"response_cache", response_cache}};
  }

  // Posts until the answer is a response-cache hit (the record is written behind the answer):
  // bounded, never a timing assertion.
  static bool becomes_hit(const ServeProcess& s, const json& body, const std::string& key) {
    for (int i = 0; i < 100; ++i) {
      if (post(s, "/v1/completions", body, key).cache == "hit") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  static std::string* model_;
  cache::testing::ScratchDir dir_;
};

std::string* FrontHardeningE2ETest::model_ = nullptr;

TEST_F(FrontHardeningE2ETest, EveryEndpointButProbesNeedsTheKey) {
  auto s = serve("auth", {"--api-key", "sk-a", "--no-kv-store"});
  ASSERT_TRUE(s->ready());
  for (const char* path : {"/tokenize", "/detokenize", "/v1/completions", "/v1/chat/completions", "/v1/embeddings"}) {
    EXPECT_EQ(post(*s, path, json{{"content", "hi"}, {"tokens", {1, 2}}}, "").status, 401) << path;
    EXPECT_EQ(post(*s, path, json{{"content", "hi"}, {"tokens", {1, 2}}}, "sk-b").status, 401) << path;
  }
  EXPECT_EQ(post(*s, "/tokenize", json{{"content", "hi"}}, "sk-a").status, 200);
  EXPECT_EQ(post(*s, "/detokenize", json{{"tokens", {1, 2}}}, "sk-a").status, 200);
  auto c = s->client();
  for (const char* path : {"/v1/models", "/metrics", "/v1/identity"}) {
    auto r = c->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
  }
  // Probes need no key; /metrics only with --public-metrics.
  for (const char* path : {"/health", "/ready"}) {
    auto r = c->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
  }
  auto open = serve("public-metrics", {"--api-key", "sk-a", "--no-kv-store", "--public-metrics"});
  ASSERT_TRUE(open->ready());
  auto m = open->client()->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
}

// Two keys, the same prompt: neither KV (cached tokens) nor answers (x-kvstash-cache) cross
// between them by default; keys the file puts in one namespace share both.
TEST_F(FrontHardeningE2ETest, TenantsNeverShareHitsUnlessTheirKeysShareANamespace) {
  const std::string keys = key_file(
      "# tenants\n"
      "alice:sk-alice\n"
      "bob:sk-bob\n"
      "carol:sk-carol:team\n"
      "dave:sk-dave:team\n");
  auto s = serve("tenants", {"--api-key-file", keys, "--response-cache", "16MiB", "--no-kv-store"});
  ASSERT_TRUE(s->ready());

  // KV reuse (the engine's prefix cache; the response cache opted out).
  const json kv = completion(10, /*response_cache=*/false);
  ASSERT_EQ(cached_tokens(post(*s, "/v1/completions", kv, "sk-alice")), 0);
  EXPECT_GT(cached_tokens(post(*s, "/v1/completions", kv, "sk-alice")), 0);  // her own hit
  EXPECT_EQ(cached_tokens(post(*s, "/v1/completions", kv, "sk-bob")), 0);     // never hers
  // The same body salt does not bridge namespaces: it narrows, never replaces.
  json salted = kv;
  salted["cache_salt"] = "shared-salt";
  ASSERT_EQ(cached_tokens(post(*s, "/v1/completions", salted, "sk-alice")), 0);
  EXPECT_EQ(cached_tokens(post(*s, "/v1/completions", salted, "sk-bob")), 0);
  // Carol and Dave share "team".
  const json team_kv = completion(20, false);
  ASSERT_EQ(cached_tokens(post(*s, "/v1/completions", team_kv, "sk-carol")), 0);
  EXPECT_GT(cached_tokens(post(*s, "/v1/completions", team_kv, "sk-dave")), 0);
  EXPECT_EQ(cached_tokens(post(*s, "/v1/completions", team_kv, "sk-alice")), 0);

  // Response records.
  const json answer = completion(30, /*response_cache=*/true);
  EXPECT_EQ(post(*s, "/v1/completions", answer, "sk-alice").cache, "miss");
  ASSERT_TRUE(becomes_hit(*s, answer, "sk-alice"));
  const Answer bob = post(*s, "/v1/completions", answer, "sk-bob");
  EXPECT_EQ(bob.cache, "miss");  // Alice's record exists, and Bob does not learn it
  EXPECT_EQ(cached_tokens(bob), 0);
  const json team_answer = completion(40, true);
  EXPECT_EQ(post(*s, "/v1/completions", team_answer, "sk-carol").cache, "miss");
  EXPECT_TRUE(becomes_hit(*s, team_answer, "sk-dave"));
  EXPECT_EQ(post(*s, "/v1/completions", team_answer, "sk-bob").cache, "miss");
}

// /health answers within 50 ms (p99) while 4 clients post bodies of nearly 8 MiB each: the
// bodies are parsed, rendered and tokenized on the request workers, not the I/O threads.
TEST_F(FrontHardeningE2ETest, HealthStaysFastWhileLargeBodiesAreProcessed) {
  auto s = serve("large", {"--no-kv-store", "--http-threads", "2", "--request-workers", "2"});
  ASSERT_TRUE(s->ready());
  std::string text;
  while (text.size() < (8u << 20) - 4096) text += "lorem ipsum dolor sit amet, consectetur adipiscing elit ";
  const std::string body = json{{"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", 1}}.dump();
  ASSERT_LT(body.size(), 8u << 20);
  constexpr int kClients = 4, kBodiesEach = 1;
  std::atomic<int> done{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      for (int i = 0; i < kBodiesEach; ++i) {
        auto r = s->client(300)->Post("/v1/chat/completions", s->named("/v1/chat/completions", body), "application/json");
        // Far longer than the context: a 400 once tokenized (or 503 when the workers' queue is full).
        if (r && (r->status == 400 || r->status == 503)) answered.fetch_add(1);
      }
      done.fetch_add(1);
    });
  }
  std::vector<double> ms;
  auto health = s->client(10);
  while (done.load() < kClients && ms.size() < 20000) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = health->Get("/health");
    const auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(answered.load(), kClients * kBodiesEach);
  ASSERT_GE(ms.size(), 20u) << "the bodies were answered before /health was measured";
  std::sort(ms.begin(), ms.end());
  const double p99 = ms[ms.size() * 99 / 100];
  if (kBoundsAsserted) {
    EXPECT_LT(p99, 50.0) << "p99 of " << ms.size() << " /health requests; max " << ms.back() << " ms";
  }
}

// Flags out of range: the command refuses them with a message naming the flag, before serving.
TEST_F(FrontHardeningE2ETest, FlagsOutOfRangeAreRefused) {
  const auto run = [&](const std::string& flags) {
    // `timeout`: a flag wrongly accepted starts a server, which must not hang the test.
    const std::string cmd = "timeout 60 " + std::string(KVSTASH_BINARY_DIR) + "/kvstash serve -m " + *model_ + " --identity " +
                            dir_.path() + "/flags.key " + flags + " 2>&1; echo \"exit=$?\"";
    std::string out;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    char buf[512];
    while (pipe && std::fgets(buf, sizeof buf, pipe)) out += buf;
    if (pipe) ::pclose(pipe);
    return out;
  };
  struct Case {
    std::string flags;
    std::string message;  // a piece the refusal must hold
  };
  const std::vector<Case> cases = {
      {"--port 70000", "--port"},
      {"--port -1", "--port"},
      {"--parallel -3", "--parallel"},
      {"--queue -1", "--queue"},
      {"--threads -2", "--threads"},
      {"--kv-pool-tokens -5", "--kv-pool-tokens"},
      {"--http-threads 0", "--http-threads"},
      {"--kv-load-timeout-ms abc", "--kv-load-timeout-ms"},
      // 16 TiB and more of KV whatever the machine (the tiny model's 256 bytes a token).
      {"--ctx 100000000 --parallel 4096 --no-kv-store", "GiB"},
  };
  for (const Case& c : cases) {
    const std::string out = run(c.flags);
    EXPECT_NE(out.find("exit=1"), std::string::npos) << c.flags << ":\n" << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.flags << ":\n" << out;
    EXPECT_EQ(out.find("serving "), std::string::npos) << c.flags << ":\n" << out;
  }
  // The router's port too.
  const std::string route_cmd = "timeout 60 " + std::string(KVSTASH_BINARY_DIR) + "/kvstash route --port 70000 2>&1; echo \"exit=$?\"";
  std::string route_out;
  FILE* pipe = ::popen(route_cmd.c_str(), "r");
  char buf[512];
  while (pipe && std::fgets(buf, sizeof buf, pipe)) route_out += buf;
  if (pipe) ::pclose(pipe);
  EXPECT_NE(route_out.find("exit=1"), std::string::npos) << route_out;
  EXPECT_NE(route_out.find("--port"), std::string::npos) << route_out;
  // The memory refusal names what the context would need.
  const std::string ctx = run("--ctx 100000000 --parallel 4096 --no-kv-store");
  EXPECT_NE(ctx.find("needs a KV pool of"), std::string::npos) << ctx;
}

}  // namespace
}  // namespace kvstash::server::testing
