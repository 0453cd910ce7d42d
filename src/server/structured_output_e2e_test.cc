// Structured outputs end to end: a real engine running the generated `tiny` model with Qwen2's
// 151,936-token vocabulary behind a real server; response_format posted over HTTP; every answer
// parsed with nlohmann-json and checked by an independent validator (grammar/test_support.h), at
// temperature 1 with random weights, where nothing but the grammar keeps the output valid.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "grammar/test_support.h"
#include "model/model.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/server.h"

namespace kvstash::server {
namespace {

using testing::json;
using ojson = nlohmann::ordered_json;

constexpr int kCtx = 1024;
const std::string kVocab = KVSTASH_SHARED_DIR "/vocab/ggml-vocab-qwen2.gguf";

// Nested objects, an array of enums, bounded integers, bounded strings, anyOf and a pattern.
const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 18, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
    "address": {"type": "object",
                "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "floor": {"type": "integer", "minimum": -2, "maximum": 40}},
                "required": ["zip", "floor"], "additionalProperties": false},
    "pet": {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"enum": ["cat", "dog"]}]}
  },
  "required": ["name", "age", "tags", "address", "pet"],
  "additionalProperties": false
})";

// How many sampled requests a test sends: all of them in the release and ASan passes, a fifth (at
// least 2) under ThreadSanitizer. There the same requests check for races; on a 2-vCPU VM they run
// about 35x slower than in the release build, which already proves every count's validity.
constexpr int scaled(int n) {
#if defined(__SANITIZE_THREAD__)
  return n / 5 > 2 ? n / 5 : 2;
#else
  return n;
#endif
}

class StructuredOutputE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::load(kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16, kVocab));
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
    eo.max_running = 8;
    eo.n_threads = 2;
    auto engine = Engine::create(*model_, eo);
    ASSERT_TRUE(engine) << engine.status().to_string();
    engine_ = std::move(*engine);
    backend_ = make_engine_backend(*engine_, "tiny-qwen");
    ServerOptions so;
    so.port = 0;
    so.log_requests = false;
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
  httplib::Result post(const json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(120, 0);
    return c.Post("/v1/chat/completions", testing::naming_model(body.dump(), "tiny-qwen"), "application/json");
  }
  static json chat(const json& response_format, double temperature, int seed) {
    return {{"messages", {{{"role", "user"}, {"content", "Describe a person as JSON."}}}},
            {"response_format", response_format},
            {"temperature", temperature},
            {"seed", seed},
            {"max_tokens", 600}};
  }

  static Model* model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GenerationBackend> backend_;
  std::unique_ptr<Server> server_;
};

Model* StructuredOutputE2ETest::model_ = nullptr;

TEST_F(StructuredOutputE2ETest, JsonSchemaOutputValidatesInEverySampledRequest) {
  const ojson schema = ojson::parse(kSchema);
  const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", json::parse(kSchema)}}}};
  // Four clients at once: the requests share one compiled grammar (its DFA and mask cache grow
  // under concurrent decoding) and run in one batch, as a server's users would.
  constexpr int kClients = 4;
  const int seeds = scaled(50);
  std::vector<std::string> failures[kClients];
  std::string first_key;
  // The server keeps the schema's property order (json sorts keys; the order of generation must
  // be the client's), so the body is sent with the schema text as written.
  const std::string sorted_schema = json::parse(kSchema).dump();
  const std::string written_schema = ojson::parse(kSchema).dump();
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k) {
    clients.emplace_back([&, k] {
      for (int seed = 1 + k; seed <= seeds; seed += kClients) {
        auto fail = [&](const std::string& why) { failures[k].push_back("seed " + std::to_string(seed) + ": " + why); };
        std::string body = chat(format, 1.0, seed).dump();
        body.replace(body.find(sorted_schema), sorted_schema.size(), written_schema);
        httplib::Client c("127.0.0.1", server_->port());
        c.set_read_timeout(300, 0);
        auto r = c.Post("/v1/chat/completions", testing::naming_model(body, "tiny-qwen"), "application/json");
        if (!r || r->status != 200) {
          fail(r ? "status " + std::to_string(r->status) + ": " + r->body : "no answer");
          continue;
        }
        // Not parse's exception: thrown in a client thread, it would end the test binary.
        const json response = json::parse(r->body, nullptr, false);
        if (response.is_discarded()) {
          fail("the answer is not JSON: " + r->body);
          continue;
        }
        if (response["choices"][0]["finish_reason"] != "stop") fail("finish_reason is not stop: " + r->body);
        const std::string content = response["choices"][0]["message"]["content"];
        const ojson value = ojson::parse(content, nullptr, false);
        std::string why;
        if (value.is_discarded()) {
          fail("not JSON: " + content);
        } else if (!grammar::test::validates(value, schema, schema, why)) {
          fail(why + " in " + content);
        } else if (seed == 1) {
          first_key = value.begin().key();
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (const auto& f : failures) {
    for (const std::string& why : f) ADD_FAILURE() << why;
  }
  EXPECT_EQ(first_key, "name");  // generated in the schema's order
}

TEST_F(StructuredOutputE2ETest, GreedyUnderASchemaIsValidAndRepeatable) {
  const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", json::parse(kSchema)}}}};
  auto a = post(chat(format, 0.0, 0));
  auto b = post(chat(format, 0.0, 0));
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->status, 200) << a->body;
  const std::string content = json::parse(a->body)["choices"][0]["message"]["content"];
  EXPECT_EQ(content, json::parse(b->body)["choices"][0]["message"]["content"].get<std::string>());
  const ojson schema = ojson::parse(kSchema);
  std::string why;
  EXPECT_TRUE(grammar::test::validates(ojson::parse(content), schema, schema, why)) << why << " in " << content;
  // Unconstrained, the same greedy request does not produce this JSON (random weights).
  json plain = chat(format, 0.0, 0);
  plain.erase("response_format");
  plain["max_tokens"] = 64;  // enough to differ; unconstrained, it would run to 600
  auto free = post(plain);
  ASSERT_TRUE(free);
  EXPECT_NE(json::parse(free->body)["choices"][0]["message"]["content"].get<std::string>(), content);
}

TEST_F(StructuredOutputE2ETest, StreamedAndCompletionsOutputsValidateToo) {
  const ojson schema = ojson::parse(kSchema);
  const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", json::parse(kSchema)}}}};
  for (int seed = 1; seed <= 3; ++seed) {
    json body = chat(format, 1.0, seed);
    body["stream"] = true;
    auto r = post(body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    bool done = false;
    std::string content, finish;
    for (const json& chunk : testing::parse_sse(r->body, &done)) {
      for (const json& choice : chunk.value("choices", json::array())) {
        if (choice.contains("delta") && choice["delta"].contains("content") && choice["delta"]["content"].is_string()) {
          content += choice["delta"]["content"].get<std::string>();
        }
        if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) finish = choice["finish_reason"];
      }
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(finish, "stop");
    std::string why;
    const ojson value = ojson::parse(content, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << content;
    EXPECT_TRUE(grammar::test::validates(value, schema, schema, why)) << why << " in " << content;
  }
  // /v1/completions takes the same field.
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(120, 0);
  const json completion = {{"prompt", "JSON:"}, {"response_format", format}, {"temperature", 1.0}, {"seed", 9}, {"max_tokens", 600}};
  auto r = c.Post("/v1/completions", testing::naming_model(completion.dump(), "tiny-qwen"), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string text = json::parse(r->body)["choices"][0]["text"];
  std::string why;
  EXPECT_TRUE(grammar::test::validates(ojson::parse(text), schema, schema, why)) << why << " in " << text;
}

TEST_F(StructuredOutputE2ETest, JsonObjectOutputParsesWhenItEnds) {
  int stopped = 0;
  for (int seed = 1; seed <= scaled(6); ++seed) {
    auto r = post(chat({{"type", "json_object"}}, 1.0, seed));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json response = json::parse(r->body);
    const std::string content = response["choices"][0]["message"]["content"];
    EXPECT_EQ(content.find_first_not_of(" \n"), content.find('{')) << content;  // an object from the start
    if (response["choices"][0]["finish_reason"] != "stop") continue;  // ran to max_tokens inside a long string
    ++stopped;
    EXPECT_TRUE(json::parse(content, nullptr, false).is_object()) << content;
  }
  EXPECT_GE(stopped, 1);
}

TEST_F(StructuredOutputE2ETest, UnsupportedSchemasAreRefusedNamingTheKeyword) {
  using testing::expect_api_error;
  const json date = {{"type", "object"}, {"properties", {{"when", {{"type", "string"}, {"format", "date"}}}}}};
  auto r = post(chat({{"type", "json_schema"}, {"json_schema", {{"name", "d"}, {"schema", date}}}}, 1.0, 1));
  expect_api_error(r, 400, "'format'");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "unsupported_schema");
  expect_api_error(post(chat({{"type", "json_schema"}, {"json_schema", {{"schema", date}}}}, 1.0, 1)), 400, "name");
  expect_api_error(post(chat({{"type", "xml"}}, 1.0, 1)), 400, "response_format.type");
  json ignore = chat({{"type", "json_object"}}, 1.0, 1);
  ignore["ignore_eos"] = true;
  expect_api_error(post(ignore), 400, "ignore_eos");
  // llama-server's top-level json_schema works the same way.
  json top = chat({{"type", "text"}}, 0.0, 0);
  top.erase("response_format");
  top["json_schema"] = {{"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", {"ok"}}};
  auto t = post(top);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  const json ok = json::parse(json::parse(t->body)["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_TRUE(ok["ok"].is_boolean());
}

TEST_F(StructuredOutputE2ETest, GbnfGrammarField) {
  using testing::expect_api_error;
  for (int seed = 1; seed <= 5; ++seed) {
    json body = chat({{"type", "text"}}, 1.0, seed);
    body.erase("response_format");
    body["grammar"] = "root ::= answer \".\"\nanswer ::= \"yes\" | \"no\" | [0-9]{1,3}";
    auto r = post(body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json response = json::parse(r->body);
    EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
    const std::string content = response["choices"][0]["message"]["content"];
    const std::string answer = content.substr(0, content.size() - 1);
    EXPECT_EQ(content.back(), '.') << content;
    EXPECT_TRUE(answer == "yes" || answer == "no" ||
                (!answer.empty() && answer.size() <= 3 && answer.find_first_not_of("0123456789") == std::string::npos))
        << content;
  }
  json bad = chat({{"type", "text"}}, 1.0, 1);
  bad.erase("response_format");
  bad["grammar"] = "root ::= \"a\"\nitem ::= missing";
  expect_api_error(post(bad), 400, "'missing' is used but never defined");
  bad["grammar"] = "root ::= \"a\"";
  bad["response_format"] = {{"type", "json_object"}};
  expect_api_error(post(bad), 400, "grammar");
}

}  // namespace
}  // namespace kvstash::server

namespace kvstash::server {
namespace {

// Two functions whose parameters the grammar enforces (bounded strings: a free string can run to
// max_tokens under random weights).
const char* kToolsText = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 12},
                  "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add", "description": "Adds two integers.",
   "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": -100, "maximum": 100},
                  "b": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a", "b"], "additionalProperties": false}}}
])";

// The declared function a call names, checked: its arguments validate against its parameters.
void expect_valid_call(const json& call, const std::string& context) {
  const ojson tools = ojson::parse(kToolsText);
  ASSERT_TRUE(call.contains("function")) << context;
  const std::string name = call["function"]["name"];
  const ojson* parameters = nullptr;
  for (const ojson& t : tools) {
    if (t["function"]["name"] == name) parameters = &t["function"]["parameters"];
  }
  ASSERT_NE(parameters, nullptr) << context << ": a call of an undeclared function " << name;
  const std::string arguments = call["function"]["arguments"];
  const ojson value = ojson::parse(arguments, nullptr, false);
  ASSERT_FALSE(value.is_discarded()) << context << ": arguments not JSON: " << arguments;
  std::string why;
  EXPECT_TRUE(grammar::test::validates(value, *parameters, *parameters, why)) << context << ": " << why << " in " << arguments;
}

std::string tools_body(const json& tool_choice, int seed, bool stream) {
  // The tools as text: their parameters' property order is kept.
  json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris, and 2 + 3?"}}}},
               {"temperature", 1.0}, {"seed", seed}, {"max_tokens", 300}, {"tool_choice", tool_choice}, {"stream", stream}};
  std::string text = body.dump();
  text.insert(text.size() - 1, ",\"tools\":" + ojson::parse(kToolsText).dump());
  return text;
}

// tool_choice "required" and a named choice (issue 33): every sampled answer at temperature 1 is a
// call of a declared function (the named one) whose arguments validate, finish_reason
// "tool_calls"; streamed, the deltas assemble to such a call too.
// The fixture's engine behind a new server with a published template of ../shared/templates.
void serve_with_template(std::unique_ptr<Server>& server, GenerationBackend& backend, const std::string& name) {
  server->stop();
  ServerOptions so;
  so.port = 0;
  so.log_requests = false;
  std::ifstream in(std::string(KVSTASH_SHARED_DIR) + "/templates/" + name);
  so.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  ASSERT_FALSE(so.chat_template.empty()) << name;
  auto created = Server::create(backend, so);
  ASSERT_TRUE(created) << created.status().to_string();
  server = std::move(*created);
  ASSERT_TRUE(server->start().is_ok());
}

// `seeds` sampled requests with tool_choice "required": each a call (or calls) of a declared
// function with valid arguments, finish_reason "tool_calls".
void expect_required_calls(httplib::Client& c, int seeds, const std::string& label) {
  for (int seed = 1; seed <= seeds; ++seed) {
    auto r = c.Post("/v1/chat/completions", testing::naming_model(tools_body("required", seed, false), "tiny-qwen"), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json response = json::parse(r->body);
    const json& choice = response["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << "seed " << seed << ": " << r->body;
    ASSERT_TRUE(choice["message"].contains("tool_calls")) << "seed " << seed << ": " << r->body;
    ASSERT_GE(choice["message"]["tool_calls"].size(), 1u) << r->body;
    for (const json& call : choice["message"]["tool_calls"]) expect_valid_call(call, label + ", seed " + std::to_string(seed));
  }
}

// `seeds` sampled requests naming `function`: exactly one call, of it, with valid arguments.
void expect_named_calls(httplib::Client& c, const std::string& function, int seeds, const std::string& label) {
  const json named = {{"type", "function"}, {"function", {{"name", function}}}};
  for (int seed = 1; seed <= seeds; ++seed) {
    auto r = c.Post("/v1/chat/completions", testing::naming_model(tools_body(named, seed, false), "tiny-qwen"), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json calls = json::parse(r->body)["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << "seed " << seed << ": " << r->body;
    EXPECT_EQ(calls[0]["function"]["name"], function) << r->body;
    expect_valid_call(calls[0], label + ", seed " + std::to_string(seed));
  }
}

TEST_F(StructuredOutputE2ETest, RequiredAndNamedToolChoicesAlwaysCallADeclaredFunctionWithValidArguments) {
  // Qwen2.5's published template: hermes calls.
  serve_with_template(server_, *backend_, "Qwen-Qwen2.5-7B-Instruct.jinja");
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(120, 0);
  expect_required_calls(c, scaled(20), "required");
  expect_named_calls(c, "add", scaled(20), "named");
  for (int seed = 1; seed <= 3; ++seed) {
    auto r = c.Post("/v1/chat/completions", testing::naming_model(tools_body("required", seed, true), "tiny-qwen"), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    bool done = false;
    std::map<int, json> calls;  // by index: id, name and the argument fragments joined
    std::string finish;
    for (const json& chunk : testing::parse_sse(r->body, &done)) {
      for (const json& choice : chunk.value("choices", json::array())) {
        if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) finish = choice["finish_reason"];
        if (!choice.contains("delta") || !choice["delta"].contains("tool_calls")) continue;
        for (const json& d : choice["delta"]["tool_calls"]) {
          json& call = calls[d["index"].get<int>()];
          if (d.contains("function") && d["function"].contains("name")) call["function"]["name"] = d["function"]["name"];
          const std::string piece = d.contains("function") ? d["function"].value("arguments", "") : "";
          call["function"]["arguments"] = call["function"].value("arguments", "") + piece;
        }
      }
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_FALSE(calls.empty()) << r->body;
    for (const auto& [index, call] : calls) expect_valid_call(call, "streamed, seed " + std::to_string(seed));
  }
  // A response_format beside a required choice (what agent SDKs send for an agent with an output
  // type): the call is enforced, as without the format.
  std::string both = tools_body("required", 1, false);
  both.insert(both.size() - 1, R"(,"response_format":{"type":"json_object"})");
  auto with_format = c.Post("/v1/chat/completions", testing::naming_model(both, "tiny-qwen"), "application/json");
  ASSERT_TRUE(with_format);
  ASSERT_EQ(with_format->status, 200) << with_format->body;
  const json answer = json::parse(with_format->body)["choices"][0];
  EXPECT_EQ(answer["finish_reason"], "tool_calls") << with_format->body;
  ASSERT_FALSE(answer["message"]["tool_calls"].empty()) << with_format->body;
  expect_valid_call(answer["message"]["tool_calls"][0], "required with a response_format");
}

// Llama 3.1's published template: the answer is the call's JSON ({"name", "parameters"}), calls
// joined by "; ". Required and named choices are enforced in that syntax too.
TEST_F(StructuredOutputE2ETest, RequiredToolChoiceInLlama31Syntax) {
  serve_with_template(server_, *backend_, "meta-llama-Llama-3.1-8B-Instruct.jinja");
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(120, 0);
  expect_required_calls(c, scaled(10), "llama3 required");
  expect_named_calls(c, "get_weather", scaled(5), "llama3 named");
}

// Mistral Nemo's template: [TOOL_CALLS] then a JSON list of calls (spelled in ordinary tokens here:
// Qwen2's vocabulary has no such control token, and the parser reads the text alike).
TEST_F(StructuredOutputE2ETest, RequiredToolChoiceInMistralSyntax) {
  serve_with_template(server_, *backend_, "mistralai-Mistral-Nemo-Instruct-2407.jinja");
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(120, 0);
  expect_named_calls(c, "get_weather", scaled(5), "mistral named");
}

// gpt-oss's calls are framed by control tokens the grammar does not write yet: a required choice
// is refused by name rather than left unenforced.
TEST_F(StructuredOutputE2ETest, RequiredToolChoiceThatCannotBeEnforcedIsRefused) {
  serve_with_template(server_, *backend_, "openai-gpt-oss-120b.jinja");
  httplib::Client c("127.0.0.1", server_->port());
  auto r = c.Post("/v1/chat/completions", testing::naming_model(tools_body("required", 1, false), "tiny-qwen"), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("tool_choice"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("gpt-oss"), std::string::npos) << r->body;
}

}  // namespace
}  // namespace kvstash::server
