#include "share/spot_check.h"

#include <cmath>
#include <cstring>

#include "common/fp16.h"

namespace kvstash::share {

KvComparison kv_close(std::span<const std::uint8_t> ours, std::span<const std::uint8_t> theirs, std::uint32_t element_type) {
  KvComparison out;
  if (ours.size() != theirs.size()) return out;
  constexpr std::uint32_t kF16 = 1;  // gguf::TensorType::kF16, the engine's KV element type
  if (element_type != kF16 || ours.size() % 2 != 0) {
    out.close = std::memcmp(ours.data(), theirs.data(), ours.size()) == 0;
    return out;
  }
  out.close = true;
  for (std::size_t i = 0; i < ours.size(); i += 2) {
    std::uint16_t a = 0, b = 0;
    std::memcpy(&a, ours.data() + i, 2);
    std::memcpy(&b, theirs.data() + i, 2);
    const float x = f16_to_f32(a), y = f16_to_f32(b);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (a != b) out.close = false;
      continue;
    }
    const float d = std::fabs(x - y);
    if (d > out.max_abs_diff) out.max_abs_diff = d;
    if (d > kSpotCheckAbs + kSpotCheckRel * std::fabs(x)) out.close = false;
  }
  return out;
}

}  // namespace kvstash::share

namespace kvstash::share {
namespace {

// Own chunks kept for aliases: the store writes a chunk and then its aliases, in order, to the
// peers tier, so the chunk an alias names is one of the last few written.
constexpr std::size_t kMaxOwnKept = 4;

bool same_layout(const cache::ChunkMeta& a, const cache::ChunkMeta& b) {
  return a.model_fingerprint == b.model_fingerprint && a.kv_format == b.kv_format && a.first_position == b.first_position &&
         a.n_layers == b.n_layers && a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim &&
         a.element_type == b.element_type;
}

}  // namespace

void SpotChecks::expire_locked(Clock::time_point now) {
  expired_ += std::erase_if(checks_, [&](const auto& c) { return c.second.deadline <= now; });
  if (checks_.empty()) own_.clear();
}

SpotChecks::Hold SpotChecks::hold(Check check, Clock::time_point now) {
  std::lock_guard lock(mu_);
  expire_locked(now);
  if (checks_.count(check.meta.key)) return Hold::kAlreadyQueued;
  if (checks_.size() >= options_.max_pending) return Hold::kFull;
  check.deadline = now + options_.expiry;
  const cache::ChunkKey key = check.meta.key;
  checks_.emplace(key, std::move(check));
  return Hold::kQueued;
}

void SpotChecks::restore(Check check, Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (check.deadline <= now) {
    ++expired_;
    return;
  }
  const cache::ChunkKey key = check.meta.key;
  checks_.try_emplace(key, std::move(check));  // its slot was freed by take(): no bound to check
}

std::optional<SpotChecks::Check> SpotChecks::take(const cache::ChunkKey& key, Clock::time_point now) {
  std::lock_guard lock(mu_);
  auto it = checks_.find(key);
  if (it == checks_.end()) return std::nullopt;
  Check check = std::move(it->second);
  checks_.erase(it);
  if (check.deadline <= now) {
    ++expired_;
    return std::nullopt;
  }
  return check;
}

bool SpotChecks::full(Clock::time_point now) {
  std::lock_guard lock(mu_);
  expire_locked(now);
  return checks_.size() >= options_.max_pending;
}

bool SpotChecks::may_resolve(const cache::ChunkMeta& own, Clock::time_point now) {
  std::lock_guard lock(mu_);
  expire_locked(now);
  for (const auto& [key, check] : checks_) {
    if (same_layout(check.meta, own) && check.meta.token_count < own.token_count) return true;
  }
  return false;
}

void SpotChecks::keep_own(const cache::ChunkMeta& meta, std::shared_ptr<const cache::Bytes> payload) {
  std::lock_guard lock(mu_);
  std::erase_if(own_, [&](const OwnChunk& c) { return c.meta.key == meta.key; });
  own_.push_back({meta, std::move(payload)});
  while (own_.size() > kMaxOwnKept) own_.pop_front();
}

std::optional<SpotChecks::OwnChunk> SpotChecks::own(const cache::ChunkKey& key) {
  std::lock_guard lock(mu_);
  for (const auto& c : own_) {
    if (c.meta.key == key) return c;
  }
  return std::nullopt;
}

std::size_t SpotChecks::pending(Clock::time_point now) {
  std::lock_guard lock(mu_);
  expire_locked(now);
  return checks_.size();
}

std::uint64_t SpotChecks::expired() const {
  std::lock_guard lock(mu_);
  return expired_;
}

KvComparison kv_prefix_close(const cache::ChunkMeta& ours_meta, std::span<const std::uint8_t> ours,
                             const cache::ChunkMeta& theirs_meta, std::span<const std::uint8_t> theirs) {
  // The payload is token-block-major (a block's KV after the previous block's), so the KV of the
  // first n tokens is the first n/token_count of the bytes.
  const bool fits = same_layout(ours_meta, theirs_meta) && theirs_meta.token_count > 0 &&
                    theirs_meta.token_count < ours_meta.token_count && ours.size() % ours_meta.token_count == 0 &&
                    theirs.size() == ours.size() / ours_meta.token_count * theirs_meta.token_count;
  if (!fits) return {};
  return kv_close(ours.first(theirs.size()), theirs, ours_meta.element_type);
}

}  // namespace kvstash::share
