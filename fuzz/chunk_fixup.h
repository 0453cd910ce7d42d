// fix_chunk_checksums(): recomputes a fuzzed chunk's two XXH3 checksums (header and payload) so
// that a fuzz target reaches the code behind them. Shared by the chunk codec and manifest targets.
#pragma once

#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#include "cache/chunk_codec.h"

namespace kvstash::fuzz {

inline void put_le64(std::uint8_t* at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
inline std::uint64_t get_le(const std::uint8_t* at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | at[i];
  return v;
}

// The layout of docs/chunk-format.md: kv_format length L at 128, the payload checksum at 120.
// Version 1: the header checksum in its last 8 bytes (header = 140 + L). Version 2: P (provenance
// length) at 132 + L, the header checksum at 136 + L over [0, 136 + L), the provenance block at
// 144 + L and its checksum after it (header = 152 + L + P).
inline void fix_chunk_checksums(cache::Bytes& b) {
  constexpr std::size_t kOffVersion = 8, kOffPayloadChecksum = 120, kOffKvFormatLength = 128, kMinHeader = 140;
  if (b.size() < kMinHeader) return;
  const std::uint64_t kv_len = get_le(b.data() + kOffKvFormatLength, 4);
  if (kv_len > cache::kMaxKvFormatLength || b.size() < kMinHeader + kv_len) return;
  if (get_le(b.data() + kOffVersion, 2) == 1) {
    const std::size_t header_size = kMinHeader + kv_len;
    put_le64(b.data() + kOffPayloadChecksum, XXH3_64bits(b.data() + header_size, b.size() - header_size));
    put_le64(b.data() + header_size - 8, XXH3_64bits(b.data(), header_size - 8));
    return;
  }
  const std::size_t at_p = 132 + kv_len;
  if (b.size() < at_p + 4 + 8) return;
  const std::uint64_t p = get_le(b.data() + at_p, 4);
  const std::size_t header_size = 152 + kv_len + p;
  if (p > 4 + 32 * 64 + 4096 || b.size() < header_size) return;
  put_le64(b.data() + kOffPayloadChecksum, XXH3_64bits(b.data() + header_size, b.size() - header_size));
  put_le64(b.data() + header_size - 8, XXH3_64bits(b.data() + 144 + kv_len, p));
  put_le64(b.data() + 136 + kv_len, XXH3_64bits(b.data(), 136 + kv_len));
}

}  // namespace kvstash::fuzz
