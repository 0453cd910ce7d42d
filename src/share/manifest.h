// Manifest: what a KV chunk carries when it travels to another node, and the one check that decides
// whether a chunk from a peer may reach the engine.
//
// A manifest names the chunk (key, model fingerprint, kv_format, token count, first position and
// shape), the SHA-256 of its decoded payload (the KV itself, so compression does not change it),
// the producer's ed25519 public key, and the producer's signature over all of that under the
// domain tag "kvstash-manifest-v1" (identity::sign_message). The byte format (version 1) is in
// docs/p2p-sharing.md.
//
// check_chunk() accepts a (manifest, chunk bytes) pair fetched for `requested` only if, in order:
// the manifest parses; it names the requested key; the signature verifies; the producer is not
// banned and is trusted; the chunk is whole and its header equals the manifest field by field; its
// decoded payload's SHA-256 equals the manifest's. Each failure is a distinct ManifestError so the
// peers tier can count rejections by reason.
//
// Thread safety: all functions are pure.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "cache/chunk_codec.h"
#include "common/sha256.h"
#include "identity/identity.h"
#include "kvstash/status.h"

namespace kvstash::share {

inline constexpr std::uint16_t kManifestVersion = 1;
inline constexpr const char* kManifestDomain = "kvstash-manifest-v1";

struct Manifest {
  cache::ChunkMeta meta;           // key, fingerprint, kv_format, token count, position, shape
  std::uint64_t payload_size = 0;  // decoded payload bytes
  Digest payload_sha256{};         // SHA-256 of the decoded payload
  identity::PublicKey producer{};
  identity::Signature signature{};
};

enum class ManifestError {
  kNone = 0,
  kMalformed,       // the manifest bytes do not parse (truncated, bad magic, unknown version)
  kKeyMismatch,     // the manifest names another key than the one asked for
  kSignature,       // the signature does not verify under the manifest's producer key
  kBanned,          // the producer was banned here (a failed spot check)
  kUntrusted,       // the producer is not on the trust list
  kHeaderMismatch,  // the chunk's header disagrees with the manifest (or the chunk is damaged)
  kHash,            // the decoded payload's SHA-256 is not the manifest's
};
// "malformed", "key", "signature", "banned", "untrusted", "header", "hash": the /metrics label.
const char* manifest_error_name(ManifestError error);

// A manifest for `chunk` (encoded chunk bytes, which must decode against their own header), signed
// by `producer`. Errors: kCorrupt when the chunk does not decode.
Expected<Manifest> make_manifest(std::span<const std::uint8_t> chunk, const identity::NodeIdentity& producer);

// The version-1 bytes, signature last; and back (kCorrupt on anything malformed, never a crash).
std::string encode_manifest(const Manifest& manifest);
Expected<Manifest> decode_manifest(std::string_view bytes);

// The bytes the signature covers: encode_manifest() without its last 64 bytes.
std::string manifest_signed_bytes(const Manifest& manifest);

// Who this node accepts chunks from. `banned` (may be empty) is asked before `trusted`.
struct TrustPolicy {
  std::function<bool(const identity::PublicKey&)> trusted;
  std::function<bool(const identity::PublicKey&)> banned;
};

// The check described in the file comment. On success `*out` (if given) holds the parsed manifest;
// on failure `*why` says which check failed. The Status code is kCorrupt for every rejection.
Status check_chunk(std::string_view manifest_bytes, std::span<const std::uint8_t> chunk,
                   const cache::ChunkKey& requested, const TrustPolicy& policy, Manifest* out = nullptr,
                   ManifestError* why = nullptr);

}  // namespace kvstash::share
