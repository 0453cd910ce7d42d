// Response records: a deterministic request's whole answer, as stored by the response cache
// (server/response_cache.h) in the same tiers as KV chunks, under its own record kind.
//
// A record's bytes (docs/response-record.md, format version 1) hold what is needed to answer the
// request again exactly as the engine did: the generated token ids with the engine's final event
// (its finish code and whether it carried a token), the logprobs when the request asked for them,
// the text, the finish reason and the usage. It also carries what makes it a cache proof: the
// request hash (the cache key), the output hash (SHA-256 over the output section), the model
// fingerprint, the producer's ed25519 public key and its signature over signed_message(). This file
// only encodes, decodes and hashes; signing and trust are the server's (identity/identity.h).
//
// In a tier a record travels inside the chunk envelope (chunk_codec.h) with kv_format
// kResponseKvFormat, so every tier, the disk scan and the XXH3 check treat it as any other record
// and the envelope's key check binds it to its request hash.
//
// Thread safety: pure functions on plain values.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/chunk_codec.h"
#include "kvstash/status.h"

namespace kvstash::cache {

inline constexpr std::uint16_t kResponseRecordVersion = 1;
// The envelope's kv_format for response records: KV chunks never use it, so a chunk can never
// decode as a response record or the other way round.
inline constexpr std::string_view kResponseKvFormat = "kvstash-response-v1";
// The domain tag of the records' signatures (identity::sign_message()).
inline constexpr std::string_view kResponseSignatureDomain = "kvstash-response-v1";
// Largest record encoded or decoded: 32 MiB holds 128k tokens with 20 top logprobs each
// (165 bytes a token) plus their text.
inline constexpr std::size_t kMaxResponseRecordBytes = std::size_t{32} << 20;

struct RecordTokenLogprob {
  float logprob = 0.0f;
  std::vector<std::pair<std::int32_t, float>> top;  // alternatives, best first

  friend bool operator==(const RecordTokenLogprob&, const RecordTokenLogprob&) = default;
};

struct ResponseRecord {
  ChunkKey request_key;                      // the cache key: the request hash
  ModelFingerprint model_fingerprint{};
  std::array<std::uint8_t, 32> producer{};   // ed25519 public key of the node that computed it
  std::array<std::uint8_t, 64> signature{};  // producer's signature over signed_message()
  std::uint64_t created_unix = 0;            // seconds; readers compare it with their TTL

  // The output section (covered by output_hash()).
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;   // tokens the engine generated (end-of-turn tokens included)
  std::string finish_reason;             // "stop" or "length"
  std::uint8_t final_finish = 0;         // the engine's FinishReason on its last event, as an integer
  bool final_event_has_token = true;     // false: the last event carried no token (token -1)
  std::vector<std::int32_t> tokens;      // every token event, in order
  bool has_logprobs = false;
  std::vector<RecordTokenLogprob> logprobs;  // one per token when has_logprobs
  std::string text;                      // the answer's text as sent

  friend bool operator==(const ResponseRecord&, const ResponseRecord&) = default;
};

enum class RecordError {
  kNone = 0,
  kTooLarge,       // over kMaxResponseRecordBytes
  kTruncated,      // ends inside a field
  kTrailingBytes,  // bytes after the last field
  kBadMagic,
  kBadVersion,
  kBadField,       // a field's value is impossible (logprob count != token count, ...)
};
const char* record_error_name(RecordError error);

// SHA-256 over the output section's canonical bytes (the encoding below, from prompt_tokens on).
std::array<std::uint8_t, 32> output_hash(const ResponseRecord& record);

// The message the producer signs (before the domain tag): request key ‖ output hash ‖ model
// fingerprint ‖ producer key ‖ u64le(created_unix). Changing any output byte changes the output
// hash and so invalidates the signature.
std::string signed_message(const ResponseRecord& record);

// The record's bytes. Fails with kInvalidArgument when the logprobs do not match the tokens or the
// result would pass kMaxResponseRecordBytes.
Expected<Bytes> encode_response_record(const ResponseRecord& record);
// Parses a whole record. Checks structure only (magic, version, lengths, bounds); the caller checks
// the output hash against the signature, the producer's trust, the key and the model. Errors are
// kCorrupt (kUnsupported for an unknown version) with `why` set.
Expected<ResponseRecord> decode_response_record(std::span<const std::uint8_t> bytes,
                                                RecordError* why = nullptr);

// The envelope's meta for a record of `key` under `fingerprint` (what a reader expects).
ChunkMeta response_envelope_meta(const ChunkKey& key, const ModelFingerprint& fingerprint);

}  // namespace kvstash::cache
