// BpeTokenizer on small in-memory vocabularies: token types, special tokens, flags.
#include "tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/byte_unicode.h"

namespace kvstash::tokenizer {
namespace {

// ids 0..255: bytes; 256 "Ġh", 257 "Ġhi" (merges "Ġ h", "Ġh i"); 258 <|end|> control;
// 259 <tool> user-defined; 260 <|end|><tool> control (overlaps both).
BpeVocabulary small_vocab(std::string pre) {
  BpeVocabulary v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(bytes_to_mapped(std::string(1, static_cast<char>(b))));
  v.types.assign(256, TokenType::kNormal);
  v.tokens.push_back("\xC4\xA0h");
  v.tokens.push_back("\xC4\xA0hi");
  v.tokens.push_back("<|end|>");
  v.tokens.push_back("<tool>");
  v.tokens.push_back("<|end|><tool>");
  v.types.insert(v.types.end(), {TokenType::kNormal, TokenType::kNormal, TokenType::kControl,
                                 TokenType::kUserDefined, TokenType::kControl});
  v.merges = {"\xC4\xA0 h", "\xC4\xA0h i"};
  v.pre = std::move(pre);
  v.eos_id = 259;  // not <|end|>: both count as end of generation, one by id, one by name
  return v;
}

std::unique_ptr<BpeTokenizer> make(std::string pre) {
  auto tok = BpeTokenizer::create(small_vocab(std::move(pre)));
  EXPECT_TRUE(tok.has_value()) << tok.status().to_string();
  return std::move(*tok);
}

TEST(BpeTokenizer, MergesAndSpecials) {
  const auto tok = make("gpt2");
  EXPECT_EQ(tok->encode("a hi", false), (std::vector<TokenId>{'a', 257}));
  EXPECT_EQ(tok->encode("x<|end|>y", true), (std::vector<TokenId>{'x', 258, 'y'}));
  EXPECT_EQ(tok->encode("<|end|><tool>", true), (std::vector<TokenId>{260}));  // longest wins
  EXPECT_EQ(tok->encode("<tool> hi", true), (std::vector<TokenId>{259, 257}));
  const std::vector<TokenId> plain = tok->encode("<tool>", false);
  EXPECT_EQ(plain.size(), 6u);
  EXPECT_EQ(tok->decode(plain), "<tool>");
}

TEST(BpeTokenizer, DecodeByTokenType) {
  const auto tok = make("gpt2");
  EXPECT_EQ(tok->token_to_piece(257), " hi");
  EXPECT_EQ(tok->token_to_piece(258), "");        // control
  EXPECT_EQ(tok->token_to_piece(259), "<tool>");  // user-defined: its text
  EXPECT_EQ(tok->token_to_piece(' '), " ");
  const std::vector<TokenId> ids = {258, 'o', 'k', 259};
  EXPECT_EQ(tok->decode(ids), "ok<tool>");
}

TEST(BpeTokenizer, FlagsAndEndOfGeneration) {
  const auto gpt2 = make("gpt2");
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_TRUE(gpt2->is_end_of_generation(258));  // "<|end|>", by name
  EXPECT_TRUE(gpt2->is_end_of_generation(259));  // the eos id
  EXPECT_FALSE(gpt2->is_end_of_generation(260));
  EXPECT_EQ(gpt2->eos_id(), 259);
  EXPECT_FALSE(gpt2->is_end_of_generation('a'));
  EXPECT_EQ(gpt2->bos_id(), -1);
  EXPECT_TRUE(make("llama-bpe")->add_bos());
  BpeVocabulary v = small_vocab("llama3");
  v.add_bos = false;
  EXPECT_FALSE((*BpeTokenizer::create(std::move(v)))->add_bos());
}

TEST(BpeTokenizer, Errors) {
  EXPECT_EQ(BpeTokenizer::create(small_vocab("no-such-pre-tokenizer")).status().code(), StatusCode::kUnsupported);
  BpeVocabulary v = small_vocab("gpt2");
  v.types.pop_back();
  EXPECT_EQ(BpeTokenizer::create(std::move(v)).status().code(), StatusCode::kCorrupt);
  v = small_vocab("gpt2");
  v.bos_id = 100000;
  EXPECT_EQ(BpeTokenizer::create(std::move(v)).status().code(), StatusCode::kCorrupt);
}

TEST(BpeTokenizer, RandomBytesRoundTripForEveryPreTokenizer) {
  std::mt19937 rng(12345);
  for (const char* pre : {"gpt2", "llama3", "qwen2"}) {
    const auto tok = make(pre);
    for (int i = 0; i < 300; ++i) {
      std::string text(rng() % 64, '\0');
      for (char& c : text) c = static_cast<char>(rng() % 256);
      EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << pre;
    }
  }
}

}  // namespace
}  // namespace kvstash::tokenizer
