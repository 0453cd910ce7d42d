// The sampling knobs of issue 33 in the request parser: parsed into SamplingParams, range-checked
// (OpenAI's ranges, llama-server's where OpenAI has none), unimplemented samplers refused by
// name, output-neutral and unknown fields accepted.
#include <gtest/gtest.h>

#include "server/request_parser.h"
#include "server/http_test_util.h"

namespace kvstash::server {
namespace {

// OpenAI requires `model`: the tests not about it name one (testing::naming_model).
std::optional<ApiError> parse_named(Endpoint endpoint, const std::string& body, ParsedRequest& out) {
  return parse_request(endpoint, testing::naming_model(body, "m"), out);
}

constexpr Endpoint kChat = Endpoint::kChatCompletions;

std::string chat(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}";
}

ApiError error_of(const std::string& body) {
  ParsedRequest r;
  std::optional<ApiError> err = parse_named(kChat, body, r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError{});
}

TEST(RequestParserKnobs, ParsesEveryKnob) {
  ParsedRequest r;
  auto err = parse_named(kChat, chat(R"("logit_bias": {"50": -100, "7": 2.5, "1000": 100}, "presence_penalty": 0.5,
      "frequency_penalty": -1, "repetition_penalty": 1.1, "repeat_last_n": 32, "min_p": 0.05, "typical_p": 0.9, "top_n_sigma": 1.5,
      "user": "u1", "metadata": {"a": "b"}, "store": false, "foo_bar": 3, "mirostat": 0)"), r);
  ASSERT_FALSE(err) << err->message;
  const SamplingParams& s = r.sampling;
  EXPECT_EQ(s.logit_bias, (std::vector<std::pair<TokenId, float>>{{7, 2.5f}, {50, -100.0f}, {1000, 100.0f}}));
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_EQ(s.repeat_last_n, 32);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.typical_p, 0.9f);
  EXPECT_FLOAT_EQ(s.top_n_sigma, 1.5f);
  // llama-server's spellings: [[id, bias]] with false as a ban, repeat_penalty.
  ASSERT_FALSE(parse_named(kChat, chat(R"("logit_bias": [[3, false], [9, 1.5]], "repeat_penalty": 1.2)"), r));
  EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<TokenId, float>>{{3, -100.0f}, {9, 1.5f}}));
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.2f);
  // Defaults: every knob off.
  ASSERT_FALSE(parse_named(kChat, chat(R"("seed": 1)"), r));
  EXPECT_TRUE(r.sampling.logit_bias.empty());
  EXPECT_EQ(r.sampling.presence_penalty, 0.0f);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_EQ(r.sampling.typical_p, 1.0f);
}

TEST(RequestParserKnobs, RangesAreChecked) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("presence_penalty": 2.5)", "presence_penalty"},
      {R"("frequency_penalty": -2.01)", "frequency_penalty"},
      {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("repeat_penalty": -1)", "repeat_penalty"},
      {R"("repeat_last_n": -2)", "repeat_last_n"},
      {R"("min_p": 1.5)", "min_p"},
      {R"("typical_p": 0)", "typical_p"},
      {R"("top_n_sigma": 101)", "top_n_sigma"},
      {R"("logit_bias": {"5": 101})", "logit_bias.5"},
      {R"("logit_bias": {"abc": 1})", "logit_bias"},
      {R"("logit_bias": {"-3": 1})", "logit_bias.-3"},
      {R"("logit_bias": [[1]])", "logit_bias[0]"},
      {R"("logit_bias": 5)", "logit_bias"},
      {R"("repeat_penalty": 1.1, "repetition_penalty": 1.2)", "repeat_penalty"},
  };
  for (const auto& [extra, param] : cases) {
    ApiError e = error_of(chat(extra));
    EXPECT_EQ(e.http_status, 400) << extra;
    EXPECT_EQ(e.param, param) << extra << " -> " << e.message;
  }
}

TEST(RequestParserKnobs, UnimplementedSamplersAreRefusedByName) {
  for (const char* extra : {R"("mirostat": 2)", R"("dry_multiplier": 0.8)", R"("xtc_probability": 0.5)",
                            R"("tfs_z": 0.9)", R"("functions": [{"name": "f"}])"}) {
    ApiError e = error_of(chat(extra));
    EXPECT_EQ(e.code, "unsupported_parameter") << extra;
    EXPECT_NE(e.message.find(e.param), std::string::npos) << e.message;
    EXPECT_FALSE(e.param.empty());
  }
  // Their "off" values change nothing and are accepted.
  ParsedRequest r;
  EXPECT_FALSE(parse_named(kChat, chat(R"("mirostat": 0, "dry_multiplier": 0, "top_n_sigma": -1, "samplers": [])"), r));
  EXPECT_LT(r.sampling.top_n_sigma, 0.0f);
}

// kvstash_store_sync (the router's prefill hop, docs/router.md): a bool, off by default, not with
// stream, on completions too.
TEST(RequestParserKnobs, StoreSyncIsABoolForNonStreamedRequests) {
  ParsedRequest r;
  ASSERT_FALSE(parse_named(kChat, chat(R"("max_tokens": 1)"), r));
  EXPECT_FALSE(r.store_sync);
  ParsedRequest s;
  auto err = parse_named(kChat, chat(R"("kvstash_store_sync": true, "stream": false)"), s);
  ASSERT_FALSE(err) << err->message;
  EXPECT_TRUE(s.store_sync);
  ParsedRequest c;
  err = parse_named(Endpoint::kCompletions, R"({"prompt": "x", "kvstash_store_sync": true})", c);
  ASSERT_FALSE(err) << err->message;
  EXPECT_TRUE(c.store_sync);
  EXPECT_EQ(error_of(chat(R"("kvstash_store_sync": true, "stream": true)")).param, "kvstash_store_sync");
  EXPECT_EQ(error_of(chat(R"("kvstash_store_sync": 1)")).param, "kvstash_store_sync");
}

}  // namespace
}  // namespace kvstash::server
