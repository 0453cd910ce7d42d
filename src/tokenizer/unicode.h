// UTF-8 decoding and the Unicode character classes that the pre-tokenizers' regexes use
// (\p{L}, \p{N}, \s), with ICU as the source of truth for all of Unicode.
//
// The pre-tokenizers never fail on bad input: a byte that does not start a valid UTF-8 sequence
// (or a truncated, overlong or surrogate sequence) decodes as one code point of its own that is
// neither letter, number nor whitespace, so the text's bytes pass through unchanged.
//
// Thread safety: free functions without state; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::tokenizer {

// Bit flags of a code point's class. A code point has at most one of letter/number/punctuation/
// mark (general categories); whitespace is independent in principle (ICU's White_Space property).
enum CharClass : std::uint8_t {
  kOther = 0,
  kLetter = 1 << 0,      // general category L* (\p{L})
  kNumber = 1 << 1,      // general category N* (\p{N}: Nd, Nl, No)
  kWhitespace = 1 << 2,  // Unicode White_Space property (\s)
  kPunctuation = 1 << 3, // general category P* (\p{P})
  kMark = 1 << 4,        // general category M* (\p{M})
};

// Stands in for a byte that is not part of valid UTF-8. Above U+10FFFF, so never a real char.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

struct CodePoint {
  char32_t value = 0;        // the scalar value, or kInvalidCodePoint
  std::uint32_t offset = 0;  // byte offset in the decoded text
  std::uint8_t length = 0;   // bytes, 1..4
  std::uint8_t flags = 0;    // CharClass bits
};

// The class of one code point (kOther for kInvalidCodePoint).
std::uint8_t classify(char32_t cp);

// Decodes `text` into code points that cover it byte for byte (see the header comment for
// invalid input). Texts over 4 GiB are not supported (offsets are 32-bit).
std::vector<CodePoint> decode_utf8(std::string_view text);

// Appends the UTF-8 encoding of a valid scalar value.
void append_utf8(char32_t cp, std::string* out);

}  // namespace kvstash::tokenizer
