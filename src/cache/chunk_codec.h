// The chunk codec: a self-describing header plus the KV payload, as stored in every tier.
//
// encode_chunk() writes the header described in docs/chunk-format.md (format version 2: version 1's
// fields plus the chunk's provenance) followed by the payload, optionally zstd-compressed. Version-1
// chunks (written before provenance existed) still decode; their provenance reads as kUnknown. decode_chunk() checks, before it returns any payload
// byte, that the bytes are a whole chunk (header checksum, magic, version, lengths, payload
// checksum) and that every header field equals what the reader expects (key, model fingerprint,
// kv_format, token count, position, shape, element type). Each failure is a distinct ChunkError so
// callers can count them; the Status code is kCorrupt (kUnsupported for an unknown version).
//
// The cache does not interpret the payload: the engine decides its layout and names it kv_format.
//
// Thread safety: all functions are pure.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/chunk_key.h"
#include "kvstash/status.h"

namespace kvstash::cache {

using Bytes = std::vector<std::uint8_t>;

inline constexpr std::uint16_t kChunkFormatVersion = 2;
inline constexpr std::size_t kMaxKvFormatLength = 256;  // longer names are refused by encode

// Where a chunk's KV comes from and how far it is trusted (docs/chunk-format.md, "Provenance").
// Trust flows downhill: KV computed on unchecked KV is unchecked.
enum class ChunkTrust : std::uint8_t {
  kUnknown = 0,      // a version-1 chunk: no provenance was recorded (treated as unchecked for sharing)
  kComputed = 1,     // computed by this node from KV it trusts: the only state this node signs
  kVerified = 2,     // fetched from a trusted producer, its signed manifest verified
  kSpotChecked = 3,  // fetched from an unknown producer and compared with KV computed here
  kUnchecked = 4,    // an unknown producer's KV taken unchecked, or KV computed here on top of such KV
};
const char* chunk_trust_name(ChunkTrust trust);

using ProducerKey = std::array<std::uint8_t, 32>;  // an ed25519 public key (identity::PublicKey)
inline constexpr std::size_t kMaxProvenanceProducers = 64;
// Stands last in a list of producers that had more than kMaxProvenanceProducers - 1 to record (no
// ed25519 key is all ones): the list is then incomplete, and a ban of any producer counts as a ban
// of the KV (Provenance::names).
inline constexpr ProducerKey kMoreProducers = [] {
  ProducerKey k{};
  k.fill(0xff);
  return k;
}();
inline constexpr std::size_t kMaxProvenanceManifest = 4096;

struct Provenance {
  // Default: unchecked, so that code which forgets to say where KV came from never has it signed.
  ChunkTrust trust = ChunkTrust::kUnchecked;
  // kVerified, kSpotChecked, kUnchecked fetched from a peer: its producer. kUnchecked computed
  // here: the producers of the unchecked KV it was computed on (at most kMaxProvenanceProducers;
  // empty when that KV had no recorded producer, e.g. a version-1 chunk). kComputed: empty.
  std::vector<ProducerKey> producers;
  // The producer's signed manifest exactly as received (share/manifest.h), for chunks fetched from
  // a peer; empty otherwise. Served on unchanged: this node never re-signs a chunk it relays.
  std::string manifest;

  // Computed here, verified or spot-checked: KV this node may build on and share.
  bool trusted() const {
    return trust == ChunkTrust::kComputed || trust == ChunkTrust::kVerified || trust == ChunkTrust::kSpotChecked;
  }
  // Whether `producer` is among the producers, or may be (the list ends with kMoreProducers).
  bool names(const ProducerKey& producer) const;
  friend bool operator==(const Provenance&, const Provenance&) = default;
};

// What a chunk claims to be. A reader fills this from the request it serves and decode checks the
// stored header against it field by field.
struct ChunkMeta {
  ChunkKey key;
  ModelFingerprint model_fingerprint{};
  std::string kv_format;            // element type and layout version, e.g. "f16-kvh-v1"
  std::uint32_t token_count = 0;    // tokens whose KV the payload holds
  std::uint32_t first_position = 0; // absolute position of the first token (K is stored post-RoPE)
  std::uint32_t n_layers = 0;
  std::uint32_t n_kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t element_type = 0;   // the engine's tensor type id; opaque here
  // The key's namespace (cache salt) is not empty: a tenant's private chunk. Stored as header flag
  // bit 1 so that code holding only the bytes (the peer-sharing endpoint) can refuse to let it
  // leave the node. Not compared by decode_chunk (the key already separates namespaces).
  bool salted = false;
  // Written by encode_chunk, read by parse_chunk_header; not compared by decode_chunk (a reader
  // decides what it accepts from it).
  Provenance provenance;

  friend bool operator==(const ChunkMeta&, const ChunkMeta&) = default;
};

enum class ChunkError {
  kNone = 0,
  kTruncated,          // fewer bytes than the header says the chunk has (or than a header)
  kTrailingBytes,      // more bytes than the header says
  kBadMagic,
  kBadVersion,
  kHeaderChecksum,     // the header's own checksum does not match
  kKeyMismatch,
  kModelMismatch,
  kKvFormatMismatch,
  kShapeMismatch,      // token count, first position, layers, heads, head_dim or element type
  kPayloadChecksum,
  kDecompress,         // zstd refused the payload or it decompressed to the wrong size
  kProvenance,         // version 2: the provenance block's checksum fails or it does not parse
};
const char* chunk_error_name(ChunkError error);

struct EncodeOptions {
  bool compress = false;       // zstd the payload (header flag bit 0); off by default
  int compression_level = 1;   // zstd level; 1 favours speed, loading must stay cheap
};

// The header as stored, plus the facts derived from it.
struct ChunkHeader {
  ChunkMeta meta;
  std::uint16_t version = 0;
  std::uint16_t flags = 0;
  std::uint32_t header_size = 0;         // bytes before the payload
  std::uint64_t stored_payload_size = 0; // bytes after the header (compressed size if compressed)
  std::uint64_t payload_size = 0;        // bytes after decompression
  std::uint64_t payload_checksum = 0;    // XXH3-64 of the stored payload bytes
  bool compressed() const { return flags & 1u; }
  std::uint64_t total_size() const { return header_size + stored_payload_size; }
};

// A decoded chunk. `payload` points either into the bytes given to decode_chunk (uncompressed
// chunks: zero copy, valid while those bytes live) or into `owned` (decompressed chunks).
struct ChunkView {
  ChunkHeader header;
  std::span<const std::uint8_t> payload;
  Bytes owned;
};

// Header plus payload. Fails with kInvalidArgument when meta.kv_format is too long or the token
// count does not fit, kInternal when zstd fails.
Expected<Bytes> encode_chunk(const ChunkMeta& meta, std::span<const std::uint8_t> payload,
                             const EncodeOptions& options = {});

// The fixed-size part of a header is this many bytes; a header is never shorter.
std::size_t chunk_header_min_size();
// No header is longer than this (longest kv_format and provenance): reading this many bytes of a
// chunk always gives parse_chunk_header() the whole header.
std::size_t chunk_header_max_size();

// The same chunk (its stored payload bytes unchanged) with `provenance` in its header: how a tier
// that learns where a chunk came from (the peers tier) records it. Fails like verify_chunk().
Expected<Bytes> with_provenance(std::span<const std::uint8_t> chunk, const Provenance& provenance);

// Parses and checks the header only (magic, version, header checksum), from a prefix of a chunk.
// It does not need the payload; `why` (optional) receives the reason on failure.
Expected<ChunkHeader> parse_chunk_header(std::span<const std::uint8_t> bytes,
                                         ChunkError* why = nullptr);

// A whole chunk checked on its own: header, exact length and payload checksum, no expectations.
// Used by tiers that verify what they hold (disk scan, `kvstash cache verify`).
Expected<ChunkHeader> verify_chunk(std::span<const std::uint8_t> bytes, ChunkError* why = nullptr);

// A whole chunk checked against what the reader expects; the payload is returned only if every
// check passes.
Expected<ChunkView> decode_chunk(std::span<const std::uint8_t> bytes, const ChunkMeta& expected,
                                 ChunkError* why = nullptr);

}  // namespace kvstash::cache
