#include "cache/prefix_alias.h"

#include "cache/byte_io.h"

namespace kvstash::cache {
namespace {

constexpr std::size_t kPayloadBytes = 32 + 4;  // target key, target token count (u32le)

ChunkMeta alias_meta(ChunkMeta meta, const ChunkKey& alias_key, std::uint32_t tokens) {
  meta.key = alias_key;
  meta.kv_format = std::string(kAliasKvFormat);
  meta.token_count = tokens;
  return meta;
}

}  // namespace

Expected<Bytes> encode_alias(const ChunkMeta& target_meta, const ChunkKey& alias_key, std::uint32_t tokens) {
  if (tokens == 0 || tokens >= target_meta.token_count) {
    return invalid_argument("prefix alias of " + std::to_string(tokens) + " tokens for a chunk of " +
                            std::to_string(target_meta.token_count));
  }
  Bytes payload;
  ByteWriter w(payload);
  w.raw(target_meta.key.bytes.data(), target_meta.key.bytes.size());
  w.le(target_meta.token_count, 4);
  return encode_chunk(alias_meta(target_meta, alias_key, tokens), payload);
}

std::optional<AliasTarget> decode_alias(std::span<const std::uint8_t> bytes, const ChunkMeta& expected) {
  auto view = decode_chunk(bytes, alias_meta(expected, expected.key, expected.token_count));
  if (!view || view->payload.size() != kPayloadBytes) return std::nullopt;
  AliasTarget target;
  ByteReader r(view->payload);
  r.raw(target.key.bytes.data(), target.key.bytes.size());
  target.token_count = static_cast<std::uint32_t>(r.le(4));
  if (!r.ok() || target.token_count <= expected.token_count || target.key == expected.key) return std::nullopt;
  return target;
}

}  // namespace kvstash::cache
