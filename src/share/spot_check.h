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
// The engine's own KV of a held chunk arrives either as a chunk under the same key, or, when the
// engine computed a longer tail of the same chunk (a prompt of 16·k tokens looks up its tail without
// the last block, then computes and stores every block of it), as a prefix alias under that key
// naming the longer chunk: the held payload is then compared with the longer chunk's first blocks
// (the peers tier keeps the few own chunks that may be named so, see SpotChecks::may_resolve).
//
// Every held check completes or expires: SpotChecks holds at most max_pending of them, each for at
// most `expiry` (then counted "expired" and forgotten; the producer is neither banned nor cleared).
// While the set is full, no chunk of an unknown producer is used at all: each is a miss, counted
// "dropped" (the engine computes it), so filling the set can never turn checking off.
//
// Thread safety: kv_close() is pure; SpotChecks may be used from any thread (one mutex inside).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "cache/chunk_codec.h"
#include "identity/identity.h"

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

struct SpotCheckOptions {
  std::size_t max_pending = 256;             // --spot-check-pending-max: checks waiting at once
  // --spot-check-expiry-ms: how long a held chunk waits for the engine's own KV. A request computes
  // what it was refused within its own lifetime; a minute covers a long queue before admission.
  std::chrono::milliseconds expiry{60000};
};

// The checks waiting for the engine's KV, and the few own chunks an alias may name.
class SpotChecks {
 public:
  using Clock = std::chrono::steady_clock;
  struct Check {
    cache::ChunkMeta meta;  // the fetched chunk's header (key, position, token count, shape)
    identity::PublicKey producer{};
    cache::Bytes payload;  // theirs, decoded
    Clock::time_point deadline{};
  };
  enum class Hold { kQueued, kAlreadyQueued, kFull };

  explicit SpotChecks(SpotCheckOptions options) : options_(options) {}

  // Queues `check` (its deadline: now + expiry) unless one for its key waits already or the set is
  // full (after expired checks are dropped).
  Hold hold(Check check, Clock::time_point now);
  // Puts back a check taken by take() that could not be completed yet; its deadline is kept.
  void restore(Check check, Clock::time_point now);
  // The check waiting for `key`, removed; nothing when none (or it expired: counted).
  std::optional<Check> take(const cache::ChunkKey& key, Clock::time_point now);
  // Whether the set is full (expired checks dropped first).
  bool full(Clock::time_point now);
  // Whether a chunk described by `own` may be named by a prefix alias resolving a waiting check:
  // same model, format, shape and first position, more tokens.
  bool may_resolve(const cache::ChunkMeta& own, Clock::time_point now);
  // Keeps an own chunk (its header and decoded payload) for an alias to name; the last few only,
  // and none once no check waits.
  void keep_own(const cache::ChunkMeta& meta, std::shared_ptr<const cache::Bytes> payload);
  struct OwnChunk {
    cache::ChunkMeta meta;
    std::shared_ptr<const cache::Bytes> payload;
  };
  std::optional<OwnChunk> own(const cache::ChunkKey& key);

  std::size_t pending(Clock::time_point now);  // checks waiting (expired ones dropped first)
  std::uint64_t expired() const;               // checks dropped at their deadline, ever
  std::size_t max_pending() const { return options_.max_pending; }

 private:
  void expire_locked(Clock::time_point now);

  const SpotCheckOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<cache::ChunkKey, Check> checks_;  // guarded by mu_
  std::deque<OwnChunk> own_;                           // newest last; guarded by mu_
  std::uint64_t expired_ = 0;                          // guarded by mu_
};

// Whether `theirs` (a held chunk of `theirs_meta.token_count` tokens) is the KV of the first tokens of
// `ours` (the engine's chunk that an alias named): same shape, ours longer, and the first
// theirs.size() bytes of ours close to theirs. A shape that does not fit is not close.
KvComparison kv_prefix_close(const cache::ChunkMeta& ours_meta, std::span<const std::uint8_t> ours,
                             const cache::ChunkMeta& theirs_meta, std::span<const std::uint8_t> theirs);

}  // namespace kvstash::share
