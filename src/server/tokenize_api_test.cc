// POST /tokenize and /detokenize bodies against the SentencePiece and Llama 3 vocabularies.
#include "server/tokenize_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

Loaded load(const std::string& name) {
  Loaded l;
  auto file = gguf::File::open(KVSTASH_SHARED_DIR "/vocab/" + name);
  EXPECT_TRUE(file) << file.status().to_string();
  if (!file) return l;
  auto tok = Tokenizer::from_gguf(**file);
  EXPECT_TRUE(tok) << tok.status().to_string();
  if (!tok) return l;
  l.file = std::move(*file);
  l.tokenizer = std::move(*tok);
  return l;
}

json call(bool tokenize, const json& body, const Tokenizer& tok) {
  std::string out;
  auto err = tokenize ? tokenize_request(body.dump(), tok, &out) : detokenize_request(body.dump(), tok, &out);
  EXPECT_FALSE(err) << (err ? err->message : "");
  return err ? json() : json::parse(out);
}

TEST(TokenizeApi, SameIdsAsTheTokenizerWithAndWithoutBos) {
  Loaded spm = load("ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(spm.tokenizer);
  const Tokenizer& tok = *spm.tokenizer;
  const json plain = call(true, {{"content", "Hello world"}}, tok);
  EXPECT_EQ(plain["tokens"], json(tok.encode("Hello world", true)));
  const json with_bos = call(true, {{"content", "Hello world"}, {"add_special", true}}, tok);
  ASSERT_EQ(with_bos["tokens"].size(), plain["tokens"].size() + 1);
  EXPECT_EQ(with_bos["tokens"][0], tok.bos_id());
  // And back.
  EXPECT_EQ(call(false, {{"tokens", plain["tokens"]}}, tok)["content"], "Hello world");
}

TEST(TokenizeApi, PiecesAndSpecialTokens) {
  Loaded llama3 = load("ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(llama3.tokenizer);
  const Tokenizer& tok = *llama3.tokenizer;
  const json parsed = call(true, {{"content", "<|eot_id|>"}}, tok);
  EXPECT_EQ(parsed["tokens"], json::array({128009}));
  const json literal = call(true, {{"content", "<|eot_id|>"}, {"parse_special", false}}, tok);
  EXPECT_GT(literal["tokens"].size(), 1u);
  const json pieces = call(true, {{"content", "Hi there"}, {"with_pieces", true}}, tok);
  ASSERT_EQ(pieces["tokens"].size(), 2u);
  EXPECT_EQ(pieces["tokens"][1]["piece"], " there");
  EXPECT_TRUE(pieces["tokens"][1]["id"].is_number_integer());
}

TEST(TokenizeApi, BadBodiesAre400s) {
  Loaded llama3 = load("ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(llama3.tokenizer);
  std::string out;
  EXPECT_TRUE(tokenize_request("not json", *llama3.tokenizer, &out));
  EXPECT_TRUE(tokenize_request(R"({"content": 5})", *llama3.tokenizer, &out));
  EXPECT_TRUE(tokenize_request(R"({"content": "x", "add_special": "yes"})", *llama3.tokenizer, &out));
  auto bad_id = detokenize_request(R"({"tokens": [1, 999999999]})", *llama3.tokenizer, &out);
  ASSERT_TRUE(bad_id);
  EXPECT_EQ(bad_id->http_status, 400);
  EXPECT_NE(bad_id->message.find("tokens[1]"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::server
