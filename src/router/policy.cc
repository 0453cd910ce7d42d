#include "router/policy.h"

#include <algorithm>
#include <cmath>

namespace kvstash::router {
namespace {

// FNV-1a, 64 bits: stable across processes and machines (no seed), for rendezvous hashing.
constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;
constexpr std::uint64_t kFnvPrime = 1099511628211ull;

std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

// Scores closer than this count as equal (they differ by less than one token's worth).
constexpr double kTieEpsilon = 0.5;

// The least loaded of `tied`; then the fewest open requests; then the first at or after `turn`
// in round-robin order.
std::size_t least_loaded(const std::vector<Candidate>& c, const std::vector<std::size_t>& tied, std::uint64_t turn) {
  std::size_t best = tied.front();
  auto rank = [&](std::size_t i) { return (i + c.size() - turn % c.size()) % c.size(); };
  for (std::size_t i : tied) {
    const Candidate &a = c[i], &b = c[best];
    if (a.load_tokens != b.load_tokens ? a.load_tokens < b.load_tokens
        : a.in_flight != b.in_flight   ? a.in_flight < b.in_flight
                                       : rank(i) < rank(best)) {
      best = i;
    }
  }
  return best;
}

}  // namespace

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kCacheAware: return "cache-aware";
    case Policy::kRoundRobin: return "round-robin";
    case Policy::kLeastLoaded: return "least-loaded";
    case Policy::kPrefixHash: return "prefix-hash";
  }
  return "?";
}

std::optional<Policy> policy_from_name(const std::string& name) {
  for (Policy p : {Policy::kCacheAware, Policy::kRoundRobin, Policy::kLeastLoaded, Policy::kPrefixHash}) {
    if (name == policy_name(p)) return p;
  }
  return std::nullopt;
}

double score(const ScoreWeights& w, const Candidate& c) {
  return w.pool * c.match.pool_tokens + w.memory * c.match.memory_tokens + w.disk * c.match.disk_tokens -
         w.load * static_cast<double>(c.load_tokens);
}

Choice choose_worker(Policy policy, const ScoreWeights& weights, const std::vector<Candidate>& candidates,
                     std::uint64_t turn, std::uint64_t prefix_hash) {
  Choice out;
  std::vector<std::size_t> all(candidates.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  switch (policy) {
    case Policy::kRoundRobin:
      out.index = turn % candidates.size();
      out.decision = "round_robin";
      return out;
    case Policy::kLeastLoaded:
      out.index = least_loaded(candidates, all, turn);
      out.decision = "least_loaded";
      return out;
    case Policy::kPrefixHash: {
      std::uint64_t best_weight = 0;
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        const std::uint64_t w = fnv1a(candidates[i].url.data(), candidates[i].url.size(), fnv1a(&prefix_hash, sizeof prefix_hash));
        if (i == 0 || w > best_weight) {
          best_weight = w;
          out.index = i;
        }
      }
      out.decision = "prefix_hash";
      return out;
    }
    case Policy::kCacheAware: break;
  }
  double best = score(weights, candidates.front());
  for (const Candidate& c : candidates) best = std::max(best, score(weights, c));
  std::vector<std::size_t> tied;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (best - score(weights, candidates[i]) <= kTieEpsilon) tied.push_back(i);
  }
  out.index = tied.size() == 1 ? tied.front() : least_loaded(candidates, tied, turn);
  out.score = score(weights, candidates[out.index]);
  out.decision = candidates[out.index].match.total() > 0 ? "cache_hit" : "least_loaded";
  return out;
}

std::uint64_t cache_key_hash(const std::string& key, const std::string& salt) {
  const std::uint64_t h = fnv1a(salt.data(), salt.size());
  return fnv1a(key.data(), key.size(), fnv1a("prompt_cache_key", 16, h));
}

std::uint64_t prefix_hash_of(const RequestKeys& keys, const std::vector<std::int32_t>& tokens, const std::string& salt,
                             int hash_prefix_tokens, int block_size) {
  if (!keys.block_keys.empty()) {
    const std::size_t blocks = static_cast<std::size_t>(std::max(1, hash_prefix_tokens / std::max(1, block_size)));
    const cache::ChunkKey& key = keys.block_keys[std::min(blocks, keys.block_keys.size()) - 1];
    return fnv1a(key.bytes.data(), key.bytes.size());
  }
  std::uint64_t h = fnv1a(salt.data(), salt.size());
  return fnv1a(tokens.data(), tokens.size() * sizeof(std::int32_t), h);
}

}  // namespace kvstash::router
