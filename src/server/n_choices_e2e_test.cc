// n > 1 end to end (issue 33): a real engine running the generated `tiny` model behind a real
// server, over sockets. n: 3 gives three choices with distinct indices, streamed or not, usage
// counting the prompt once and every choice's completion tokens; greedy choices equal the n = 1
// answer; seeded choices repeat; response_format holds per choice; n above --max-n is refused.
// Also GET /v1/models/{id} (OpenAI's shape, 404 for an unknown id).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/server.h"

namespace kvstash::server {
namespace {

using testing::json;

class NChoicesE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::load(kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16));
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
    eo.n_ctx = 512;
    eo.max_running = 8;
    eo.n_threads = 2;
    auto engine = Engine::create(*model_, eo);
    ASSERT_TRUE(engine) << engine.status().to_string();
    engine_ = std::move(*engine);
    backend_ = make_engine_backend(*engine_, "tiny");
    ServerOptions so;
    so.port = 0;
    so.log_requests = false;
    so.max_n = 4;
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
  httplib::Result post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(120, 0);
    return c.Post(path, testing::naming_model(body.dump(), "tiny"), "application/json");
  }
  static json chat(int n, double temperature, int seed, int max_tokens = 12) {
    return {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Say something."}}}}, {"n", n},
            {"temperature", temperature}, {"seed", seed}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
  }

  static Model* model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GenerationBackend> backend_;
  std::unique_ptr<Server> server_;
};

Model* NChoicesE2ETest::model_ = nullptr;

TEST_F(NChoicesE2ETest, ThreeChoicesWithDistinctIndicesAndUsageCountingThePromptOnce) {
  auto one = post("/v1/chat/completions", chat(1, 1.0, 7));
  auto three = post("/v1/chat/completions", chat(3, 1.0, 7));
  auto again = post("/v1/chat/completions", chat(3, 1.0, 7));
  ASSERT_TRUE(one && three && again);
  ASSERT_EQ(three->status, 200) << three->body;
  const json a = json::parse(three->body), b = json::parse(again->body), single = json::parse(one->body);
  ASSERT_EQ(a["choices"].size(), 3u);
  std::set<int> indices;
  std::set<std::string> contents;
  for (int i = 0; i < 3; ++i) {
    const json& c = a["choices"][static_cast<std::size_t>(i)];
    indices.insert(c["index"].get<int>());
    contents.insert(c["message"]["content"].get<std::string>());
    EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(c["message"]["content"], b["choices"][static_cast<std::size_t>(i)]["message"]["content"]) << "seeded: repeatable";
  }
  EXPECT_EQ(indices, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(contents.size(), 3u) << "each choice has its own seed";
  EXPECT_EQ(a["choices"][0]["message"]["content"], single["choices"][0]["message"]["content"]) << "choice 0 keeps the seed";
  // OpenAI's usage: the prompt once, the completion tokens of all choices.
  EXPECT_EQ(a["usage"]["prompt_tokens"], single["usage"]["prompt_tokens"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 3 * 12);
  EXPECT_EQ(a["usage"]["total_tokens"], a["usage"]["prompt_tokens"].get<int>() + 36);
}

TEST_F(NChoicesE2ETest, GreedyChoicesEqualTheSingleAnswerOnCompletions) {
  const json body = {{"model", "tiny"}, {"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 10}, {"ignore_eos", true}};
  json three_body = body;
  three_body["n"] = 3;
  auto one = post("/v1/completions", body);
  auto three = post("/v1/completions", three_body);
  ASSERT_TRUE(one && three);
  ASSERT_EQ(three->status, 200) << three->body;
  const json r = json::parse(three->body);
  ASSERT_EQ(r["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r["choices"][static_cast<std::size_t>(i)]["index"], i);
    EXPECT_EQ(r["choices"][static_cast<std::size_t>(i)]["text"], json::parse(one->body)["choices"][0]["text"]);
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], 30);
}

TEST_F(NChoicesE2ETest, StreamedChoicesCarryTheirIndexAndMatchTheWholeAnswer) {
  auto whole = post("/v1/chat/completions", chat(3, 1.0, 11));
  json body = chat(3, 1.0, 11);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto streamed = post("/v1/chat/completions", body);
  ASSERT_TRUE(whole && streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  bool saw_done = false;
  std::map<int, std::string> content;
  std::map<int, int> finishes, roles;
  json usage;
  for (const json& chunk : testing::parse_sse(streamed->body, &saw_done)) {
    ASSERT_EQ(chunk["object"], "chat.completion.chunk") << chunk.dump();
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
    for (const json& c : chunk["choices"]) {
      const int index = c["index"];
      if (c["delta"].contains("role")) ++roles[index];
      if (c["delta"].contains("content") && c["delta"]["content"].is_string()) content[index] += c["delta"]["content"].get<std::string>();
      if (c["finish_reason"].is_string()) {
        ++finishes[index];
        EXPECT_EQ(c["finish_reason"], "length");
      }
    }
  }
  EXPECT_TRUE(saw_done);
  const json w = json::parse(whole->body);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(roles[i], 1) << "choice " << i;
    EXPECT_EQ(finishes[i], 1) << "choice " << i;
    EXPECT_EQ(content[i], w["choices"][static_cast<std::size_t>(i)]["message"]["content"].get<std::string>()) << "choice " << i;
  }
  EXPECT_EQ(usage["completion_tokens"], 36);
  EXPECT_EQ(usage["prompt_tokens"], w["usage"]["prompt_tokens"]);
}

TEST_F(NChoicesE2ETest, JsonObjectHoldsForEveryChoice) {
  json body = chat(3, 1.0, 5, 400);
  body.erase("ignore_eos");
  body["response_format"] = {{"type", "json_object"}};
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json response = json::parse(r->body);
  ASSERT_EQ(response["choices"].size(), 3u);
  for (const json& c : response["choices"]) {
    const std::string text = c["message"]["content"];
    EXPECT_EQ(c["finish_reason"], "stop") << text;
    EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded()) << "choice " << c["index"] << ": " << text;
  }
}

TEST_F(NChoicesE2ETest, NOutsideTheLimitIsRefusedByName) {
  for (int n : {0, 5}) {
    auto r = post("/v1/chat/completions", chat(n, 1.0, 1));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "n") << r->body;
  }
}

TEST_F(NChoicesE2ETest, RetrievesTheServedModelAndRefusesUnknownIds) {
  httplib::Client c("127.0.0.1", server_->port());
  auto known = c.Get("/v1/models/tiny");
  ASSERT_TRUE(known);
  ASSERT_EQ(known->status, 200) << known->body;
  const json m = json::parse(known->body);
  EXPECT_EQ(m["id"], "tiny");
  EXPECT_EQ(m["object"], "model");
  EXPECT_TRUE(m["created"].is_number_integer());
  EXPECT_TRUE(m["owned_by"].is_string());
  auto unknown = c.Get("/v1/models/gpt-4o");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  const json e = json::parse(unknown->body);
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("gpt-4o"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::server
