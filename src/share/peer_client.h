// The HTTP side of fetching a chunk from a peer: GET {peer}/v1/kv/chunks/{key}, bounded in time
// and size. What comes back is unverified bytes; share/manifest.h decides whether to believe them.
//
// The answer's body is the encoded chunk exactly as the provider holds it; its manifest (hex of
// the version-1 bytes) is the X-Kvstash-Manifest header (docs/p2p-sharing.md).
//
// Thread safety: fetch_chunk() is a pure function of its arguments; call it from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "cache/chunk_codec.h"
#include "kvstash/status.h"

namespace kvstash::share {

inline constexpr const char* kManifestHeader = "X-Kvstash-Manifest";

struct FetchLimits {
  std::chrono::milliseconds timeout{2000};          // whole fetch, connect to last byte
  std::uint64_t max_bytes = std::uint64_t{64} << 20; // a larger body is abandoned (64 MiB)
};

struct FetchedChunk {
  cache::Bytes chunk;
  std::string manifest;  // the manifest's bytes (decoded from the header's hex)
};

// "http://HOST:PORT" (no path) → its parts; kInvalidArgument otherwise.
Expected<std::pair<std::string, int>> parse_peer_url(std::string_view url);

// Errors: kNotFound (the peer answered 404: it does not hold the chunk), kUnavailable (cannot
// connect, timed out, the body passed max_bytes, another status), kCorrupt (no or bad manifest
// header).
Expected<FetchedChunk> fetch_chunk(const std::string& peer_url, const std::string& key_hex, const FetchLimits& limits);

// GET {peer}/v1/kv/responses/{key}: a response record in its chunk envelope, unverified (the
// record carries its own signature). Errors as fetch_chunk() (no manifest header is expected).
Expected<cache::Bytes> fetch_response_record(const std::string& peer_url, const std::string& key_hex,
                                             const FetchLimits& limits);

inline constexpr const char* kFragmentSetHeader = "X-Kvstash-Fragment-Set";

struct FetchedFragment {
  cache::Bytes bytes;
  std::string set;       // the signed fragment set's bytes (erasure.h)
  std::string manifest;  // the chunk's manifest bytes
};
// GET {peer}/v1/kv/fragments/{key}/{index}; errors as fetch_chunk().
Expected<FetchedFragment> fetch_fragment(const std::string& peer_url, const std::string& key_hex, int index,
                                         const FetchLimits& limits);
// PUT {peer}/v1/kv/fragments/{key}/{index} with the fragment, its set and the chunk's manifest.
// Errors: kUnavailable (unreachable, timeout), kInvalidArgument (the peer refused it: 4xx).
Status put_fragment(const std::string& peer_url, const std::string& key_hex, int index, const cache::Bytes& bytes,
                    const std::string& set, const std::string& manifest, const FetchLimits& limits);

// Lowercase hex, and back (kInvalidArgument on odd length or a non-hex digit).
std::string hex_encode(std::string_view bytes);
Expected<std::string> hex_decode(std::string_view hex);

}  // namespace kvstash::share
