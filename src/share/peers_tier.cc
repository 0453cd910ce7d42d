#include "share/peers_tier.h"

#include <algorithm>

namespace kvstash::share {
namespace {

// Remembered lookups at most; past it the expired ones go, then (a flood of distinct keys) all.
constexpr std::size_t kMaxRemembered = 1 << 16;

}  // namespace

std::vector<std::vector<std::string>> PeersTier::providers(std::span<const cache::ChunkKey> keys) {
  std::vector<std::vector<std::string>> out(keys.size());
  std::vector<std::size_t> unknown;
  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto it = known_.find(keys[i]);
      if (it != known_.end() && it->second.expires > now) {
        out[i] = it->second.urls;
      } else {
        unknown.push_back(i);
      }
    }
  }
  if (unknown.empty() || !node_->dht()) return out;
  std::vector<cache::ChunkKey> ask;
  for (std::size_t i : unknown) ask.push_back(keys[i]);
  const std::vector<DhtNode::Lookup> found = node_->dht()->lookup(ask, node_->options().lookup_timeout);
  const std::string self = node_->peer_url();
  ShareCounters& c = node_->counters();
  const auto later = Clock::now();
  std::lock_guard lock(mu_);
  if (known_.size() + ask.size() > kMaxRemembered) {
    std::erase_if(known_, [&](const auto& e) { return e.second.expires <= later; });
    if (known_.size() + ask.size() > kMaxRemembered) known_.clear();
  }
  for (std::size_t j = 0; j < ask.size() && j < found.size(); ++j) {
    std::vector<std::string> urls;
    for (const std::string& url : found[j].providers) {
      if (url != self) urls.push_back(url);
    }
    if (!urls.empty()) {
      c.lookups_hit.fetch_add(1, std::memory_order_relaxed);
    } else if (found[j].completed) {
      c.lookups_miss.fetch_add(1, std::memory_order_relaxed);
    } else {
      c.lookups_timeout.fetch_add(1, std::memory_order_relaxed);
    }
    const auto ttl = urls.empty() ? node_->options().negative_ttl : node_->options().positive_ttl;
    known_[ask[j]] = Providers{urls, later + ttl};
    out[unknown[j]] = std::move(urls);
  }
  return out;
}

std::vector<bool> PeersTier::holds(std::span<const cache::ChunkKey> keys) {
  const auto found = providers(keys);
  std::vector<bool> out(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = !found[i].empty();
  return out;
}

std::size_t PeersTier::contains(std::span<const cache::ChunkKey> keys) {
  const std::vector<bool> held = holds(keys);
  std::size_t n = 0;
  while (n < held.size() && held[n]) ++n;
  return n;
}

Expected<cache::Bytes> PeersTier::get(const cache::ChunkKey& key) {
  const auto start = Clock::now();
  std::vector<std::string> urls = providers(std::span<const cache::ChunkKey>(&key, 1)).front();
  ShareCounters& c = node_->counters();
  const TrustPolicy policy = node_->trust_policy();
  const std::string key_hex = key.hex();
  std::vector<std::string> refused;  // providers that sent a chunk we rejected: not asked again for it
  for (std::size_t i = 0; i < urls.size() && i < node_->options().max_providers_tried; ++i) {
    auto fetched = fetch_chunk(urls[i], key_hex, node_->options().fetch);
    if (!fetched) {
      c.fetch_errors.fetch_add(1, std::memory_order_relaxed);
      refused.push_back(urls[i]);
      continue;
    }
    Manifest manifest;
    ManifestError why = ManifestError::kNone;
    if (!check_chunk(fetched->manifest, fetched->chunk, key, policy, &manifest, &why)) {
      c.rejected[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
      counters_.rejected();
      refused.push_back(urls[i]);
      continue;
    }
    const auto header = cache::parse_chunk_header(fetched->chunk);  // checked whole by check_chunk
    node_->remember_manifest(manifest, header->payload_checksum);
    node_->announce(key, *header);
    c.fetches_ok.fetch_add(1, std::memory_order_relaxed);
    c.fetched_bytes.fetch_add(fetched->chunk.size(), std::memory_order_relaxed);
    counters_.hit(fetched->chunk.size(), Clock::now() - start);
    return std::move(fetched->chunk);
  }
  if (!refused.empty()) {  // the next lookup of this key skips the providers that failed it
    std::lock_guard lock(mu_);
    if (auto it = known_.find(key); it != known_.end()) {
      std::erase_if(it->second.urls, [&](const std::string& u) {
        return std::find(refused.begin(), refused.end(), u) != refused.end();
      });
    }
  }
  counters_.miss();
  return not_found("peers: no provider supplied a verified chunk " + key_hex);
}

Status PeersTier::put(const cache::ChunkKey& key, std::span<const std::uint8_t> bytes) {
  auto header = cache::parse_chunk_header(bytes);
  if (!header || header->meta.key != key) return invalid_argument("peers: not a chunk of key " + key.hex());
  node_->announce(key, *header);
  return Status::ok();
}

Status PeersTier::erase(const cache::ChunkKey& key) {
  std::lock_guard lock(mu_);
  known_.erase(key);
  return Status::ok();
}

cache::TierStats PeersTier::stats() const {
  cache::TierStats s;
  counters_.fill(s);
  return s;
}

}  // namespace kvstash::share
