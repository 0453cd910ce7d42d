#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_unicode.h"

namespace kvstash::tokenizer {
namespace {

TEST(Classify, LettersNumbersWhitespace) {
  EXPECT_EQ(classify('a'), kLetter);
  EXPECT_EQ(classify(U'é'), kLetter);
  EXPECT_EQ(classify(U'中'), kLetter);
  EXPECT_EQ(classify(U'ا'), kLetter);  // Arabic alef (Lo)
  EXPECT_EQ(classify('7'), kNumber);
  EXPECT_EQ(classify(U'½'), kNumber);    // No
  EXPECT_EQ(classify(U'Ⅻ'), kNumber);    // Nl
  EXPECT_EQ(classify(U'٣'), kNumber);    // Nd, Arabic-Indic
  EXPECT_EQ(classify(' '), kWhitespace);
  EXPECT_EQ(classify('\n'), kWhitespace);
  EXPECT_EQ(classify(0x00A0), kWhitespace);  // no-break space
  EXPECT_EQ(classify(0x3000), kWhitespace);  // ideographic space
  EXPECT_EQ(classify(0x2028), kWhitespace);
  EXPECT_EQ(classify(','), kPunctuation);
  EXPECT_EQ(classify('$'), kOther);       // Sc: a symbol, not punctuation
  EXPECT_EQ(classify(U'「'), kPunctuation);
  EXPECT_EQ(classify(0x0301), kMark);     // combining acute accent
  EXPECT_EQ(classify(0x1F600), kOther);  // emoji
  EXPECT_EQ(classify(0x200D), kOther);   // zero-width joiner is not White_Space
  EXPECT_EQ(classify(kInvalidCodePoint), kOther);
}

TEST(DecodeUtf8, ValidAndInvalid) {
  const std::vector<CodePoint> cps = decode_utf8("a\xC3\xA9\xF0\x9F\x98\x80");
  ASSERT_EQ(cps.size(), 3u);
  EXPECT_EQ(cps[1].value, 0xE9u);
  EXPECT_EQ(cps[1].offset, 1u);
  EXPECT_EQ(cps[2].value, 0x1F600u);
  EXPECT_EQ(cps[2].length, 4);
  // Overlong, surrogate, truncated and stray continuation bytes: one invalid point per byte.
  for (const std::string bad : {"\xC0\xAF", "\xED\xA0\x80", "\xE4\xBD", "\x80\xBF"}) {
    const std::vector<CodePoint> v = decode_utf8(bad);
    ASSERT_EQ(v.size(), bad.size()) << bad;
    for (const CodePoint& cp : v) EXPECT_EQ(cp.value, kInvalidCodePoint);
  }
}

TEST(ByteUnicode, MappingIsABijection) {
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);  // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au); // 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), static_cast<char32_t>('A'));
  std::string all;
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<std::uint8_t>(b))), b);
    all.push_back(static_cast<char>(b));
  }
  EXPECT_EQ(unicode_to_byte(U'中'), -1);
  std::string back;
  ASSERT_TRUE(mapped_to_bytes(bytes_to_mapped(all), &back));
  EXPECT_EQ(back, all);
  std::string ignored;
  EXPECT_FALSE(mapped_to_bytes("中", &ignored));
}

TEST(AppendUtf8, Encodes) {
  std::string s;
  for (char32_t cp : {U'a', U'é', U'中', U'😀'}) append_utf8(cp, &s);
  EXPECT_EQ(s, "aé中😀");
}

}  // namespace
}  // namespace kvstash::tokenizer
