// Prefix aliases: "the KV of the prefix keyed K is the first n tokens of the stored chunk T".
//
// A chunk is keyed by the hash of its whole prefix up to its last token, so a prompt that shares
// only the first blocks of a stored chunk (a new question after the same document, a conversation
// that branched inside a chunk) never finds it by key, although, attention being causal, those
// leading positions hold exactly the KV it needs. When the store writes a chunk of n blocks it also
// writes, for each of its first n-1 blocks j, a small alias record under the block-chain key at the
// end of block j (the key a prompt's tail candidate has at that block; chunk-format.md): a lookup of
// a tail then finds either a stored tail or an alias, and a load follows the alias to its target and
// uses the target's first blocks. At most one block of a stored prefix is then ever computed again.
//
// An alias travels in the chunk envelope (chunk_codec.h) with kv_format kAliasKvFormat, its meta the
// target's (fingerprint, first position, shape, salted) except the key (K) and the token count (the
// tokens it stands for); its payload is the target's key and token count (docs/chunk-format.md,
// "Prefix aliases"). A real tail stored under K later replaces the alias, and the other way round:
// both name the same KV. An alias whose target is gone is a miss, never an error.
//
// Thread safety: pure functions on plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "cache/chunk_codec.h"
#include "kvstash/status.h"

namespace kvstash::cache {

// The envelope's kv_format for aliases: no KV chunk or response record uses it.
inline constexpr std::string_view kAliasKvFormat = "kvstash-alias-v1";

struct AliasTarget {
  ChunkKey key;                  // the chunk holding the KV
  std::uint32_t token_count = 0; // its whole length (the alias uses fewer of its tokens)
};

// The alias record for the first `tokens` tokens of the chunk `target` (described by target_meta,
// key included). Fails when tokens is 0 or not fewer than target_meta.token_count.
Expected<Bytes> encode_alias(const ChunkMeta& target_meta, const ChunkKey& alias_key, std::uint32_t tokens);

// If `bytes` is an alias record for what a reader expects under expected.key (a tail of
// expected.token_count tokens at expected.first_position, same model and shape), its target;
// otherwise nothing (not an alias, damaged, or an alias for something else).
std::optional<AliasTarget> decode_alias(std::span<const std::uint8_t> bytes, const ChunkMeta& expected);

}  // namespace kvstash::cache
