// Tool calling over HTTP. Random weights never write a tool call, so the calls come from a
// scripted backend: a real server and real vocabularies (Qwen2's and Llama 3's from
// shared/vocab, with their published chat templates) in front of a backend that "generates" the
// tokens of a given model output. It also keeps the prompt it was given, so a test sees what the
// template made of the tools and the history. A last test runs the generated `tiny` model in a
// real engine with tools declared (the plumbing on real generation: random text stays content).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::server {
namespace {

using testing::json;
// Request bodies keep their keys in the order written (nlohmann::json would sort them), so that
// the tests see the server keep the client's order.
using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Answers every request with the tokens of `output` (special-token text becomes its token, as a
// model writes it), then stops; keeps the last prompt.
class ScriptedBackend final : public GenerationBackend {
 public:
  ScriptedBackend(const Tokenizer& tokenizer, std::string chat_template) {
    info_.id = "scripted";
    info_.tokenizer = &tokenizer;
    info_.n_vocab = static_cast<int>(tokenizer.vocab_size());
    info_.n_ctx = 8192;
    info_.chat_template = std::move(chat_template);
  }
  ~ScriptedBackend() override {
    for (std::thread& t : threads_) t.join();
  }
  void set_output(const std::string& output) {
    std::lock_guard<std::mutex> lock(mutex_);
    output_ = output;
  }
  std::string last_prompt() {
    std::lock_guard<std::mutex> lock(mutex_);
    return info_.tokenizer->decode(prompt_);
  }
  Expected<std::uint64_t> submit(GenerationRequest request, TokenCallback on_token) override {
    std::lock_guard<std::mutex> lock(mutex_);
    prompt_ = request.prompt;
    const std::vector<TokenId> tokens = info_.tokenizer->encode(output_, /*parse_special=*/true);
    const int prompt_tokens = static_cast<int>(request.prompt.size());
    // From another thread, after submit() returned, as the engine does.
    threads_.emplace_back([tokens, on_token, prompt_tokens] {
      for (TokenId t : tokens) {
        TokenEvent e;
        e.token = t;
        e.prompt_tokens = prompt_tokens;
        on_token(e);
      }
      TokenEvent last;
      last.finish = FinishReason::kStop;
      last.prompt_tokens = prompt_tokens;
      on_token(last);
    });
    return ++next_id_;
  }
  void cancel(std::uint64_t) override {}
  EngineStats stats() const override { return {}; }
  const ModelInfo& model_info() const override { return info_; }

 private:
  ModelInfo info_;
  std::mutex mutex_;
  std::string output_;
  std::vector<TokenId> prompt_;
  std::vector<std::thread> threads_;
  std::uint64_t next_id_ = 0;
};

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Current weather in a city.", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

// shared/vocab's Llama 3 vocabulary is 3.0's: Llama 3.1 named its reserved control token 128010
// <|python_tag|>. The same vocabulary with that name, written once (metadata only).
std::string llama31_vocab() {
  static const std::string path = [] {
    const std::string out = std::string(KVSTASH_BINARY_DIR) + "/llama31-vocab-tools-test.gguf";
    auto file = gguf::File::open(std::string(KVSTASH_SHARED_DIR) + "/vocab/ggml-vocab-llama-bpe.gguf");
    EXPECT_TRUE(file) << file.status().to_string();
    if (!file) return std::string();
    auto tokens = (*file)->get_string_array("tokenizer.ggml.tokens");
    EXPECT_TRUE(tokens);
    if (!tokens) return std::string();
    auto it = std::find(tokens->begin(), tokens->end(), "<|reserved_special_token_5|>");
    EXPECT_NE(it, tokens->end());
    if (it == tokens->end()) return std::string();
    *it = "<|python_tag|>";
    gguf::Writer w;
    for (const auto& [key, value] : (*file)->metadata()) w.set(key, value);
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array(*tokens));
    const Status st = w.write(out, [](std::size_t, std::span<std::uint8_t>) { return Status::ok(); });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
  }();
  return path;
}

class ToolCallsE2ETest : public ::testing::Test {
 protected:
  // A server with the vocabulary `vocab` (a file in shared/vocab, or a path) and the published
  // template `template_name`.
  void start(const std::string& vocab, const std::string& template_name) {
    auto file = gguf::File::open(vocab.find('/') != std::string::npos ? vocab
                                                                       : std::string(KVSTASH_SHARED_DIR) + "/vocab/" + vocab);
    ASSERT_TRUE(file) << file.status().to_string();
    file_ = std::move(*file);
    auto tok = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tok) << tok.status().to_string();
    tokenizer_ = std::move(*tok);
    const std::string tmpl = read_file(std::string(KVSTASH_SHARED_DIR) + "/templates/" + template_name);
    ASSERT_FALSE(tmpl.empty());
    backend_ = std::make_unique<ScriptedBackend>(*tokenizer_, tmpl);
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
  }
  httplib::Result post(const ojson& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30, 0);
    return c.Post("/v1/chat/completions", testing::naming_model(body.dump(), backend_->model_info().id), "application/json");
  }
  json post_ok(const ojson& body) {
    auto r = post(body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  static ojson ask(const std::string& question, ojson extra = ojson::object()) {
    ojson body = {{"messages", ojson::array({{{"role", "system"}, {"content", "You can call tools."}},
                                           {{"role", "user"}, {"content", question}}})},
                 {"tools", kTools}};
    body.update(extra);
    return body;
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ScriptedBackend> backend_;
  std::unique_ptr<Server> server_;
};

const std::string kHermesCall =
    "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

TEST_F(ToolCallsE2ETest, QwenCallAnswersWithToolCallsAndToolsReachThePrompt) {
  ASSERT_NO_FATAL_FAILURE(start("ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja"));
  backend_->set_output(kHermesCall);
  const json r = post_ok(ask("Weather in Paris?"));
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "I will check.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.dump();
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().size(), 9u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  // The template showed the model the tool, as Qwen's template writes it.
  EXPECT_NE(backend_->last_prompt().find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                                         "\"description\": \"Current weather in a city.\""),
            std::string::npos)
      << backend_->last_prompt();

  // The call and its result sent back: both reach the template (never dropped).
  ojson history = ask("Weather in Paris?");
  history["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({ojson::parse(call.dump())})}});
  history["messages"].push_back({{"role", "tool"}, {"tool_call_id", call["id"].get<std::string>()}, {"content", "{\"celsius\": 21}"}});
  backend_->set_output("It is 21 degrees.");
  const json answer = post_ok(history);
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "It is 21 degrees.");
  EXPECT_FALSE(answer["choices"][0]["message"].contains("tool_calls"));
  const std::string prompt = backend_->last_prompt();
  // (decoded: control tokens such as <|im_start|> show nothing)
  EXPECT_NE(prompt.find("Weather in Paris?\nassistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                        "{\"city\": \"Paris\"}}\n</tool_call>\nuser\n"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("user\n<tool_response>\n{\"celsius\": 21}\n</tool_response>\nassistant\n"),
            std::string::npos)
      << prompt;
}

TEST_F(ToolCallsE2ETest, QwenCallStreamsAsOpenAIDoes) {
  ASSERT_NO_FATAL_FAILURE(start("ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja"));
  backend_->set_output(kHermesCall);
  auto r = post(ask("Weather in Paris?", {{"stream", true}}));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  bool done = false;
  const std::vector<json> events = testing::parse_sse(r->body, &done);
  EXPECT_TRUE(done);
  std::string content, name, arguments, id, finish;
  int header_chunks = 0;
  for (const json& e : events) {
    const json& choice = e["choices"][0];
    const json& delta = choice["delta"];
    if (delta.contains("content")) {
      content += delta["content"].get<std::string>();
      EXPECT_EQ(delta["content"].get<std::string>().find("tool_call"), std::string::npos) << "markup leaked";
    }
    if (delta.contains("tool_calls")) {
      const json& tc = delta["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) {
        ++header_chunks;
        id = tc["id"];
        EXPECT_EQ(tc["type"], "function");
        name = tc["function"]["name"];
      }
      arguments += tc["function"]["arguments"].get<std::string>();
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, "I will check.");
  EXPECT_EQ(header_chunks, 1);
  EXPECT_EQ(id.size(), 9u);
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(json::parse(arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(ToolCallsE2ETest, ChoiceNoneAndMalformedCallsAreContent) {
  ASSERT_NO_FATAL_FAILURE(start("ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja"));
  backend_->set_output(kHermesCall);
  json r = post_ok(ask("Weather?", {{"tool_choice", "none"}}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["message"]["content"], kHermesCall);
  const std::string broken = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ";
  backend_->set_output(broken);
  for (bool stream : {false, true}) {
    auto res = post(ask("Weather?", {{"stream", stream}}));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    if (!stream) {
      r = json::parse(res->body);
      EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
      EXPECT_EQ(r["choices"][0]["message"]["content"], broken);
      continue;
    }
    bool done = false;
    std::string content;
    for (const json& e : testing::parse_sse(res->body, &done)) {
      EXPECT_FALSE(e["choices"][0]["delta"].contains("tool_calls"));
      if (e["choices"][0]["delta"].contains("content")) content += e["choices"][0]["delta"]["content"].get<std::string>();
    }
    EXPECT_EQ(content, broken);
  }
}

TEST_F(ToolCallsE2ETest, RequestErrorsNameTheField) {
  ASSERT_NO_FATAL_FAILURE(start("ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja"));
  ojson bad = ask("x");
  bad["tools"][0]["function"]["name"] = "no spaces allowed";
  testing::expect_api_error(post(bad), 400, "tools[0].function.name");
  testing::expect_api_error(post(ask("x", ojson{{"tool_choice", {{"type", "function"}, {"function", {{"name", "other"}}}}}})), 400,
                            "not in 'tools'");
  ojson history = ask("x");
  history["messages"].push_back({{"role", "tool"}, {"content", "21"}});
  testing::expect_api_error(post(history), 400, "messages[2].tool_call_id");
}

// Llama 3.1: its control token <|python_tag|> renders as nothing in text, yet the parser sees it.
TEST_F(ToolCallsE2ETest, Llama31PythonTagCall) {
  ASSERT_NO_FATAL_FAILURE(start(llama31_vocab(), "meta-llama-Llama-3.1-8B-Instruct.jinja"));
  const std::optional<TokenId> tag = tokenizer_->find_token("<|python_tag|>");
  ASSERT_TRUE(tag);
  EXPECT_EQ(tokenizer_->token_to_piece(*tag), "");  // a control token: shows nothing as text
  // Text first: only the tag, which the output must show to the parser, makes this a call.
  backend_->set_output("Calling.<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
  const json r = post_ok(ask("Weather in Rome?"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Calling.");
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(json::parse(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Rome"}}));
  // Llama 3.1's template shows the tools in JSON with its instructions.
  EXPECT_NE(backend_->last_prompt().find("\"name\": \"get_weather\""), std::string::npos);
  // Without tools the same output is plain text (the control token shows nothing).
  ojson plain = ask("Weather in Rome?");
  plain.erase("tools");
  const json p = post_ok(plain);
  EXPECT_EQ(p["choices"][0]["message"]["content"], "Calling.{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
}

// Mistral Nemo: a [TOOL_CALLS] list becomes calls whose ids (9 letters and digits) its template
// accepts when the call and its result come back (it refuses any other length).
TEST_F(ToolCallsE2ETest, MistralCallRoundTripsThroughNemoTemplate) {
  ASSERT_NO_FATAL_FAILURE(start("ggml-vocab-llama-spm.gguf", "mistralai-Mistral-Nemo-Instruct-2407.jinja"));
  backend_->set_output("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]");
  ojson body = {{"messages", ojson::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})}, {"tools", kTools}};
  const json r = post_ok(body);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u);
  const json call = r["choices"][0]["message"]["tool_calls"][0];
  const std::string id = call["id"];
  EXPECT_NE(backend_->last_prompt().find("[AVAILABLE_TOOLS]"), std::string::npos);
  body["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({ojson::parse(call.dump())})}});
  body["messages"].push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "21"}});
  backend_->set_output("21 degrees.");
  const json answer = post_ok(body);
  // (SentencePiece encodes the scripted text with its leading space)
  EXPECT_EQ(answer["choices"][0]["message"]["content"], " 21 degrees.");
  const std::string prompt = backend_->last_prompt();
  EXPECT_NE(prompt.find("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"" + id +
                        "\"}]"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("[TOOL_RESULTS]{\"content\": 21, \"call_id\": \"" + id + "\"}[/TOOL_RESULTS]"), std::string::npos)
      << prompt;
}

// A template that never reads `tools` would drop them: refused by name.
TEST_F(ToolCallsE2ETest, TemplateWithoutToolsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(start("ggml-vocab-llama-spm.gguf", "google-gemma-2-2b-it.jinja"));
  ojson body = {{"messages", ojson::array({{{"role", "user"}, {"content", "x"}}})}, {"tools", kTools}};
  testing::expect_api_error(post(body), 400, "does not present tools");
  body["tool_choice"] = "none";
  testing::expect_api_error(post(body), 400, "does not present tools");
}

// The generated model in a real engine: the tools lengthen the prompt, and its random output
// comes back as a valid answer (content, or calls if it ever wrote one).
TEST(ToolCallsEngineE2E, GeneratedModelWithToolsDeclared) {
  auto model = Model::load(kvstash::testing::test_model_path("tiny"));
  ASSERT_TRUE(model) << model.status().to_string();
  EngineOptions eo;
  eo.n_ctx = 2048;
  eo.n_threads = 2;
  auto engine = Engine::create(**model, eo);
  ASSERT_TRUE(engine) << engine.status().to_string();
  auto backend = make_engine_backend(**engine, "tiny-tools");
  ServerOptions so;
  so.port = 0;
  so.log_requests = false;
  so.chat_template = read_file(std::string(KVSTASH_SHARED_DIR) + "/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  auto server = Server::create(*backend, so);
  ASSERT_TRUE(server) << server.status().to_string();
  ASSERT_TRUE((*server)->start().is_ok());
  httplib::Client c("127.0.0.1", (*server)->port());
  c.set_read_timeout(60, 0);
  ojson body = {{"messages", ojson::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
               {"max_tokens", 8}, {"temperature", 0}};
  auto plain = c.Post("/v1/chat/completions", testing::naming_model(body.dump(), "tiny-tools"), "application/json");
  body["tools"] = kTools;
  auto with_tools = c.Post("/v1/chat/completions", testing::naming_model(body.dump(), "tiny-tools"), "application/json");
  ASSERT_TRUE(plain && with_tools);
  ASSERT_EQ(plain->status, 200) << plain->body;
  ASSERT_EQ(with_tools->status, 200) << with_tools->body;
  const json a = json::parse(plain->body), b = json::parse(with_tools->body);
  EXPECT_GT(b["usage"]["prompt_tokens"].get<int>(), a["usage"]["prompt_tokens"].get<int>() + 50);
  const json& message = b["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_string() || message.contains("tool_calls")) << b.dump();
  (*server)->stop();
}

}  // namespace
}  // namespace kvstash::server
