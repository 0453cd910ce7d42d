#include "server/request_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "gguf/gguf.h"
#include "server/http_test_util.h"
#include "server/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::server {
namespace {

// OpenAI requires `model`: the tests not about it name one (testing::naming_model).
std::optional<ApiError> parse_named(Endpoint endpoint, const std::string& body, ParsedRequest& out) {
  return parse_request(endpoint, testing::naming_model(body, "m"), out);
}

ApiError expect_error(Endpoint ep, const std::string& body) {
  ParsedRequest r;
  std::optional<ApiError> err = parse_named(ep, body, r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError{});
}

constexpr Endpoint kChat = Endpoint::kChatCompletions;
constexpr Endpoint kText = Endpoint::kCompletions;

TEST(RequestParser, ParsesAFullChatRequest) {
  ParsedRequest r;
  auto err = parse_named(kChat, R"({
    "model": "m", "messages": [{"role": "system", "content": "S"},
                               {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
    "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 3,
    "stop": ["x", "y"], "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 2, "cache_salt": "tenant", "n": 1, "presence_penalty": 0})", r);
  ASSERT_FALSE(err) << err->message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.seed, 3u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.cache_salt, "tenant");
  EXPECT_FALSE(r.ignore_eos);
  ASSERT_FALSE(parse_named(kChat, R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": true})", r));
  EXPECT_TRUE(r.ignore_eos);
}

TEST(RequestParser, ParsesCompletionPrompts) {
  ParsedRequest r;
  ASSERT_FALSE(parse_named(kText, R"({"prompt": "hello", "stop": "\n", "logprobs": 3})", r));
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  ASSERT_FALSE(parse_named(kText, R"({"prompt": [1, 2, 3]})", r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<TokenId>{1, 2, 3}));
}

TEST(RequestParser, RejectsMalformedJsonAndNonObjects) {
  EXPECT_EQ(expect_error(kChat, "{\"messages\": [").code, "invalid_json");
  EXPECT_NE(expect_error(kChat, "{oops}").message.find("malformed JSON"), std::string::npos);
  // Where and why, without the JSON library's internals ("[json.exception.parse_error.101]").
  for (const char* body : {"{oops}", "{\"a\": 1e400}", "[1, 2"}) {
    const std::string message = expect_error(kChat, body).message;
    EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
    EXPECT_NE(message.find("JSON"), std::string::npos) << message;
  }
  EXPECT_EQ(expect_error(kChat, "[1,2]").code, "invalid_json");
}

TEST(RequestParser, RejectsInvalidUtf8) {
  ApiError e = expect_error(kChat, "{\"messages\": [{\"role\": \"user\", \"content\": \"\xC3\x28\"}]}");
  EXPECT_EQ(e.code, "invalid_utf8");
  EXPECT_NE(e.message.find("UTF-8"), std::string::npos);
  EXPECT_EQ(expect_error(kText, R"({"prompt": "\ud800"})").code, "invalid_utf8");  // lone surrogate
}

TEST(RequestParser, RejectsWrongTypesNamingTheField) {
  struct Case {
    Endpoint ep;
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {kChat, R"({"messages": "hi"})", "messages"},
      {kChat, R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {kChat, R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
      {kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].type"},
      {kChat, R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {kChat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})", "max_tokens"},
      {kChat, R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {kChat, R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop[0]"},
      {kChat, R"({"messages": [{"role": "user", "content": "x"}], "cache_salt": 7})", "cache_salt"},
      {kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {kText, R"({"prompt": 12})", "prompt"},
      {kText, R"({"prompt": [1, "a"]})", "prompt"},
      {kText, R"({"prompt": [1, 2.5]})", "prompt[1]"},
      {kText, R"({"prompt": "x", "model": 3})", "model"},
      {kText, R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
  };
  for (const Case& c : cases) {
    ApiError e = expect_error(c.ep, c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message;
  }
}

TEST(RequestParser, RejectsBadValues) {
  EXPECT_EQ(expect_error(kChat, R"({"messages": []})").code, "empty_messages");
  EXPECT_EQ(expect_error(kChat, R"({})").code, "missing_field");
  ApiError role = expect_error(kChat, R"({"messages": [{"role": "wizard", "content": "x"}]})");
  EXPECT_EQ(role.code, "invalid_role");
  EXPECT_NE(role.message.find("wizard"), std::string::npos);
  const char* msg = R"("messages": [{"role": "user", "content": "x"}])";
  auto with = [&](const std::string& extra) { return "{" + std::string(msg) + ", " + extra + "}"; };
  EXPECT_EQ(expect_error(kChat, with(R"("temperature": 2.5)")).param, "temperature");
  EXPECT_EQ(expect_error(kChat, with(R"("temperature": -0.1)")).param, "temperature");
  EXPECT_EQ(expect_error(kChat, with(R"("top_p": 0)")).param, "top_p");
  EXPECT_EQ(expect_error(kChat, with(R"("top_k": -1)")).param, "top_k");
  EXPECT_EQ(expect_error(kChat, with(R"("max_tokens": 0)")).param, "max_tokens");
  EXPECT_EQ(expect_error(kChat, with(R"("max_completion_tokens": -5)")).param, "max_completion_tokens");
  EXPECT_EQ(expect_error(kChat, with(R"("n": 0)")).param, "n");
  EXPECT_EQ(expect_error(kChat, with(R"("stop": ["a","b","c","d","e"])")).param, "stop");
  EXPECT_EQ(expect_error(kChat, with(R"("top_logprobs": 3)")).param, "top_logprobs");  // without logprobs
  EXPECT_EQ(expect_error(kChat, with(R"("logprobs": true, "top_logprobs": 21)")).param, "top_logprobs");
  EXPECT_EQ(expect_error(kText, R"({"prompt": ["a", "b"]})").code, "unsupported_batch");
  EXPECT_EQ(expect_error(kText, R"({"prompt": [[1, 2]]})").code, "unsupported_batch");
  EXPECT_EQ(expect_error(kText, R"({"prompt": []})").code, "empty_prompt");
  EXPECT_EQ(expect_error(kText, R"({"prompt": [-1]})").code, "invalid_token");
  EXPECT_EQ(expect_error(kText, R"({"prompt": "x", "logprobs": 30})").param, "logprobs");
}

TEST(RequestParser, NullMeansAbsent) {
  ParsedRequest r;
  ASSERT_FALSE(parse_named(kChat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": null,
                                        "stop": null, "temperature": null})", r));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);  // OpenAI's default
}

TEST(RequestParser, OpenAISamplingDefaults) {
  ParsedRequest a, b, seeded;
  const char* body = R"({"prompt": "x"})";
  ASSERT_FALSE(parse_named(kText, body, a));
  ASSERT_FALSE(parse_named(kText, body, b));
  EXPECT_FLOAT_EQ(a.sampling.temperature, 1.0f);
  EXPECT_NE(a.sampling.seed, b.sampling.seed);  // each unseeded request draws its own
  ASSERT_FALSE(parse_named(kText, R"({"prompt": "x", "seed": 42})", seeded));
  EXPECT_EQ(seeded.sampling.seed, 42u);
}

// The prompt builder with a real tokenizer: Qwen2's vocabulary (ChatML special tokens).
class PromptBuilderTest : public ::testing::Test {
 protected:
  static constexpr int kCtx = 64;

  static void SetUpTestSuite() {
    auto file = gguf::File::open(std::string(KVSTASH_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf");
    ASSERT_TRUE(file) << file.status().to_string();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok) << tok.status().to_string();
    tokenizer_ = std::move(*tok).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(tokenizer_, nullptr);
    info.id = "qwen2-vocab";
    info.tokenizer = tokenizer_;
    info.n_vocab = static_cast<int>(tokenizer_->vocab_size());
    info.n_ctx = kCtx;
    info.chat_template = tokenizer_->chat_template();
  }

  std::optional<ApiError> build(Endpoint ep, const std::string& body, GenerationRequest& out) {
    ParsedRequest r;
    auto err = parse_named(ep, body, r);
    EXPECT_FALSE(err) << body;
    return build_generation_request(r, info, ChatTemplateKind::kChatML, out);
  }
  // What a prompt must start with: BOS when the vocabulary asks for it.
  std::vector<TokenId> with_bos(const std::vector<TokenId>& ids) const {
    std::vector<TokenId> out;
    if (tokenizer_->add_bos() && tokenizer_->bos_id() >= 0) out.push_back(tokenizer_->bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }
  TokenId special(const char* text) const {
    std::optional<TokenId> id = tokenizer_->find_token(text);
    EXPECT_TRUE(id.has_value()) << text;
    return id.value_or(-1);
  }

  static Tokenizer* tokenizer_;
  ModelInfo info;
};

Tokenizer* PromptBuilderTest::tokenizer_ = nullptr;

TEST_F(PromptBuilderTest, ChatPromptIsTemplatedWithBosAndEndToken) {
  GenerationRequest g;
  ASSERT_FALSE(build(kChat, R"({"messages": [{"role": "user", "content": "hi"}], "cache_salt": "s", "seed": 9})", g));
  const TokenId im_start = special("<|im_start|>"), im_end = special("<|im_end|>");
  std::vector<TokenId> want = with_bos({im_start});
  for (TokenId t : tokenizer_->encode("user\nhi", false)) want.push_back(t);
  want.push_back(im_end);
  for (TokenId t : tokenizer_->encode("\n", false)) want.push_back(t);
  want.push_back(im_start);
  for (TokenId t : tokenizer_->encode("assistant\n", false)) want.push_back(t);
  EXPECT_EQ(g.prompt, want);
  EXPECT_EQ(tokenizer_->decode(g.prompt), "user\nhi\nassistant\n");  // control tokens decode to nothing
  EXPECT_EQ(g.stop_tokens, std::vector<TokenId>{im_end});
  EXPECT_TRUE(g.stop_at_end_of_generation);
  EXPECT_EQ(g.cache_salt, "s");
  EXPECT_EQ(g.sampling.seed, 9u);
  EXPECT_EQ(g.max_tokens, kCtx - static_cast<int>(want.size()));  // the rest of the context (< 256)
}

TEST_F(PromptBuilderTest, PlainPromptDoesNotParseSpecialTokens) {
  GenerationRequest g;
  ASSERT_FALSE(build(kText, R"({"prompt": "<|im_start|>", "max_tokens": 3})", g));
  // Parsed as special it would be the one token; as plain text it is several ordinary ones.
  ASSERT_EQ(tokenizer_->encode("<|im_start|>", true), std::vector<TokenId>{special("<|im_start|>")});
  EXPECT_EQ(g.prompt, with_bos(tokenizer_->encode("<|im_start|>", false)));
  EXPECT_GT(g.prompt.size(), with_bos({}).size() + 1);
  EXPECT_EQ(std::count(g.prompt.begin(), g.prompt.end(), special("<|im_start|>")), 0);
  EXPECT_EQ(g.max_tokens, 3);
  EXPECT_TRUE(g.stop_tokens.empty());
}

TEST_F(PromptBuilderTest, TokenPromptsAreRangeChecked) {
  GenerationRequest g;
  const int last = info.n_vocab - 1;
  ASSERT_FALSE(build(kText, "{\"prompt\": [1, " + std::to_string(last) + "]}", g));
  EXPECT_EQ(g.prompt, (std::vector<TokenId>{1, last}));  // taken as given: no BOS added
  auto err = build(kText, "{\"prompt\": [1, " + std::to_string(info.n_vocab) + "]}", g);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "invalid_token");
  EXPECT_NE(err->message.find(std::to_string(info.n_vocab)), std::string::npos) << err->message;
}

TEST_F(PromptBuilderTest, ContextLimits) {
  GenerationRequest g;
  std::string words;
  for (int i = 0; i < kCtx; ++i) words += " w" + std::to_string(i);
  ASSERT_GE(tokenizer_->encode(words, false).size(), static_cast<std::size_t>(kCtx));
  auto too_long = build(kText, "{\"prompt\": \"" + words + "\"}", g);
  ASSERT_TRUE(too_long);
  EXPECT_EQ(too_long->code, "context_length_exceeded");
  EXPECT_EQ(too_long->param, "prompt");
  const int n = static_cast<int>(with_bos(tokenizer_->encode("abc", false)).size());
  auto too_many = build(kText, "{\"prompt\": \"abc\", \"max_tokens\": " + std::to_string(kCtx - n + 1) + "}", g);
  ASSERT_TRUE(too_many);
  EXPECT_EQ(too_many->param, "max_tokens");
  EXPECT_FALSE(build(kText, "{\"prompt\": \"abc\", \"max_tokens\": " + std::to_string(kCtx - n) + "}", g));
  EXPECT_EQ(static_cast<int>(g.prompt.size()) + g.max_tokens, kCtx);
}

TEST_F(PromptBuilderTest, IgnoreEosGeneratesThroughEndTokens) {
  GenerationRequest g;
  ASSERT_FALSE(build(kChat, R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": true})", g));
  EXPECT_FALSE(g.stop_at_end_of_generation);
  EXPECT_TRUE(g.stop_tokens.empty());  // not even the template's <|im_end|>
  ASSERT_FALSE(build(kText, R"({"prompt": "x", "ignore_eos": false})", g));
  EXPECT_TRUE(g.stop_at_end_of_generation);
}

TEST(RequestParserTest, ModelIsRequiredAsOpenAIRequiresIt) {
  for (Endpoint ep : {kChat, kText}) {
    ParsedRequest r;
    const std::string body = ep == kChat ? R"({"messages": [{"role": "user", "content": "x"}]})" : R"({"prompt": "x"})";
    auto err = parse_request(ep, body, r);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->http_status, 400);
    EXPECT_EQ(err->param, "model");
    EXPECT_NE(err->message.find("'model' is required"), std::string::npos) << err->message;
    EXPECT_FALSE(parse_request(ep, testing::naming_model(body, "any-name"), r));  // the server checks the name
    EXPECT_EQ(r.model, "any-name");
  }
}

TEST_F(PromptBuilderTest, KvBudgetFieldIsPassedOnAndRangeChecked) {
  GenerationRequest g;
  ASSERT_FALSE(build(kText, R"({"prompt": "x", "kv_budget": 512})", g));
  EXPECT_EQ(g.kv_budget, 512);
  ASSERT_FALSE(build(kText, R"({"prompt": "x"})", g));
  EXPECT_EQ(g.kv_budget, -1);
  ParsedRequest r;
  auto bad = parse_named(kText, R"({"prompt": "x", "kv_budget": -5})", r);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->param, "kv_budget");
  EXPECT_TRUE(parse_named(kText, R"({"prompt": "x", "kv_budget": "lots"})", r));
}

}  // namespace
}  // namespace kvstash::server
