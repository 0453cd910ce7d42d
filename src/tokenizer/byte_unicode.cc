#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/unicode.h"

namespace kvstash::tokenizer {
namespace {

// Every mapped code point is below this bound (256 + 68 remapped bytes).
constexpr char32_t kMappedLimit = 0x144;

struct Tables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int, kMappedLimit> to_byte{};
  std::array<std::string, 256> to_utf8;

  Tables() {
    to_byte.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      to_unicode[b] = cp;
      to_byte[cp] = b;
      append_utf8(cp, &to_utf8[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_unicode(std::uint8_t byte) { return tables().to_unicode[byte]; }

int unicode_to_byte(char32_t cp) { return cp < kMappedLimit ? tables().to_byte[cp] : -1; }

std::string bytes_to_mapped(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_utf8[static_cast<std::uint8_t>(c)];
  return out;
}

bool mapped_to_bytes(std::string_view mapped, std::string* out) {
  for (const CodePoint& cp : decode_utf8(mapped)) {
    const int byte = unicode_to_byte(cp.value);
    if (byte < 0) return false;
    out->push_back(static_cast<char>(byte));
  }
  return true;
}

}  // namespace kvstash::tokenizer
