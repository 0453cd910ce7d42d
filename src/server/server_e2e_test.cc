// The server end to end: a real engine running the generated `tiny` model behind a real server
// on 127.0.0.1, talked to over sockets.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/server.h"

namespace kvstash::server {
namespace {

using testing::json;

constexpr int kCtx = 1024;

// Forwards to the engine and counts cancel() calls, so a test can see that a disconnect
// reached the engine.
class CountingBackend final : public GenerationBackend {
 public:
  explicit CountingBackend(std::unique_ptr<GenerationBackend> inner) : inner_(std::move(inner)) {}
  Expected<std::uint64_t> submit(GenerationRequest r, TokenCallback cb) override {
    return inner_->submit(std::move(r), std::move(cb));
  }
  void cancel(std::uint64_t id) override {
    ++cancels;
    inner_->cancel(id);
  }
  EngineStats stats() const override { return inner_->stats(); }
  const ModelInfo& model_info() const override { return inner_->model_info(); }
  std::atomic<int> cancels{0};

 private:
  std::unique_ptr<GenerationBackend> inner_;
};

class ServerE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string path = kvstash::testing::test_model_path("tiny");
    auto model = Model::load(path);
    ASSERT_TRUE(model) << model.status().to_string();
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(model_, nullptr);
    EngineOptions eo;
    eo.n_ctx = kCtx;
    eo.max_running = 16;
    eo.n_threads = 2;
    auto engine = Engine::create(*model_, eo);
    ASSERT_TRUE(engine) << engine.status().to_string();
    engine_ = std::move(*engine);
    backend_ = std::make_unique<CountingBackend>(make_engine_backend(*engine_, "tiny-test"));
    ServerOptions so;
    so.port = 0;
    so.log_requests = false;
    so.max_body_bytes = 1 << 20;
    auto server = Server::create(*backend_, so);
    ASSERT_TRUE(server) << server.status().to_string();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->start().is_ok());
  }
  void TearDown() override {
    if (server_) server_->stop();
    server_.reset();
    backend_.reset();
    engine_.reset();
  }
  std::unique_ptr<httplib::Client> client() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(30, 0);
    return c;
  }
  json post_ok(const std::string& path, const json& body) {
    auto r = client()->Post(path.c_str(), testing::naming_model(body.dump(), "tiny-test"), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  // A prompt of several KV blocks, distinct per `tag` so tests do not share cached prefixes.
  static std::string long_prompt(const std::string& tag) {
    std::string p = "Story " + tag + ":";
    for (int i = 0; i < 40; ++i) p += " word" + std::to_string(i);
    return p;
  }
  static std::string text_of(const json& r) { return r["choices"][0]["text"].get<std::string>(); }
  static int cached_of(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(); }

  static Model* model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<CountingBackend> backend_;
  std::unique_ptr<Server> server_;
};

Model* ServerE2ETest::model_ = nullptr;

TEST_F(ServerE2ETest, BadInputsThenAGoodRequest) {
  auto c = client();
  using testing::expect_api_error;
  auto post = [&](const std::string& path, const std::string& body) {
    return c->Post(path.c_str(), testing::naming_model(body, "tiny-test"), "application/json");
  };
  expect_api_error(post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\""), 400, "malformed JSON");
  expect_api_error(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": 1}]})"), 400,
                   "messages[0].content");
  expect_api_error(post("/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})"), 400, "robot");
  expect_api_error(post("/v1/chat/completions", R"({"messages": []})"), 400, "empty");
  expect_api_error(post("/v1/completions", "{\"prompt\": \"a\xC3\"}"), 400, "UTF-8");
  int vocab = backend_->model_info().n_vocab;
  expect_api_error(post("/v1/completions", json{{"prompt", {1, vocab}}}.dump()), 400, std::to_string(vocab));
  std::string huge;
  for (int i = 0; i < kCtx; ++i) huge += " w" + std::to_string(i);
  expect_api_error(post("/v1/completions", json{{"prompt", huge}}.dump()), 400, "context");
  expect_api_error(post("/v1/completions", json{{"prompt", "hi"}, {"max_tokens", kCtx}}.dump()), 400, "max_tokens");
  expect_api_error(post("/v1/completions", json{{"prompt", std::string(2 << 20, 'a')}}.dump()), 413, "too large");
  expect_api_error(c->Get("/v1/unknown"), 404, "unknown endpoint");
  json ok = post_ok("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 8}});
  EXPECT_EQ(ok["object"], "chat.completion");
  EXPECT_GE(ok["usage"]["completion_tokens"].get<int>(), 1);
  EXPECT_EQ(ok["model"], "tiny-test");
}

TEST_F(ServerE2ETest, StreamingAndNonStreamingAgree) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me something"}}}}, {"max_tokens", 20}};
  body["temperature"] = 0;  // greedy, so the two runs agree
  json whole = post_ok("/v1/chat/completions", body);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = client()->Post("/v1/chat/completions", testing::naming_model(body.dump(), "tiny-test"), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  bool done = false;
  std::vector<json> events = testing::parse_sse(r->body, &done);
  ASSERT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string text;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json& d = events[i]["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
  }
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"].get<std::string>());
  json usage = events.back()["usage"];
  // The second request may reuse the first one's prefix, so compare all but cached_tokens.
  EXPECT_EQ(usage["prompt_tokens"], whole["usage"]["prompt_tokens"]);
  EXPECT_EQ(usage["completion_tokens"], whole["usage"]["completion_tokens"]);
  EXPECT_EQ(usage["total_tokens"], whole["usage"]["total_tokens"]);
}

TEST_F(ServerE2ETest, GreedyOutputIsTheSameAloneBatchedAndFromThePrefixCache) {
  json target = {{"prompt", long_prompt("target")}, {"max_tokens", 24}, {"temperature", 0}};
  json alone = post_ok("/v1/completions", target);
  EXPECT_EQ(cached_of(alone), 0);

  std::vector<std::future<json>> others;
  for (int i = 0; i < 8; ++i) {
    json other = {{"prompt", long_prompt("other" + std::to_string(i))}, {"max_tokens", 24}};
    others.push_back(std::async(std::launch::async, [this, other] { return post_ok("/v1/completions", other); }));
  }
  // Salted, so it cannot reuse the first run's KV: this run is computed in a busy batch.
  json salted = target;
  salted["cache_salt"] = "batched";
  json batched = post_ok("/v1/completions", salted);
  for (auto& f : others) EXPECT_EQ(f.get()["choices"][0]["finish_reason"].is_string(), true);
  EXPECT_EQ(cached_of(batched), 0);
  EXPECT_EQ(text_of(batched), text_of(alone));

  json cached = post_ok("/v1/completions", target);
  EXPECT_GT(cached_of(cached), 0);
  EXPECT_EQ(text_of(cached), text_of(alone));
  EXPECT_EQ(cached["usage"]["completion_tokens"], alone["usage"]["completion_tokens"]);
}

TEST_F(ServerE2ETest, CachedTokensExactlyWhenThePrefixWasSeenUnderTheSameSalt) {
  json body = {{"prompt", long_prompt("cache")}, {"max_tokens", 4}};
  json first = post_ok("/v1/completions", body);
  EXPECT_EQ(cached_of(first), 0);
  json second = post_ok("/v1/completions", body);
  EXPECT_GT(cached_of(second), 0);
  EXPECT_LT(cached_of(second), second["usage"]["prompt_tokens"].get<int>());
  body["cache_salt"] = "tenant-a";
  EXPECT_EQ(cached_of(post_ok("/v1/completions", body)), 0);
  EXPECT_GT(cached_of(post_ok("/v1/completions", body)), 0);
  body["cache_salt"] = "tenant-b";
  EXPECT_EQ(cached_of(post_ok("/v1/completions", body)), 0);
}

TEST_F(ServerE2ETest, StopStringCutsTheGreedyOutput) {
  json body = {{"prompt", long_prompt("stop")}, {"max_tokens", 30}, {"temperature", 0}};
  std::string full = text_of(post_ok("/v1/completions", body));
  ASSERT_GE(full.size(), 8u) << full;
  // A stop string taken from the middle of the output; the output ends just before its first
  // occurrence.
  std::size_t at = full.size() / 2;
  while (at > 0 && (static_cast<unsigned char>(full[at]) & 0xC0) == 0x80) --at;
  std::string stop = full.substr(at, 2);
  while (!stop.empty() && (static_cast<unsigned char>(full[at + stop.size()]) & 0xC0) == 0x80) {
    stop += full[at + stop.size()];
  }
  body["stop"] = {stop};
  json cut = post_ok("/v1/completions", body);
  EXPECT_EQ(text_of(cut), full.substr(0, full.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  body["stream"] = true;
  auto r = client()->Post("/v1/completions", testing::naming_model(body.dump(), "tiny-test"), "application/json");
  ASSERT_TRUE(r);
  bool done = false;
  std::string streamed;
  for (const json& e : testing::parse_sse(r->body, &done)) streamed += e["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(done);
  EXPECT_EQ(streamed, text_of(cut));
}

TEST_F(ServerE2ETest, DisconnectingStreamIsCancelled) {
  // ignore_eos: only the cancel (or the length) may end it. Sampled at temperature 1, the tiny model
  // ends this prompt with its end-of-generation token within the 824 tokens in about 1 run of 5
  // (after 375-753 tokens): when the hang-up was noticed that late (the CI rehearsal's ASan pass,
  // beside another test), the request had finished by itself and nothing was cancelled.
  json body = {{"prompt", long_prompt("disconnect")}, {"max_tokens", kCtx - 200}, {"stream", true}, {"ignore_eos", true}};
  std::string got = testing::post_and_hang_up(server_->port(), "/v1/completions", testing::naming_model(body.dump(), "tiny-test"), 300);
  EXPECT_NE(got.find("data: "), std::string::npos);
  bool idle = false;
  // Bounded: at most ~60 s. The server learns of the hang-up from a failed write, the second after
  // the client's reset at the soonest; an ASan build among other tests at -j2 took over 5 s once.
  for (int i = 0; i < 6000 && !idle; ++i) {
    EngineStats s = backend_->stats();
    idle = s.running == 0 && s.waiting == 0 && backend_->cancels.load() > 0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const EngineStats end = backend_->stats();
  EXPECT_TRUE(idle) << "running " << end.running << ", waiting " << end.waiting << ", generated " << end.generated_tokens;
  EXPECT_GE(backend_->cancels.load(), 1);
  EXPECT_LT(engine_->stats().generated_tokens, kCtx - 200);
  // Still serving.
  post_ok("/v1/completions", {{"prompt", "after"}, {"max_tokens", 2}});
}

TEST_F(ServerE2ETest, MetricsReflectTraffic) {
  post_ok("/v1/completions", {{"prompt", "metrics"}, {"max_tokens", 3}});
  auto r = client()->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("kvstash_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 1"), std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find("kvstash_kv_blocks{state=\"free\"}"), std::string::npos);
  EXPECT_NE(r->body.find("kvstash_ttft_seconds_count 1"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::server
