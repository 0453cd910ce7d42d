// ResponsePeersTier: other kvstash nodes as the slowest tier of the response cache's record store
// (server/response_cache.h), the way PeersTier (share/peers_tier.h) serves the KV chunk store.
//
// holds()/contains() ask the DHT who announced each record key under response_topic(key), bounded
// by ShareOptions::lookup_timeout; answers are remembered (providers for positive_ttl, "nobody" and
// timeouts for negative_ttl), so a miss costs at most one bounded lookup. get() asks the providers
// one after the other (at most max_providers_tried), each request under one wall-clock deadline
// and one byte cap, headers included (ShareOptions::fetch, peer_client.h), and returns the first
// record that passes every check before anything is stored or answered:
//   - the envelope verifies (XXH3), names the key asked for and the response kv_format;
//   - the record decodes and its request key is the key asked for, its model the envelope's;
//   - its output hash and ed25519 signature verify (domain kvstash-response-v1);
//   - its producer is on this node's trust list (--trust any does not apply: a record cannot be
//     spot-checked for less than computing it, so unknown producers are refused).
// A refusal is counted by reason (kvstash_share_response_rejections_total) and the next provider
// is tried. The store then verifies the envelope against the model fingerprint it expects and the
// response cache checks the record once more before serving it. A record returned is announced
// with this node as a provider too (salted ones only with --share-salted).
//
// put() stores nothing remotely: it announces the record (the store writes every new record to
// every tier). erase() forgets the key's providers. entries/bytes_used are 0.
//
// remote() is true: the record store runs get() on its bounded remote pool and the response cache
// asks it only from the store's remote lane, waiting at most its peer_timeout
// (server/response_cache.h): a local hit never waits on a peer.
//
// Thread safety: safe from many threads (the record store's loader and writer threads).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/tier.h"
#include "share/share_node.h"

namespace kvstash::share {

class ResponsePeersTier final : public cache::Tier {
 public:
  explicit ResponsePeersTier(std::shared_ptr<ShareNode> node) : node_(std::move(node)) {}

  std::string name() const override { return "peers"; }
  bool remote() const override { return true; }
  std::size_t contains(std::span<const cache::ChunkKey> keys) override;
  std::vector<bool> holds(std::span<const cache::ChunkKey> keys) override;
  Expected<cache::Bytes> get(const cache::ChunkKey& key) override;
  Status put(const cache::ChunkKey& key, std::span<const std::uint8_t> bytes) override;
  Status erase(const cache::ChunkKey& key) override;
  cache::TierStats stats() const override;
  Expected<std::vector<cache::ChunkKey>> list_keys() override { return std::vector<cache::ChunkKey>{}; }
  Status clear() override { return Status::ok(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Providers {
    std::vector<std::string> urls;
    Clock::time_point expires;
  };
  std::vector<std::vector<std::string>> providers(std::span<const cache::ChunkKey> keys);
  // Every check of the header comment; the reason of the first that fails.
  std::optional<ResponseRejection> check(const cache::ChunkKey& key, std::span<const std::uint8_t> bytes) const;

  const std::shared_ptr<ShareNode> node_;
  cache::TierCounters counters_;
  std::mutex mu_;
  std::unordered_map<cache::ChunkKey, Providers> known_;  // guarded by mu_
};

}  // namespace kvstash::share
