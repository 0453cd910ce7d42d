// SentencePiece (tokenizer.ggml.model "llama") against the real Llama 2 / Mistral 7B vocabulary.
#include "tokenizer/spm_tokenizer.h"

#include <gtest/gtest.h>

namespace kvstash {
namespace {

const Tokenizer& llama_spm() {
  static std::unique_ptr<gguf::File> file;
  static std::unique_ptr<Tokenizer> tok;
  if (!tok) {
    Expected<std::unique_ptr<gguf::File>> f = gguf::File::open(KVSTASH_SHARED_DIR "/vocab/ggml-vocab-llama-spm.gguf");
    EXPECT_TRUE(f.has_value()) << f.status().to_string();
    if (!f) std::abort();
    Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_gguf(**f);
    EXPECT_TRUE(t.has_value()) << t.status().to_string();
    if (!t) std::abort();
    file = std::move(*f);
    tok = std::move(*t);
  }
  return *tok;
}

TEST(Spm, FlagsAndSpecialTokens) {
  const Tokenizer& tok = llama_spm();
  EXPECT_EQ(tok.vocab_size(), 32000u);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_EQ(tok.token_to_piece(1), "");  // control
  // "Hello" -> "▁Hello": the space prefix; decode drops it again.
  const std::vector<TokenId> hello = tok.encode("Hello world", false);
  EXPECT_EQ(hello, (std::vector<TokenId>{15043, 3186}));
  EXPECT_EQ(tok.token_to_piece(15043), " Hello");
  EXPECT_EQ(tok.decode(hello), "Hello world");
}

TEST(Spm, ControlTokensOnlyWithParseSpecial) {
  const Tokenizer& tok = llama_spm();
  const std::vector<TokenId> with = tok.encode("<s>[INST] Hi [/INST]", true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with[0], 1);
  // After a special token the text gets the space prefix again, as at the start.
  EXPECT_EQ(std::vector<TokenId>(with.begin() + 1, with.end()), tok.encode("[INST] Hi [/INST]", true));
  const std::vector<TokenId> without = tok.encode("<s>", false);
  EXPECT_NE(without, std::vector<TokenId>{1});
  EXPECT_EQ(tok.decode(without), "<s>");
}

TEST(Spm, ByteFallbackRoundTrips) {
  const Tokenizer& tok = llama_spm();
  for (const std::string text : {"😁 emoji", "\xF0\x9F\xA6\x99 llama", "tab\there", "中文 文本", "\x01\x02"}) {
    const std::vector<TokenId> ids = tok.encode(text, false);
    EXPECT_EQ(tok.decode(ids), text);
  }
  // A char without a token of its own goes out as its UTF-8 bytes: "<0xF0>" ... byte tokens.
  const std::vector<TokenId> ids = tok.encode("\xF0\x9F\xA6\x99", false);
  ASSERT_EQ(ids.size(), 5u);  // "▁" + four byte tokens
  EXPECT_EQ(tok.token_to_piece(ids[1]), "\xF0");
}

}  // namespace
}  // namespace kvstash
