// Semantic index entries: what the semantic response cache (server/semantic_cache.h) keeps next to
// a response record so that its index can be rebuilt from the store at start
// (docs/semantic-cache.md, format version 1).
//
// An entry names a response record (its request key) and holds what the index needs to find it
// for a near-duplicate request: the namespace (the hash of every hard gate: model, salt, context,
// sampling parameters), the normalised embedding of the request's text and the literals (numbers
// and quoted strings) of that text. It is signed by the node that made it, like the record, so an
// entry from another node is indexed only if its producer is trusted. The response record format
// is unchanged: old records simply have no entry (they serve exact hits only).
//
// In a tier an entry travels inside the chunk envelope (chunk_codec.h) with kv_format
// kSemanticKvFormat under semantic_entry_key(request key), next to its record.
//
// Thread safety: pure functions on plain values.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/chunk_codec.h"
#include "kvstash/status.h"

namespace kvstash::cache {

inline constexpr std::uint16_t kSemanticEntryVersion = 1;
inline constexpr std::string_view kSemanticKvFormat = "kvstash-semantic-v1";
inline constexpr std::string_view kSemanticSignatureDomain = "kvstash-semantic-v1";
inline constexpr std::size_t kMaxSemanticDimensions = 1 << 16;
inline constexpr std::size_t kMaxSemanticLiterals = 1024;

struct SemanticEntry {
  ChunkKey record_key;                       // the response record it points to (its request key)
  ChunkKey ns;                               // the namespace (server/semantic_cache.h)
  ModelFingerprint model_fingerprint{};
  std::array<std::uint8_t, 32> producer{};   // ed25519 public key
  std::array<std::uint8_t, 64> signature{};  // over signed_message(entry)
  std::vector<float> embedding;              // L2-normalised
  std::vector<std::string> literals;         // in the order they appear in the text

  friend bool operator==(const SemanticEntry&, const SemanticEntry&) = default;
};

// The key an entry is stored under: SHA-256("kvstash-semantic-entry-v1" ‖ record key).
ChunkKey semantic_entry_key(const ChunkKey& record_key);
// What the producer signs (before the domain tag): every field but the signature, as encoded.
std::string signed_message(const SemanticEntry& entry);
Expected<Bytes> encode_semantic_entry(const SemanticEntry& entry);
// Structure only (magic, version, bounds); the caller checks signature, trust and fingerprint.
// Errors: kCorrupt, kUnsupported for an unknown version.
Expected<SemanticEntry> decode_semantic_entry(std::span<const std::uint8_t> bytes);
ChunkMeta semantic_envelope_meta(const ChunkKey& record_key, const ModelFingerprint& fingerprint);

}  // namespace kvstash::cache
