// Erasure coding of shared chunks (ISA-L's Reed–Solomon over GF(2^8), Cauchy matrix): a chunk's
// bytes become K data fragments and M parity fragments, and any K of the K+M give the chunk back.
//
// The fragments of one chunk travel with a FragmentSet: the chunk key, K, M, the chunk's byte
// length, the SHA-256 of every fragment, the producer's public key and its signature (domain
// "kvstash-fragments-v1"). A fetcher checks the set once (signature, trusted producer) and then
// each fragment against its own hash as it arrives, so a corrupt fragment is identified by itself
// and replaced by another before reconstruction; the reconstructed chunk is then checked against
// its chunk manifest (manifest.h) like any fetched chunk. Byte format: docs/p2p-sharing.md.
//
// Thread safety: all functions are pure (ISA-L's tables are per call).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/chunk_codec.h"
#include "common/sha256.h"
#include "identity/identity.h"
#include "kvstash/status.h"

namespace kvstash::share {

inline constexpr const char* kFragmentsDomain = "kvstash-fragments-v1";
inline constexpr std::uint16_t kFragmentSetVersion = 1;
inline constexpr int kMaxFragments = 32;  // K + M at most (ISA-L handles up to 255; 32 is plenty)

struct ErasureScheme {
  int k = 4;  // data fragments: any k reconstruct
  int m = 2;  // parity fragments: up to m may be lost or corrupt
  int total() const { return k + m; }
};

// "4+2" → {4, 2}. K >= 1, M >= 1, K + M <= kMaxFragments; otherwise kInvalidArgument.
Expected<ErasureScheme> parse_erasure_scheme(std::string_view text);

// The k + m fragments of `data`, each ceil(size / k) bytes (the last data fragment zero-padded).
// Fragment i < k is a slice of the data; i >= k is parity.
std::vector<cache::Bytes> erasure_encode(const ErasureScheme& scheme, std::span<const std::uint8_t> data);

struct Fragment {
  int index = 0;                        // 0 .. k + m - 1
  std::span<const std::uint8_t> bytes;  // all the same length
};
// The original `size` bytes from any k distinct fragments (more are ignored). Errors:
// kInvalidArgument (fewer than k distinct valid indexes, unequal lengths, size too large).
Expected<cache::Bytes> erasure_decode(const ErasureScheme& scheme, std::span<const Fragment> fragments, std::size_t size);

struct FragmentSet {
  cache::ChunkKey key;
  ErasureScheme scheme;
  std::uint64_t chunk_size = 0;  // bytes of the encoded chunk
  std::vector<Digest> hashes;    // SHA-256 of each fragment, k + m of them
  identity::PublicKey producer{};
  identity::Signature signature{};
};

// The set describing `fragments` of the chunk `key` (chunk_size bytes), signed by `producer`.
FragmentSet make_fragment_set(const cache::ChunkKey& key, const ErasureScheme& scheme, std::uint64_t chunk_size,
                              const std::vector<cache::Bytes>& fragments, const identity::NodeIdentity& producer);
std::string encode_fragment_set(const FragmentSet& set);
Expected<FragmentSet> decode_fragment_set(std::string_view bytes);  // kCorrupt on malformed bytes
// The signature verifies and it names `key`. (Trust is the caller's, as for manifests.)
bool fragment_set_verifies(const FragmentSet& set, const cache::ChunkKey& key);
// Fragment `index` is what the set says (its SHA-256).
bool fragment_matches(const FragmentSet& set, int index, std::span<const std::uint8_t> bytes);

}  // namespace kvstash::share
