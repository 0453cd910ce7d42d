// End-to-end tests against the real Llama 3 and Qwen2 vocabularies in shared/vocab.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace kvstash {
namespace {

const std::string kVocabDir = KVSTASH_SHARED_DIR "/vocab/";

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loading a vocabulary parses ~280k merges; each file is loaded once for all tests.
const Tokenizer& load(const std::string& name) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Expected<std::unique_ptr<gguf::File>> file = gguf::File::open(kVocabDir + name);
    EXPECT_TRUE(file.has_value()) << file.status().to_string();
    if (!file) std::abort();
    Expected<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(**file);
    EXPECT_TRUE(tok.has_value()) << tok.status().to_string();
    if (!tok) std::abort();
    it = cache.emplace(name, Loaded{std::move(*file), std::move(*tok)}).first;
  }
  return *it->second.tokenizer;
}
const Tokenizer& llama3() { return load("ggml-vocab-llama-bpe.gguf"); }
const Tokenizer& qwen2() { return load("ggml-vocab-qwen2.gguf"); }




TEST(Llama3, SpecialTokensAndFlags) {
  const Tokenizer& tok = llama3();
  EXPECT_EQ(tok.vocab_size(), 128256u);
  EXPECT_EQ(tok.pre_tokenizer(), "llama-bpe");
  EXPECT_EQ(tok.find_token("<|begin_of_text|>"), 128000);
  EXPECT_EQ(tok.bos_id(), 128000);
  EXPECT_EQ(tok.find_token("<|eot_id|>"), 128009);
  EXPECT_TRUE(tok.is_end_of_generation(128009));
  EXPECT_TRUE(tok.is_end_of_generation(tok.eos_id()));
  EXPECT_FALSE(tok.is_end_of_generation(128000));
  EXPECT_FALSE(tok.is_end_of_generation(tok.encode("Hello", false)[0]));
  EXPECT_TRUE(tok.add_bos());
  // Control tokens render as nothing.
  EXPECT_EQ(tok.token_to_piece(128000), "");
  const std::vector<TokenId> bos_hi = {128000, tok.encode("Hi", false)[0]};
  EXPECT_EQ(tok.decode(bos_hi), "Hi");
  EXPECT_EQ(tok.encode("<|eot_id|>", true), std::vector<TokenId>{128009});
}

TEST(Qwen2, DigitsSplitOneByOne) {
  const Tokenizer& tok = qwen2();
  EXPECT_EQ(tok.vocab_size(), 151936u);
  EXPECT_EQ(tok.pre_tokenizer(), "qwen2");
  const std::vector<TokenId> ids = tok.encode("12345", false);
  ASSERT_EQ(ids.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const std::string digit(1, static_cast<char>('1' + i));
    EXPECT_EQ(ids[i], tok.find_token(digit)) << digit;
  }
}

TEST(Qwen2, HelloWorld) {
  const Tokenizer& tok = qwen2();
  ASSERT_EQ(tok.find_token("Hello"), 9707);
  ASSERT_EQ(tok.find_token("\xC4\xA0world"), 1879);  // "Ġworld"
  EXPECT_EQ(tok.encode("Hello world", false), (std::vector<TokenId>{9707, 1879}));
  EXPECT_EQ(tok.token_to_piece(1879), " world");
}

TEST(Qwen2, SpecialTokensOnlyWithParseSpecial) {
  const Tokenizer& tok = qwen2();
  const std::string text = "<|im_start|>user\nHi<|im_end|>";
  const std::vector<TokenId> with = tok.encode(text, true);
  ASSERT_GE(with.size(), 4u);
  EXPECT_EQ(with.front(), 151644);
  EXPECT_EQ(with.back(), 151645);
  EXPECT_EQ(tok.decode(with), "user\nHi");  // control tokens decode to nothing
  const std::vector<TokenId> without = tok.encode(text, false);
  for (TokenId id : without) EXPECT_LT(id, 151643) << "special id produced without parse_special";
  EXPECT_EQ(tok.decode(without), text);
  EXPECT_TRUE(tok.is_end_of_generation(151645));  // <|im_end|>
  EXPECT_TRUE(tok.is_end_of_generation(151643));  // <|endoftext|>
  EXPECT_FALSE(tok.is_end_of_generation(151644));
  EXPECT_FALSE(tok.add_bos());
  EXPECT_FALSE(tok.chat_template().empty());
}

TEST(Qwen2, MixedScriptsRoundTrip) {
  const Tokenizer& tok = qwen2();
  const std::vector<std::string> texts = {
      "你好，世界！今天天气很好。", "😀🎉 emoji 👩‍👩‍👧 mix", "Crème brûlée, naïve façade, Ærøskøbing",
      "tabs\t\tand   spaces  \n\n\n  newlines \r\n end   ", "  leading and trailing  ",
      "مرحبا بالعالم", "Ελληνικά και русский текст", "\xE2\x80\x83em space\xE3\x80\x80ideographic",
      "mixed 123,456.789 numbers ½ ² Ⅻ", "don't I'LL we've 'RE",
  };
  for (const std::string& text : texts) {
    const std::vector<TokenId> ids = tok.encode(text, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok.decode(ids), text);
    // Decoding token by token gives the same bytes (pieces may split a UTF-8 char).
    std::string joined;
    for (TokenId id : ids) joined += tok.token_to_piece(id);
    EXPECT_EQ(joined, text);
  }
}

TEST(Qwen2, InvalidUtf8DoesNotCrashAndRoundTrips) {
  const Tokenizer& tok = qwen2();
  const std::vector<std::string> texts = {
      std::string("\xFF\xFE\x80 abc \xC3", 8), std::string("a\xC0\xAFz", 4),  // overlong '/'
      std::string("\xED\xA0\x80", 3),  // a UTF-16 surrogate
      std::string("\xF4\x90\x80\x80", 4),  // above U+10FFFF
      std::string("x\0y", 3), std::string("\xE4\xBD", 2),  // truncated
  };
  for (const std::string& text : texts) {
    const std::vector<TokenId> ids = tok.encode(text, true);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(Tokenizer, EmptyAndInvalidIds) {
  const Tokenizer& tok = qwen2();
  EXPECT_TRUE(tok.encode("", true).empty());
  const std::vector<TokenId> bad = {-5, 1 << 30};
  EXPECT_EQ(tok.decode(bad), "");
  EXPECT_EQ(tok.token_to_piece(-1), "");
  EXPECT_FALSE(tok.find_token("definitely not a token text").has_value());
}

TEST(Tokenizer, LongInputsWithoutSpaces) {
  // One 100 KB piece goes through BPE whole; heap merging keeps that O(n log n).
  const Tokenizer& tok = llama3();
  const std::string letters(100000, 'a');
  std::vector<TokenId> ids = tok.encode(letters, false);
  EXPECT_EQ(tok.decode(ids), letters);
  EXPECT_LT(ids.size(), letters.size() / 2);  // merging happened
  std::string punct;
  for (int i = 0; i < 25000; ++i) punct += "!?-.";
  EXPECT_EQ(tok.decode(tok.encode(punct, false)), punct);
  const std::string spaces = std::string(50000, ' ') + "x" + std::string(50000, '\n');
  EXPECT_EQ(tok.decode(tok.encode(spaces, false)), spaces);
  const std::string specials_like(100000, '<');
  EXPECT_EQ(tok.decode(tok.encode(specials_like, true)), specials_like);
}

TEST(Tokenizer, ConcurrentEncodeAgrees) {
  const Tokenizer& tok = qwen2();
  const std::string text = "The quick brown fox jumps over the lazy dog. 敏捷的棕色狐狸 1234567890\n";
  const std::vector<TokenId> expected = tok.encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if (tok.encode(text, true) != expected) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace kvstash
