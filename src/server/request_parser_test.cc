#include "server/request_parser.h"

#include <gtest/gtest.h>

#include "server/prompt_builder.h"
#include "server/test_fakes.h"

namespace kvstash::server {
namespace {

ApiError expect_error(Endpoint ep, const std::string& body) {
  ParsedRequest r;
  std::optional<ApiError> err = parse_request(ep, body, r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError{});
}

constexpr Endpoint kChat = Endpoint::kChatCompletions;
constexpr Endpoint kText = Endpoint::kCompletions;

TEST(RequestParser, ParsesAFullChatRequest) {
  ParsedRequest r;
  auto err = parse_request(kChat, R"({
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
}

TEST(RequestParser, ParsesCompletionPrompts) {
  ParsedRequest r;
  ASSERT_FALSE(parse_request(kText, R"({"prompt": "hello", "stop": "\n", "logprobs": 3})", r));
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  ASSERT_FALSE(parse_request(kText, R"({"prompt": [1, 2, 3]})", r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<TokenId>{1, 2, 3}));
}

TEST(RequestParser, RejectsMalformedJsonAndNonObjects) {
  EXPECT_EQ(expect_error(kChat, "{\"messages\": [").code, "invalid_json");
  EXPECT_NE(expect_error(kChat, "{oops}").message.find("malformed JSON"), std::string::npos);
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
  EXPECT_EQ(expect_error(kChat, with(R"("n": 2)")).param, "n");
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
  ASSERT_FALSE(parse_request(kChat, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": null,
                                        "stop": null, "temperature": null})", r));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
}

class PromptBuilderTest : public ::testing::Test {
 protected:
  testing::FakeBackend backend{"unused", /*n_ctx=*/64};
  const ModelInfo& info = backend.model_info();

  std::optional<ApiError> build(Endpoint ep, const std::string& body, GenerationRequest& out) {
    ParsedRequest r;
    auto err = parse_request(ep, body, r);
    EXPECT_FALSE(err) << body;
    return build_generation_request(r, info, ChatTemplateKind::kChatML, out);
  }
};

TEST_F(PromptBuilderTest, ChatPromptIsTemplatedWithBosAndEndToken) {
  GenerationRequest g;
  ASSERT_FALSE(build(kChat, R"({"messages": [{"role": "user", "content": "hi"}], "cache_salt": "s", "seed": 9})", g));
  using T = testing::FakeTokenizer;
  std::vector<TokenId> want = {T::kBos, T::kImStart, 'u', 's', 'e', 'r', '\n', 'h', 'i', T::kImEnd, '\n',
                               T::kImStart, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n'};
  EXPECT_EQ(g.prompt, want);
  EXPECT_EQ(g.stop_tokens, std::vector<TokenId>{T::kImEnd});
  EXPECT_EQ(g.cache_salt, "s");
  EXPECT_EQ(g.sampling.seed, 9u);
  EXPECT_EQ(g.max_tokens, 64 - static_cast<int>(want.size()));  // the rest of the context (< 256)
}

TEST_F(PromptBuilderTest, PlainPromptDoesNotParseSpecialTokens) {
  GenerationRequest g;
  ASSERT_FALSE(build(kText, R"({"prompt": "<s>", "max_tokens": 3})", g));
  EXPECT_EQ(g.prompt, (std::vector<TokenId>{testing::FakeTokenizer::kBos, '<', 's', '>'}));
  EXPECT_EQ(g.max_tokens, 3);
}

TEST_F(PromptBuilderTest, TokenPromptsAreRangeChecked) {
  GenerationRequest g;
  ASSERT_FALSE(build(kText, R"({"prompt": [1, 259]})", g));
  EXPECT_EQ(g.prompt, (std::vector<TokenId>{1, 259}));
  auto err = build(kText, R"({"prompt": [1, 260]})", g);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "invalid_token");
  EXPECT_NE(err->message.find("260"), std::string::npos);
}

TEST_F(PromptBuilderTest, ContextLimits) {
  GenerationRequest g;
  auto too_long = build(kText, "{\"prompt\": \"" + std::string(100, 'a') + "\"}", g);
  ASSERT_TRUE(too_long);
  EXPECT_EQ(too_long->code, "context_length_exceeded");
  EXPECT_EQ(too_long->param, "prompt");
  auto too_many = build(kText, R"({"prompt": "abc", "max_tokens": 61})", g);  // 4 prompt tokens + 61 > 64
  ASSERT_TRUE(too_many);
  EXPECT_EQ(too_many->param, "max_tokens");
  EXPECT_FALSE(build(kText, R"({"prompt": "abc", "max_tokens": 60})", g));
}

}  // namespace
}  // namespace kvstash::server
