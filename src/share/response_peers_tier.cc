#include "share/response_peers_tier.h"

#include <algorithm>

#include "cache/response_record.h"

namespace kvstash::share {
namespace {

constexpr std::size_t kMaxRemembered = 1 << 16;  // remembered lookups; past it the expired go, then all

}  // namespace

std::vector<std::vector<std::string>> ResponsePeersTier::providers(std::span<const cache::ChunkKey> keys) {
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
  std::vector<std::string> topics;
  for (std::size_t i : unknown) topics.push_back(response_topic(keys[i]));
  const std::vector<DhtNode::Lookup> found = node_->dht()->get(topics, node_->options().lookup_timeout);
  const std::string self = node_->peer_url();
  ShareCounters& c = node_->counters();
  const auto later = Clock::now();
  std::lock_guard lock(mu_);
  if (known_.size() + unknown.size() > kMaxRemembered) {
    std::erase_if(known_, [&](const auto& e) { return e.second.expires <= later; });
    if (known_.size() + unknown.size() > kMaxRemembered) known_.clear();
  }
  for (std::size_t j = 0; j < unknown.size() && j < found.size(); ++j) {
    Providers p;
    for (const std::string& url : found[j].providers) {
      if (url != self && parse_peer_url(url)) p.urls.push_back(url);
    }
    if (!p.urls.empty()) {
      c.response_lookups_hit.fetch_add(1, std::memory_order_relaxed);
    } else if (found[j].completed) {
      c.response_lookups_miss.fetch_add(1, std::memory_order_relaxed);
    } else {
      c.response_lookups_timeout.fetch_add(1, std::memory_order_relaxed);
    }
    p.expires = later + (p.urls.empty() ? node_->options().negative_ttl : node_->options().positive_ttl);
    out[unknown[j]] = p.urls;
    known_[keys[unknown[j]]] = std::move(p);
  }
  return out;
}

std::vector<bool> ResponsePeersTier::holds(std::span<const cache::ChunkKey> keys) {
  const auto found = providers(keys);
  std::vector<bool> out(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = !found[i].empty();
  return out;
}

std::size_t ResponsePeersTier::contains(std::span<const cache::ChunkKey> keys) {
  const std::vector<bool> held = holds(keys);
  std::size_t n = 0;
  while (n < held.size() && held[n]) ++n;
  return n;
}

std::optional<ResponseRejection> ResponsePeersTier::check(const cache::ChunkKey& key,
                                                          std::span<const std::uint8_t> bytes) const {
  auto header = cache::verify_chunk(bytes);
  if (!header || header->meta.kv_format != cache::kResponseKvFormat) return ResponseRejection::kRecord;
  if (header->meta.key != key) return ResponseRejection::kKey;
  auto view = cache::decode_chunk(bytes, header->meta);
  if (!view) return ResponseRejection::kRecord;
  auto record = cache::decode_response_record(view->payload);
  if (!record) return ResponseRejection::kRecord;
  if (record->request_key != key || record->model_fingerprint != header->meta.model_fingerprint) {
    return ResponseRejection::kKey;
  }
  if (!identity::verify(record->producer, cache::kResponseSignatureDomain, cache::signed_message(*record),
                        record->signature)) {
    return ResponseRejection::kSignature;
  }
  if (!node_->trusts(record->producer)) return ResponseRejection::kUntrusted;
  return std::nullopt;
}

Expected<cache::Bytes> ResponsePeersTier::get(const cache::ChunkKey& key) {
  const auto start = Clock::now();
  const std::vector<std::string> urls = providers(std::span<const cache::ChunkKey>(&key, 1)).front();
  ShareCounters& c = node_->counters();
  const std::string key_hex = key.hex();
  std::vector<std::string> refused;  // not asked again for this key until the next lookup
  for (std::size_t i = 0; i < urls.size() && i < node_->options().max_providers_tried; ++i) {
    auto fetched = fetch_response_record(urls[i], key_hex, node_->options().fetch);
    if (!fetched) {
      c.response_fetch_errors.fetch_add(1, std::memory_order_relaxed);
      refused.push_back(urls[i]);
      continue;
    }
    if (auto why = check(key, *fetched)) {
      c.response_rejected[static_cast<int>(*why)].fetch_add(1, std::memory_order_relaxed);
      counters_.rejected();
      refused.push_back(urls[i]);
      continue;
    }
    node_->announce_response(key, *cache::parse_chunk_header(*fetched));  // checked whole above
    c.responses_fetched.fetch_add(1, std::memory_order_relaxed);
    counters_.hit(fetched->size(), Clock::now() - start);
    return std::move(*fetched);
  }
  if (!refused.empty()) {
    std::lock_guard lock(mu_);
    if (auto it = known_.find(key); it != known_.end()) {
      std::erase_if(it->second.urls, [&](const std::string& u) {
        return std::find(refused.begin(), refused.end(), u) != refused.end();
      });
    }
  }
  counters_.miss();
  return not_found("peers: no provider delivered a verified response record " + key_hex);
}

Status ResponsePeersTier::put(const cache::ChunkKey& key, std::span<const std::uint8_t> bytes) {
  auto header = cache::parse_chunk_header(bytes);
  if (!header || header->meta.key != key || header->meta.kv_format != cache::kResponseKvFormat) {
    return invalid_argument("peers: not a response record of key " + key.hex());
  }
  node_->announce_response(key, *header);
  return Status::ok();
}

Status ResponsePeersTier::erase(const cache::ChunkKey& key) {
  std::lock_guard lock(mu_);
  known_.erase(key);
  return Status::ok();
}

cache::TierStats ResponsePeersTier::stats() const {
  cache::TierStats s;
  counters_.fill(s);
  return s;
}

}  // namespace kvstash::share
