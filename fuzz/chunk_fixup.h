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

// The layout of docs/chunk-format.md (version 1): kv_format length at 128, the header checksum in
// the header's last 8 bytes, the payload checksum at 120.
inline void fix_chunk_checksums(cache::Bytes& b) {
  constexpr std::size_t kOffPayloadChecksum = 120, kOffKvFormatLength = 128, kMinHeader = 140;
  if (b.size() < kMinHeader) return;
  const std::uint64_t kv_len = get_le(b.data() + kOffKvFormatLength, 4);
  if (kv_len > cache::kMaxKvFormatLength || b.size() < kMinHeader + kv_len) return;
  const std::size_t header_size = kMinHeader + kv_len;
  put_le64(b.data() + kOffPayloadChecksum, XXH3_64bits(b.data() + header_size, b.size() - header_size));
  put_le64(b.data() + header_size - 8, XXH3_64bits(b.data(), header_size - 8));
}

}  // namespace kvstash::fuzz
