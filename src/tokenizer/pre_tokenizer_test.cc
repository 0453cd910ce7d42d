#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

namespace kvstash::tokenizer {
namespace {

std::vector<std::string> split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  pre_tokenize(kind, text, &pieces);
  return {pieces.begin(), pieces.end()};
}
using V = std::vector<std::string>;
constexpr auto kLlama3 = PreTokenizerKind::kLlama3;
constexpr auto kQwen2 = PreTokenizerKind::kQwen2;
constexpr auto kGpt2 = PreTokenizerKind::kGpt2;

TEST(PreTokenizerKind, Names) {
  EXPECT_EQ(*pre_tokenizer_kind("llama-bpe"), kLlama3);
  EXPECT_EQ(*pre_tokenizer_kind("llama3"), kLlama3);
  EXPECT_EQ(*pre_tokenizer_kind("llama-v3"), kLlama3);
  EXPECT_EQ(*pre_tokenizer_kind("qwen2"), kQwen2);
  EXPECT_EQ(*pre_tokenizer_kind("gpt2"), kGpt2);
  EXPECT_EQ(*pre_tokenizer_kind("default"), kGpt2);
  EXPECT_EQ(*pre_tokenizer_kind("gpt-2"), kGpt2);
  EXPECT_EQ(*pre_tokenizer_kind("mpt"), kGpt2);
  EXPECT_EQ(*pre_tokenizer_kind("deepseek-r1-qwen"), kQwen2);
  EXPECT_EQ(*pre_tokenizer_kind("qwen35"), PreTokenizerKind::kQwen35);
  for (const char* name : {"starcoder", "refact", "command-r", "smollm"}) {
    EXPECT_EQ(*pre_tokenizer_kind(name), PreTokenizerKind::kDigitsGpt2) << name;
  }
  EXPECT_EQ(*pre_tokenizer_kind("falcon"), PreTokenizerKind::kFalcon);
  EXPECT_EQ(*pre_tokenizer_kind("deepseek-coder"), PreTokenizerKind::kDeepseekCoder);
  EXPECT_EQ(*pre_tokenizer_kind("deepseek-llm"), PreTokenizerKind::kDeepseekLlm);
  const Status unknown = pre_tokenizer_kind("no-such-pre").status();
  EXPECT_EQ(unknown.code(), StatusCode::kUnsupported);
  // The refusal lists every known name.
  for (const std::string& name : known_pre_tokenizer_names()) {
    EXPECT_NE(unknown.message().find(name), std::string::npos) << name;
  }
}

TEST(MultiStageSplit, DigitsThenGpt2) {
  const auto kind = PreTokenizerKind::kDigitsGpt2;
  EXPECT_EQ(split(kind, "w048 7tuijk"), (V{"w", "0", "4", "8", " ", "7", "tuijk"}));
  EXPECT_EQ(split(kind, "a  b"), (V{"a", " ", " b"}));
}

TEST(MultiStageSplit, Falcon) {
  const auto kind = PreTokenizerKind::kFalcon;
  EXPECT_EQ(split(kind, "x += 1234567"), (V{"x", " ", "+=", " ", "123", "456", "7"}));
  EXPECT_EQ(split(kind, "Hi, you"), (V{"Hi", ",", " you"}));
}

TEST(MultiStageSplit, DeepseekCoder) {
  const auto kind = PreTokenizerKind::kDeepseekCoder;
  EXPECT_EQ(split(kind, "def f(x):\n  return 42"),
            (V{"def", " f", "(", "x", "):", "\n", " ", " return", " ", "4", "2"}));
}

TEST(Qwen35Split, MarksJoinWords) {
  // "e" + combining acute (U+0301) stays one word; Qwen2 splits the mark off.
  EXPECT_EQ(split(PreTokenizerKind::kQwen35, "cafe\xCC\x81 x"), (V{"cafe\xCC\x81", " x"}));
  EXPECT_EQ(split(kQwen2, "cafe\xCC\x81 x"), (V{"cafe", "\xCC\x81", " x"}));
}

TEST(Llama3Split, WordsSpacesAndPunctuation) {
  EXPECT_EQ(split(kLlama3, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split(kLlama3, "Hello, world!"), (V{"Hello", ",", " world", "!"}));
  EXPECT_EQ(split(kLlama3, "  Hello"), (V{" ", " Hello"}));  // \s+(?!\S) leaves one space
  EXPECT_EQ(split(kLlama3, "a   "), (V{"a", "   "}));        // trailing run stays whole
  EXPECT_EQ(split(kLlama3, "\tHi"), (V{"\tHi"}));             // any non-newline prefix char
  EXPECT_EQ(split(kLlama3, "!!Hi"), (V{"!!", "Hi"}));
  EXPECT_EQ(split(kLlama3, " ...\n\nx"), (V{" ...\n\n", "x"}));
  EXPECT_EQ(split(kLlama3, "a \n\n b"), (V{"a", " \n\n", " b"}));
  EXPECT_EQ(split(kLlama3, "\n"), (V{"\n"}));
}

TEST(Llama3Split, ContractionsCaseInsensitive) {
  EXPECT_EQ(split(kLlama3, "I'LL don't we've"), (V{"I", "'LL", " don", "'t", " we", "'ve"}));
  EXPECT_EQ(split(kGpt2, "I'LL"), (V{"I", "'", "LL"}));  // GPT-2's are case-sensitive
}

TEST(Llama3Split, NumbersInGroupsOfThree) {
  EXPECT_EQ(split(kLlama3, "1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(split(kLlama3, "x 42"), (V{"x", " ", "42"}));
  EXPECT_EQ(split(kQwen2, "1234"), (V{"1", "2", "3", "4"}));
  EXPECT_EQ(split(kGpt2, "x 1234"), (V{"x", " 1234"}));
  // ½ and Arabic-Indic digits are \p{N}; ² too.
  EXPECT_EQ(split(kLlama3, "½²\xD9\xA3\xD9\xA4"), (V{"½²\xD9\xA3", "\xD9\xA4"}));
}

TEST(Llama3Split, UnicodeClasses) {
  // CJK letters are \p{L}; the full-width comma is punctuation; U+3000 is whitespace.
  EXPECT_EQ(split(kLlama3, "你好，世界"), (V{"你好", "，世界"}));
  EXPECT_EQ(split(kLlama3, "a\xE3\x80\x80" "b"), (V{"a", "\xE3\x80\x80" "b"}));
  // An emoji is neither letter nor number: a punctuation run.
  EXPECT_EQ(split(kLlama3, "hi 😀😀"), (V{"hi", " 😀😀"}));
}

TEST(Gpt2Split, Basics) {
  EXPECT_EQ(split(kGpt2, "Hello world!!"), (V{"Hello", " world", "!!"}));
  EXPECT_EQ(split(kGpt2, "a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split(kGpt2, "x\n\ny"), (V{"x", "\n", "\n", "y"}));  // no \s*[\r\n]+ in GPT-2
  EXPECT_EQ(split(kGpt2, "it's"), (V{"it", "'s"}));
}

TEST(PreTokenizer, InvalidBytesCoverTheText) {
  const std::string text("ab\xFF\xFE cd\xC3", 8);
  for (auto kind : {kLlama3, kQwen2, kGpt2}) {
    std::string joined;
    for (const std::string& piece : split(kind, text)) joined += piece;
    EXPECT_EQ(joined, text);
  }
  EXPECT_EQ(split(kLlama3, text), (V{"ab", "\xFF\xFE", " cd", "\xC3"}));
}

TEST(PreTokenizer, EmptyText) { EXPECT_TRUE(split(kLlama3, "").empty()); }

}  // namespace
}  // namespace kvstash::tokenizer
