// Spot checks (`--trust any --spot-check P`): how a node accepts KV from producers it does not know.
//
// A chunk from an unknown producer that passed every other check (share/manifest.h) is, with
// probability P, not used: the peers tier reports it missing, so the engine recomputes it (a
// request is never answered from unchecked KV in that case), and keeps the fetched payload. When
// the engine stores its own KV of that chunk (the store's write to the peers tier), the two
// payloads are compared element by element within kv_close()'s tolerance. A mismatch bans the
// producer: its chunks are refused from then on (reason "banned"), and the chunks already
// accepted from it unchecked are erased from the local tiers. With probability 1 - P the chunk
// is accepted as it is; P trades the cost of recomputing for how soon a cheater is caught.
//
// Thread safety: kv_close() is pure.
#pragma once

#include <cstdint>
#include <span>

namespace kvstash::share {

// The tolerance of a spot check, per f16 element: |ours - theirs| <= kSpotCheckAbs +
// kSpotCheckRel * |ours|. Different SIMD paths (AVX-512, AVX2, scalar) sum in different orders,
// so honest KV is not bit-identical; the bound is far above what they differ by (measured in
// share_spot_check_e2e_test and docs/p2p-sharing.md) and far below what altered KV differs by.
inline constexpr float kSpotCheckAbs = 0.05f;
inline constexpr float kSpotCheckRel = 0.05f;

struct KvComparison {
  bool close = false;         // every element within the tolerance (and the sizes equal)
  float max_abs_diff = 0.0f;  // the largest |ours - theirs| seen
};

// Compares two payloads of f16 elements (element_type 1); other element types must be equal
// bytes. Non-finite values must match exactly.
KvComparison kv_close(std::span<const std::uint8_t> ours, std::span<const std::uint8_t> theirs, std::uint32_t element_type);

}  // namespace kvstash::share
