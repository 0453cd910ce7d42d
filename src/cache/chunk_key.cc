#include "cache/chunk_key.h"

#include "common/sha256.h"

namespace kvstash::cache {
namespace {

constexpr std::string_view kDomain = "kvstash-chunk-v1";

// Feeds a length-prefixed string: u32 LE byte count, then the bytes (docs/chunk-format.md).
void update_string(Sha256& h, std::string_view s) {
  h.update_u32(static_cast<std::uint32_t>(s.size()));
  h.update(s);
}

void update_tokens(Sha256& h, std::span<const std::int32_t> tokens) {
  for (std::int32_t t : tokens) h.update_u32(static_cast<std::uint32_t>(t));
}

ChunkKey finish(Sha256& h) {
  ChunkKey key;
  key.bytes = h.finish();
  return key;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string ChunkKey::hex() const { return to_hex(bytes); }

Expected<ChunkKey> ChunkKey::from_hex(std::string_view hex) {
  if (hex.size() != 64) return invalid_argument("chunk key: want 64 hex digits, got " + std::string(hex));
  ChunkKey key;
  for (std::size_t i = 0; i < 32; ++i) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("chunk key: not hex: " + std::string(hex));
    key.bytes[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return key;
}

ChunkKey first_chunk_key(const ModelFingerprint& fingerprint, std::string_view kv_format,
                         std::string_view name_space, std::span<const std::int32_t> tokens) {
  Sha256 h;
  h.update(kDomain);
  h.update(fingerprint.data(), fingerprint.size());
  update_string(h, kv_format);
  update_string(h, name_space);
  update_tokens(h, tokens);
  return finish(h);
}

ChunkKey next_chunk_key(const ChunkKey& previous, std::span<const std::int32_t> tokens) {
  Sha256 h;
  h.update(kDomain);
  h.update(previous.bytes.data(), previous.bytes.size());
  update_tokens(h, tokens);
  return finish(h);
}

std::vector<ChunkKey> chunk_keys(const ModelFingerprint& fingerprint, std::string_view kv_format,
                                 std::string_view name_space, std::span<const std::int32_t> tokens,
                                 std::size_t chunk_tokens) {
  std::vector<ChunkKey> keys;
  if (chunk_tokens == 0) return keys;
  const std::size_t n = tokens.size() / chunk_tokens;
  keys.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto chunk = tokens.subspan(i * chunk_tokens, chunk_tokens);
    keys.push_back(i == 0 ? first_chunk_key(fingerprint, kv_format, name_space, chunk)
                          : next_chunk_key(keys.back(), chunk));
  }
  return keys;
}

}  // namespace kvstash::cache
