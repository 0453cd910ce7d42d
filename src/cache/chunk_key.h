// ChunkKey: the 32-byte name of a KV chunk, and the SHA-256 key chain that produces it.
//
// A key names a whole prefix, not only its own tokens: key_0 hashes the model fingerprint, the
// kv_format, the namespace (cache salt) and the first chunk's tokens; key_i hashes key_{i-1} and the
// i-th chunk's tokens. Two processes on two machines that load the same model compute the same
// keys (no process-local seed enters). The exact bytes hashed are written in docs/chunk-format.md:
//
//   key_0 = SHA-256("kvstash-chunk-v1" ‖ fingerprint[32] ‖ u32le(len(kv_format)) ‖ kv_format
//                   ‖ u32le(len(namespace)) ‖ namespace ‖ u32le(token)...)
//   key_i = SHA-256("kvstash-chunk-v1" ‖ key_{i-1}[32] ‖ u32le(token)...)
//
// The chain is generic over the chunk size: the engine's prefix cache uses it per block (16 tokens),
// the tiered store per chunk (256 tokens). Keys of different chunk sizes are different keys.
//
// Thread safety: all functions are pure; ChunkKey is a plain value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::cache {

using ModelFingerprint = std::array<std::uint8_t, 32>;

struct ChunkKey {
  std::array<std::uint8_t, 32> bytes{};

  std::string hex() const;  // 64 lowercase hex digits
  // Parses 64 hex digits (either case); anything else is kInvalidArgument.
  static Expected<ChunkKey> from_hex(std::string_view hex);

  friend bool operator==(const ChunkKey&, const ChunkKey&) = default;
  friend auto operator<=>(const ChunkKey&, const ChunkKey&) = default;
};

// key_0: the first chunk of a prefix. `tokens` are that chunk's token ids.
ChunkKey first_chunk_key(const ModelFingerprint& fingerprint, std::string_view kv_format,
                         std::string_view name_space, std::span<const std::int32_t> tokens);

// key_i from key_{i-1} and the i-th chunk's token ids.
ChunkKey next_chunk_key(const ChunkKey& previous, std::span<const std::int32_t> tokens);

// The keys of every full chunk of `tokens` (tokens.size() / chunk_tokens keys; a trailing partial
// chunk has no key). chunk_tokens == 0 yields no keys.
std::vector<ChunkKey> chunk_keys(const ModelFingerprint& fingerprint, std::string_view kv_format,
                                 std::string_view name_space, std::span<const std::int32_t> tokens,
                                 std::size_t chunk_tokens);

}  // namespace kvstash::cache

template <>
struct std::hash<kvstash::cache::ChunkKey> {
  // The key is already a uniform hash; its first 8 bytes are as good as any mix of them.
  std::size_t operator()(const kvstash::cache::ChunkKey& key) const noexcept {
    std::size_t h = 0;
    for (int i = 0; i < 8; ++i) h = (h << 8) | key.bytes[i];
    return h;
  }
};
