// The HTTP layer on real parts: the generated `tiny` model in a real Engine behind a real
// Server, talked to over loopback sockets. Expected text comes from running the same request
// through the engine directly (greedy decoding is deterministic), so every check is against
// what the model really produces: routing, errors, response shapes, streaming, stop strings,
// logprobs, queue-full and client disconnects.
#include "server/server.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/prompt_builder.h"
#include "server/request_parser.h"
#include "server/text_stream.h"

namespace kvstash::server {
namespace {

using testing::json;

const char* kChat = "/v1/chat/completions";
const char* kText = "/v1/completions";

// What the engine generates for a request body when asked directly.
struct Reference {
  std::vector<TokenId> tokens;  // the turn's tokens, without the token that ended it
  std::string text;             // as the server renders them (TextStream)
  int prompt_tokens = 0;
  FinishReason finish = FinishReason::kNone;
};

// Waits (bounded: ~10 s, never a timing assertion) until `done` holds; returns whether it did.
template <typename Pred>
bool eventually(Pred done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

class ServerTest : public ::testing::Test {
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

  // Starts an engine with `eo` (n_threads and n_ctx defaulted) and a server in front of it.
  void start(EngineOptions eo = {}, std::size_t max_body = 8u << 20, int max_active_requests = 0) {
    ASSERT_NE(model_, nullptr);
    eo.n_threads = 2;
    if (eo.n_ctx == EngineOptions{}.n_ctx) eo.n_ctx = 2048;
    auto engine = Engine::create(*model_, eo);
    ASSERT_TRUE(engine) << engine.status().to_string();
    engine_ = std::move(*engine);
    backend_ = make_engine_backend(*engine_, "");
    ServerOptions options;
    options.port = 0;
    options.max_body_bytes = max_body;
    options.max_active_requests = max_active_requests;
    options.log_requests = false;
    auto server = Server::create(*backend_, options);
    ASSERT_TRUE(server) << server.status().to_string();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->start().is_ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(30, 0);
  }
  void TearDown() override {
    if (server_) server_->stop();
    server_.reset();
    backend_.reset();
    engine_.reset();
  }
  // These tests compare served text with a greedy reference, so a JSON body without a
  // temperature is sent with 0 (the API's default is 1: see SamplingDefaultsAreOpenAIs, which
  // uses post_as_is).
  static std::string greedy(const std::string& body) {
    json j = json::parse(body, nullptr, false);
    if (!j.is_object() || j.contains("temperature")) return body;
    j["temperature"] = 0;
    return j.dump();
  }
  // greedy(), naming the served model (post_as_is sends the body as written).
  httplib::Result post(const std::string& path, const std::string& body) {
    return post_as_is(path, testing::naming_model(greedy(body), model_->config().name));
  }
  httplib::Result post_as_is(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }
  json post_ok(const std::string& path, const json& body) {
    auto r = post(path, body.dump());
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  const Tokenizer& tokenizer() const { return model_->tokenizer(); }

  // Runs `body` through the same parser and prompt builder as the server, then the engine.
  Reference reference(Endpoint endpoint, const json& body) {
    Reference ref;
    ParsedRequest parsed;
    auto err = parse_request(endpoint, testing::naming_model(greedy(body.dump()), model_->config().name), parsed);
    EXPECT_FALSE(err) << body.dump();
    GenerationRequest request;
    // The template the server picks: the model's own (its GGUF tokenizer.chat_template).
    Expected<ChatTemplateChoice> chat_template = choose_chat_template(backend_->model_info().chat_template, "");
    EXPECT_TRUE(chat_template) << chat_template.status().to_string();
    err = build_generation_request(parsed, backend_->model_info(), chat_template->kind, request);
    EXPECT_FALSE(err) << body.dump();
    ref.prompt_tokens = static_cast<int>(request.prompt.size());
    std::vector<TokenId> stop_tokens = request.stop_tokens;
    auto result = generate(*engine_, std::move(request));
    EXPECT_TRUE(result) << result.status().to_string();
    if (!result) return ref;
    ref.tokens = result->tokens;
    ref.finish = result->finish;
    if (ref.finish == FinishReason::kStop && !ref.tokens.empty()) ref.tokens.pop_back();  // the end token
    TextStream text;
    for (TokenId t : ref.tokens) ref.text += text.push(tokenizer().token_to_piece(t));
    ref.text += text.finish();
    return ref;
  }
  static std::string text_of(const json& r, bool chat) {
    const json& c = r["choices"][0];
    return chat ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
  }
  std::string metrics_text() {
    auto m = client_->Get("/metrics");
    return m ? m->body : "";
  }
  bool engine_idle() const {
    EngineStats s = engine_->stats();
    return s.running == 0 && s.waiting == 0;
  }

  static Model* model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GenerationBackend> backend_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<httplib::Client> client_;
};

Model* ServerTest::model_ = nullptr;

json chat_body(const std::string& content, int max_tokens) {
  return {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", max_tokens}};
}

TEST_F(ServerTest, HealthModelsAndMetrics) {
  start();
  auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(json::parse(h->body), json({{"status", "ok"}}));
  auto m = client_->Get("/v1/models");
  ASSERT_TRUE(m);
  json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_FALSE(model_->config().name.empty());
  EXPECT_EQ(models["data"][0]["id"], model_->config().name);
  EXPECT_EQ(models["data"][0]["owned_by"], "kvstash");
  post_ok(kText, {{"prompt", "x"}, {"max_tokens", 3}, {"ignore_eos", true}});
  std::string metrics = metrics_text();
  EXPECT_NE(metrics.find("kvstash_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 1"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kvstash_generated_tokens_total 3\n"), std::string::npos) << metrics;
}

// llama-server's /tokenize and /detokenize, over the socket: the ids are the tokenizer's, and they
// decode back; a malformed body is a 400 and the server keeps serving.
TEST_F(ServerTest, TokenizeAndDetokenizeRoutes) {
  start();
  json t = post_ok("/tokenize", {{"content", "hello world"}});
  std::vector<TokenId> ids = t["tokens"].get<std::vector<TokenId>>();
  EXPECT_EQ(ids, tokenizer().encode("hello world", false));
  json d = post_ok("/detokenize", {{"tokens", ids}});
  EXPECT_EQ(d["content"], "hello world");
  auto bad = post_as_is("/tokenize", "{\"content\": 7}");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(ServerTest, ChatCompletionShape) {
  start();
  json body = chat_body("hi", 12);
  Reference ref = reference(Endpoint::kChatCompletions, body);
  body["model"] = model_->config().name;  // the served model (another name gets 404 model_not_found)
  json r = post_ok(kChat, body);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(r["created"].is_number_integer());
  EXPECT_EQ(r["model"], model_->config().name);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], ref.text);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["choices"][0]["finish_reason"], ref.finish == FinishReason::kStop ? "stop" : "length");
  // The chat prompt is the model's template (Qwen2.5's ChatML, which adds a system turn), special
  // tokens parsed.
  std::vector<TokenId> want = tokenizer().encode(
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
      "<|im_start|>assistant\n", true);
  int prompt = static_cast<int>(want.size()) + (tokenizer().add_bos() && tokenizer().bos_id() >= 0 ? 1 : 0);
  EXPECT_EQ(ref.prompt_tokens, prompt);
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt);
  int completion = static_cast<int>(ref.tokens.size()) + (ref.finish == FinishReason::kStop ? 1 : 0);
  EXPECT_EQ(r["usage"]["completion_tokens"], completion);
  EXPECT_EQ(r["usage"]["total_tokens"], prompt + completion);
  EXPECT_TRUE(r["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST_F(ServerTest, SamplingDefaultsAreOpenAIs) {
  start();
  // No temperature (1 by default) and no seed: each request draws its own seed.
  const json body = {{"model", model_->config().name}, {"prompt", "x"}, {"max_tokens", 24}, {"ignore_eos", true}};
  auto text = [&](const json& b) {
    auto r = post_as_is(kText, b.dump());
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return r ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : std::string();
  };
  const std::string first = text(body), second = text(body);
  EXPECT_NE(first, second) << "two unseeded sampled requests gave the same 24 tokens";
  EXPECT_NE(first, reference(Endpoint::kCompletions, body).text) << "the default is not greedy";
  json seeded = body;
  seeded["seed"] = 1234;
  EXPECT_EQ(text(seeded), text(seeded));  // the same seed reproduces
}

TEST_F(ServerTest, CompletionShapeAndLengthFinish) {
  start();
  json body = {{"prompt", "x"}, {"max_tokens", 3}, {"ignore_eos", true}};
  Reference ref = reference(Endpoint::kCompletions, body);
  ASSERT_EQ(ref.tokens.size(), 3u);
  json r = post_ok(kText, body);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["text"], ref.text);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
  EXPECT_EQ(r["usage"]["prompt_tokens"], ref.prompt_tokens);
}

TEST_F(ServerTest, StreamingMatchesNonStreaming) {
  start();
  for (const char* path : {kChat, kText}) {
    SCOPED_TRACE(path);
    bool chat = std::string(path) == kChat;
    json req = chat ? chat_body("hi", 12) : json{{"prompt", "hi"}, {"max_tokens", 12}};
    json whole = post_ok(path, req);
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    auto s = post(path, req.dump());
    ASSERT_TRUE(s);
    EXPECT_EQ(s->status, 200);
    EXPECT_NE(s->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    bool done = false;
    std::vector<json> events = testing::parse_sse(s->body, &done);
    EXPECT_TRUE(done);
    ASSERT_GE(events.size(), 2u);
    std::string text;
    std::string finish;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
      const json& c = events[i]["choices"][0];
      EXPECT_EQ(events[i]["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(events[i]["id"], events[0]["id"]);
      if (chat) {
        if (i == 0) { EXPECT_EQ(c["delta"]["role"], "assistant"); }
        if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      } else {
        text += c["text"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    const json& usage_chunk = events.back();
    EXPECT_TRUE(usage_chunk["choices"].empty());
    // The second request may reuse the first one's prefix: all but cached_tokens agree.
    for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"}) {
      EXPECT_EQ(usage_chunk["usage"][k], whole["usage"][k]) << k;
    }
    EXPECT_EQ(text, text_of(whole, chat));
    EXPECT_EQ(finish, whole["choices"][0]["finish_reason"]);
    EXPECT_GE(whole["usage"]["completion_tokens"].get<int>(), 1);
  }
}

// A stop string taken from the middle of `full` (whole UTF-8 characters, at least two bytes).
std::string stop_from_middle(const std::string& full) {
  std::size_t at = full.size() / 2;
  auto continuation = [&](std::size_t i) { return (static_cast<unsigned char>(full[i]) & 0xC0) == 0x80; };
  while (at > 0 && continuation(at)) --at;
  std::string stop = full.substr(at, 2);
  while (at + stop.size() < full.size() && continuation(at + stop.size())) stop += full[at + stop.size()];
  return stop;
}

TEST_F(ServerTest, StopStringsEndTheOutputAndCancel) {
  start();
  json body = {{"prompt", "one, two, three"}, {"max_tokens", 30}, {"ignore_eos", true}};
  std::string full = text_of(post_ok(kText, body), false);
  ASSERT_GE(full.size(), 8u) << full;
  std::string stop = stop_from_middle(full);
  body["stop"] = {"\x01never", stop};
  json r = post_ok(kText, body);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(eventually([&] { return engine_idle(); }));  // the rest was cancelled, not left running

  json chat = chat_body("x", 30);
  chat["ignore_eos"] = true;
  std::string chat_full = text_of(post_ok(kChat, chat), true);
  ASSERT_GE(chat_full.size(), 8u) << chat_full;
  std::string chat_stop = stop_from_middle(chat_full);
  chat["stop"] = chat_stop;
  chat["stream"] = true;
  auto s = post(kChat, chat.dump());
  ASSERT_TRUE(s);
  bool done = false;
  std::string text, finish;
  for (const json& e : testing::parse_sse(s->body, &done)) {
    const json& c = e["choices"][0];
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, chat_full.substr(0, chat_full.find(chat_stop)));
  EXPECT_EQ(finish, "stop");
}

TEST_F(ServerTest, LogprobsShapes) {
  start();
  json body = chat_body("x", 6);
  body["ignore_eos"] = true;  // six real tokens, none of them an end token
  Reference ref = reference(Endpoint::kChatCompletions, body);
  ASSERT_EQ(ref.tokens.size(), 6u);
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  json chat = post_ok(kChat, body);
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u);
  for (std::size_t i = 0; i < content.size(); ++i) {
    SCOPED_TRACE(i);
    const json& e = content[i];
    std::string piece = tokenizer().token_to_piece(ref.tokens[i]);
    std::string bytes;
    for (int b : e["bytes"]) bytes += static_cast<char>(b);
    EXPECT_EQ(bytes, piece);  // the entry is the token the engine generated
    float lp = e["logprob"].get<float>();
    EXPECT_LE(lp, 0.0f);
    const json& top = e["top_logprobs"];
    ASSERT_EQ(top.size(), 2u);
    EXPECT_GE(top[0]["logprob"].get<float>(), top[1]["logprob"].get<float>());  // sorted
    // Greedy picks the most likely token: the chosen one is the first alternative.
    EXPECT_EQ(top[0]["token"], e["token"]);
    EXPECT_FLOAT_EQ(top[0]["logprob"].get<float>(), lp);
  }

  json text_body = {{"prompt", "x"}, {"max_tokens", 5}, {"ignore_eos", true}};
  Reference text_ref = reference(Endpoint::kCompletions, text_body);
  text_body["logprobs"] = 1;
  json text = post_ok(kText, text_body);
  const json& lp = text["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  ASSERT_EQ(lp["text_offset"].size(), 5u);
  // Offsets count bytes of the output text (where a broken UTF-8 byte became U+FFFD), as the
  // server's TextStream lays it out.
  TextStream layout;
  for (std::size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(lp["text_offset"][i], layout.next_offset());
    if (i > 0) { EXPECT_GE(lp["text_offset"][i], lp["text_offset"][i - 1]); }
    EXPECT_LE(lp["text_offset"][i].get<std::size_t>(), text_ref.text.size());
    layout.push(tokenizer().token_to_piece(text_ref.tokens[i]));
    float chosen = lp["token_logprobs"][i].get<float>();
    EXPECT_LE(chosen, 0.0f);
    ASSERT_EQ(lp["top_logprobs"][i].size(), 1u);
    EXPECT_FLOAT_EQ(lp["top_logprobs"][i].begin().value().get<float>(), chosen);
    EXPECT_EQ(lp["top_logprobs"][i].begin().key(), lp["tokens"][i]);
  }
  EXPECT_EQ(text["choices"][0]["text"], text_ref.text);
}

TEST_F(ServerTest, BadInputsGetOpenAIErrorsAndServingContinues) {
  EngineOptions eo;
  eo.n_ctx = 256;
  start(eo, /*max_body=*/4096);
  using testing::expect_api_error;
  expect_api_error(post(kChat, "{not json"), 400, "malformed JSON");
  expect_api_error(post(kChat, R"({"messages": "x"})"), 400, "messages");
  expect_api_error(post(kChat, R"({"messages": [{"role": "king", "content": "x"}]})"), 400, "king");
  expect_api_error(post(kChat, R"({"messages": []})"), 400, "messages");
  // `model` is required, as in OpenAI's API; a name the server does not serve is a 404.
  expect_api_error(post_as_is(kChat, R"({"messages": [{"role": "user", "content": "x"}]})"), 400, "'model' is required");
  expect_api_error(post_as_is(kText, R"({"prompt": "x"})"), 400, "'model' is required");
  expect_api_error(post_as_is(kText, R"({"model": "", "prompt": "x"})"), 404, "does not exist");
  expect_api_error(post_as_is(kText, R"({"model": 7, "prompt": "x"})"), 400, "model");
  expect_api_error(post(kText, "{\"prompt\": \"\xFF\xFE\"}"), 400, "UTF-8");
  int vocab = backend_->model_info().n_vocab;
  expect_api_error(post(kText, json{{"prompt", {5, vocab}}}.dump()), 400, std::to_string(vocab));
  std::string words;
  for (int i = 0; i < 300; ++i) words += " w" + std::to_string(i);
  expect_api_error(post(kText, json{{"prompt", words}}.dump()), 400, "context");
  expect_api_error(post(kText, R"({"prompt": "a", "max_tokens": 100000})"), 400, "max_tokens");
  expect_api_error(post(kText, R"({"prompt": "a", "n": 9})"), 400, "'n'");  // above --max-n (8)
  expect_api_error(post(kText, "{\"prompt\": \"" + std::string(5000, 'a') + "\"}"), 413, "too large");
  expect_api_error(post("/v1/nope", "{}"), 404, "/v1/nope");
  expect_api_error(client_->Get(kChat), 405, "GET");
  expect_api_error(post("/health", "{}"), 405, "POST");
  json body = {{"prompt", "ok"}, {"max_tokens", 4}};
  json r = post_ok(kText, body);
  EXPECT_EQ(r["choices"][0]["text"], reference(Endpoint::kCompletions, body).text);
}

TEST_F(ServerTest, QueueZeroFillsTheBatchThenAnswers429) {
  // `kvstash serve --parallel 1 --queue 0`: one request runs, nothing waits, the next gets 429.
  EngineOptions eo;
  eo.max_running = 1;
  eo.max_queued = 1;  // as serve sets it: never the tighter bound
  start(eo, 8u << 20, /*max_active_requests=*/1);
  {
    testing::RawRequest running(
        server_->port(), kText,
        json{{"model", model_->config().name}, {"prompt", "x"}, {"stream", true}, {"max_tokens", 1900}, {"ignore_eos", true}}.dump());
    ASSERT_TRUE(eventually([&] { return engine_->stats().generated_tokens > 0; }));
    testing::expect_api_error(post(kText, R"({"prompt": "x"})"), 429, "capacity");
    testing::expect_api_error(post(kChat, chat_body("x", 4).dump()), 429, "capacity");
    auto s = post(kText, R"({"prompt": "x", "stream": true})");
    testing::expect_api_error(s, 429, "capacity");  // refused before any event is streamed
    EXPECT_NE(metrics_text().find("kvstash_requests_total{endpoint=\"/v1/completions\",status=\"429\"} 2"),
              std::string::npos) << metrics_text();
  }  // hangs up: the running request is cancelled and its slot freed
  EXPECT_TRUE(eventually([&] {
    auto r = post(kText, R"({"prompt": "x", "max_tokens": 2})");
    return r && r->status == 200;
  }));
}

TEST_F(ServerTest, DisconnectedStreamIsCancelled) {
  start();
  const int max_tokens = 1900;
  std::string got = testing::post_and_hang_up(
      server_->port(), kText, json{{"model", model_->config().name}, {"prompt", "x"}, {"stream", true}, {"max_tokens", max_tokens}, {"ignore_eos", true}}.dump(),
      300);
  EXPECT_NE(got.find("data: "), std::string::npos);
  // Bounded wait: the server notices on its next write and cancels.
  EXPECT_TRUE(eventually([&] { return engine_idle(); }));
  EXPECT_LT(engine_->stats().generated_tokens, max_tokens);
  post_ok(kText, {{"prompt", "x"}, {"max_tokens", 2}});
}

TEST_F(ServerTest, DisconnectedNonStreamingRequestIsCancelled) {
  start();
  const int max_tokens = 1900;
  {
    testing::RawRequest request(server_->port(), kText,
                                json{{"model", model_->config().name}, {"prompt", "x"}, {"max_tokens", max_tokens}, {"ignore_eos", true}}.dump());
    // Hang up once the engine is working on it: nothing has been written back yet.
    ASSERT_TRUE(eventually([&] { return engine_->stats().generated_tokens > 0; }));
  }
  EXPECT_TRUE(eventually([&] { return engine_idle(); }));
  EXPECT_LT(engine_->stats().generated_tokens, max_tokens);
  EXPECT_TRUE(eventually([&] {
    return metrics_text().find("kvstash_requests_total{endpoint=\"/v1/completions\",status=\"499\"} 1") !=
           std::string::npos;
  })) << metrics_text();
  post_ok(kText, {{"prompt", "x"}, {"max_tokens", 2}});
}

// The tiny model rewritten with a chat template that is neither ChatML nor Llama 3.
std::string model_with_template(const std::string& chat_template) {
  const std::string src = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
  auto file = gguf::File::open(src);
  EXPECT_TRUE(file) << file.status().to_string();
  if (!file) return "";
  gguf::Writer w;
  for (const auto& [key, value] : (*file)->metadata()) w.set(key, value);
  w.set("tokenizer.chat_template", gguf::Value::string(chat_template));
  for (const auto& t : (*file)->tensors()) EXPECT_TRUE(w.add_tensor(t.name, t.type, t.dims).is_ok());
  const std::string out = std::string(KVSTASH_BINARY_DIR) + "/test-models/tiny-f16-inst-template.gguf";
  Status st = w.write(out, [&](std::size_t i, std::span<std::uint8_t> bytes) {
    const auto& t = (*file)->tensors()[i];
    std::memcpy(bytes.data(), t.data, std::min<std::size_t>(bytes.size(), t.n_bytes));
    return Status::ok();
  });
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return out;
}

TEST(ServerCreate, UnusableTemplateFailsUnlessOverridden) {
  auto model = Model::load(model_with_template("{% include 'inst.jinja' %}[INST] {{ content }} [/INST]"));
  ASSERT_TRUE(model) << model.status().to_string();
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 1;
  auto engine = Engine::create(**model, eo);
  ASSERT_TRUE(engine) << engine.status().to_string();
  auto backend = make_engine_backend(**engine, "");
  ASSERT_EQ(backend->model_info().chat_template, "{% include 'inst.jinja' %}[INST] {{ content }} [/INST]");
  ServerOptions options;
  options.port = 0;
  options.log_requests = false;
  auto refused = Server::create(*backend, options);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("unsupported tag 'include'"), std::string::npos)
      << refused.status().message();
  options.chat_template = "chatml";
  EXPECT_TRUE(Server::create(*backend, options));
}

}  // namespace
}  // namespace kvstash::server
