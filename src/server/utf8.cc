#include "server/utf8.h"

#include <cstdint>

namespace kvstash::server {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

int utf8_sequence_length(std::string_view s) {
  if (s.empty()) return -1;
  auto c0 = static_cast<unsigned char>(s[0]);
  if (c0 < 0x80) return 1;
  int len;
  // Allowed range of the second byte, per RFC 3629's table (excludes overlongs, surrogates and
  // code points above U+10FFFF).
  unsigned char lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    len = 2;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    len = 3;
    if (c0 == 0xE0) lo = 0xA0;
    if (c0 == 0xED) hi = 0x9F;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    len = 4;
    if (c0 == 0xF0) lo = 0x90;
    if (c0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<std::size_t>(i) >= s.size()) return -1;
    auto c = static_cast<unsigned char>(s[i]);
    if (i == 1 ? (c < lo || c > hi) : !is_continuation(c)) return 0;
  }
  return len;
}

bool is_valid_utf8(std::string_view s) {
  while (!s.empty()) {
    int n = utf8_sequence_length(s);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::string take_utf8(std::string& raw, bool final) {
  std::string out;
  std::size_t i = 0;
  while (i < raw.size()) {
    int n = utf8_sequence_length(std::string_view(raw).substr(i));
    if (n > 0) {
      out.append(raw, i, static_cast<std::size_t>(n));
      i += static_cast<std::size_t>(n);
    } else if (n == 0) {
      out += kReplacement;
      ++i;
    } else {  // incomplete tail
      if (final) {
        out += kReplacement;
        i = raw.size();
      }
      break;
    }
  }
  raw.erase(0, i);
  return out;
}

}  // namespace kvstash::server
