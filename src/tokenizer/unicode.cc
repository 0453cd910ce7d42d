#include "tokenizer/unicode.h"

#include <unicode/uchar.h>

namespace kvstash::tokenizer {
namespace {

// Length of a valid UTF-8 sequence starting at text[i], or 0 if there is none there.
// Validity per RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
int valid_sequence(std::string_view text, std::size_t i, char32_t* cp) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  char32_t value;
  char32_t min_value;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1F, min_value = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0F, min_value = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07, min_value = 0x10000;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF where a sequence should start
  }
  if (i + len > text.size()) return 0;
  for (int k = 1; k < len; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return 0;
    value = (value << 6) | (b & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return len;
}

}  // namespace

std::uint8_t classify(char32_t cp) {
  if (cp == kInvalidCodePoint) return kOther;
  // ASCII fast path; it is most of most prompts and agrees with ICU.
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return kWhitespace;
    // ASCII symbols (general category S*) are not punctuation: $ + < = > ^ ` | ~
    constexpr std::string_view kAsciiSymbols = "$+<=>^`|~";
    if (cp > ' ' && cp < 0x7F && kAsciiSymbols.find(static_cast<char>(cp)) == std::string_view::npos) {
      return kPunctuation;
    }
    return kOther;
  }
  const auto c = static_cast<UChar32>(cp);
  std::uint8_t flags = kOther;
  const std::uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) flags |= kLetter;
  if (mask & U_GC_N_MASK) flags |= kNumber;
  if (mask & U_GC_P_MASK) flags |= kPunctuation;
  if (mask & U_GC_M_MASK) flags |= kMark;
  if (u_isUWhiteSpace(c)) flags |= kWhitespace;
  return flags;
}

std::vector<CodePoint> decode_utf8(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    CodePoint point;
    point.offset = static_cast<std::uint32_t>(i);
    char32_t cp = 0;
    const int len = valid_sequence(text, i, &cp);
    if (len == 0) {
      point.value = kInvalidCodePoint;
      point.length = 1;
    } else {
      point.value = cp;
      point.length = static_cast<std::uint8_t>(len);
    }
    point.flags = classify(point.value);
    out.push_back(point);
    i += point.length;
  }
  return out;
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace kvstash::tokenizer
