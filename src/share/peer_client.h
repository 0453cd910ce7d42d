// The HTTP side of talking to a peer: GET {peer}/v1/kv/chunks/{key}, /v1/kv/responses/{key},
// /v1/kv/fragments/{key}/{i} and PUT of a fragment. What comes back is unverified bytes;
// share/manifest.h decides whether to believe them.
//
// What is bounded, exactly: every request made here has ONE wall-clock deadline (FetchLimits::
// timeout, counted from the call) covering name resolution, connect, sending the request, the
// answer's status line and headers, and its whole body; and ONE byte cap (FetchLimits::max_bytes)
// on everything read from the peer, the status line and headers included. The request is abandoned
// (the socket closed) as soon as either is passed: a peer that trickles its headers or its body is
// cut at the deadline, an endless or oversized answer at the cap (a Content-Length above the cap
// is refused before its body is read). No more than max_bytes (plus one read of at most 64 KiB) of
// an answer is ever held in memory. A plain HTTP/1.1 client on a blocking-free socket (poll with
// the time left), one connection per request (Connection: close): Content-Length, chunked and
// close-delimited bodies.
//
// The answer's body is the encoded chunk exactly as the provider holds it; its manifest (hex of
// the version-1 bytes) is the X-Kvstash-Manifest header (docs/p2p-sharing.md).
//
// Thread safety: every function is a pure function of its arguments (and the counters it is given,
// which are atomics); call it from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "cache/chunk_codec.h"
#include "kvstash/status.h"

namespace kvstash::share {

inline constexpr const char* kManifestHeader = "X-Kvstash-Manifest";

// How peer requests ended, for /metrics (kvstash_share_peer_requests_total). Counters only grow.
struct PeerIoCounters {
  std::atomic<std::uint64_t> requests{0};      // requests started
  std::atomic<std::uint64_t> deadline_hit{0};  // abandoned at the wall-clock deadline
  std::atomic<std::uint64_t> cap_hit{0};       // abandoned at the byte cap
};

struct FetchLimits {
  std::chrono::milliseconds timeout{2000};           // the whole request, resolve + connect to last byte
  std::uint64_t max_bytes = std::uint64_t{64} << 20;  // the answer's head and body together (64 MiB)
  PeerIoCounters* counters = nullptr;                 // where to count the request's end; may be null
};

struct FetchedChunk {
  cache::Bytes chunk;
  std::string manifest;  // the manifest's bytes (decoded from the header's hex)
};

// "http://HOST:PORT" (no path) → its parts; kInvalidArgument otherwise.
Expected<std::pair<std::string, int>> parse_peer_url(std::string_view url);

// Errors: kNotFound (the peer answered 404: it does not hold the chunk), kUnavailable (cannot
// connect, deadline passed, the answer passed max_bytes, another status), kCorrupt (no or bad
// manifest header).
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
// PUT {peer}/v1/kv/fragments/{key}/{index} with the fragment, its set and the chunk's manifest;
// the deadline covers sending the fragment and reading the answer.
// Errors: kUnavailable (unreachable, deadline, cap), kInvalidArgument (the peer refused it: 4xx).
Status put_fragment(const std::string& peer_url, const std::string& key_hex, int index, const cache::Bytes& bytes,
                    const std::string& set, const std::string& manifest, const FetchLimits& limits);

// Lowercase hex, and back (kInvalidArgument on odd length or a non-hex digit).
std::string hex_encode(std::string_view bytes);
Expected<std::string> hex_decode(std::string_view hex);

}  // namespace kvstash::share
