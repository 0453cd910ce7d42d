// PeersTier: other kvstash nodes as the slowest tier of the TieredStore.
//
// holds()/contains() ask the DHT who provides each key (all keys of a prefix in one parallel
// lookup, bounded by ShareOptions::lookup_timeout); answers are remembered: providers for
// positive_ttl, "nobody" (and timeouts) for negative_ttl, so a cold prompt costs one bounded
// lookup, not one per request. get() asks the key's providers one after the other (at most
// max_providers_tried; the store runs up to load_depth gets of one prefix in parallel), each
// request under one wall-clock deadline and one byte cap, headers included (ShareOptions::fetch,
// peer_client.h; so one get lasts at most max_providers_tried deadlines, plus the fragment
// fetches, run in parallel, one deadline per holder tried), and returns the first chunk that
// passes check_chunk() (signed
// manifest, trusted producer, header and SHA-256): nothing unverified ever leaves this tier. A
// rejection is counted by reason and the next provider is tried. When no whole-chunk provider
// delivers, the chunk's erasure-coded fragments are fetched in parallel (one holder per index,
// the next holder of an index when one fails): the first fragment set that verifies and names a
// trusted producer fixes every fragment's SHA-256, a fragment that does not match is refused
// (counted, reason "fragment") and another index is used; any K good ones are decoded and the
// result goes through check_chunk() like a fetched chunk. The chunk returned carries its provenance
// in its own header (cache/chunk_codec.h): verified (trusted producer) or unchecked, the producer,
// and the producer's manifest exactly as received, so every tier keeps it across restarts and the
// chunk endpoint serves it under that manifest, never re-signed. Only a verified chunk is
// announced with this node as a provider too.
//
// Prefix aliases (cache/prefix_alias.h) never come from peers: an alias names another chunk whose
// first tokens stand for the key, which no manifest vouches for, so one fetched (whole or
// rebuilt) is refused (kvstash_share_rejections_total{reason="alias"}) and the next provider tried.
//
// Under --trust any, a chunk whose producer is not on the trust list goes through a spot check
// with probability --spot-check (spot_check.h): get() reports it missing so that the engine
// computes it, and put() of the engine's own chunk (or of its alias naming a longer own chunk)
// compares the two. A chunk is held back only when its check was queued; while the pending set
// is full no unknown producer's chunk is used (a miss, counted "dropped").
//
// put() stores nothing remotely: it announces the chunk (ShareNode::announce, which keeps salted
// chunks private), since the store writes every new chunk to every tier, and queues it for
// fragment placement (--erasure; asynchronous, ShareNode::place_fragments), so the store's writer
// never waits on a peer. erase() forgets the key's providers. entries/bytes_used are 0: peers hold
// the bytes.
//
// remote() is true: the TieredStore runs get() on its bounded remote pool (a full queue is a miss)
// and never plans it into a local-only load, so a stalled peer never delays the memory, disk and
// redis tiers (tiered_store.h). holds() waits on the DHT at most lookup_timeout.
//
// Thread safety: safe from many threads (the store's loader and writer threads).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/tier.h"
#include "share/share_node.h"
#include "share/spot_check.h"

namespace kvstash::share {

class PeersTier final : public cache::Tier {
 public:
  explicit PeersTier(std::shared_ptr<ShareNode> node) : node_(std::move(node)) {}

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
    std::vector<std::string> urls;                     // whole-chunk providers
    std::vector<std::pair<int, std::string>> fragments;  // (index, holder) of erasure-coded fragments
    bool empty() const { return urls.empty() && fragments.empty(); }
    Clock::time_point expires;
  };
  // The providers of each key (cached, else one DHT lookup for all the unknown ones).
  std::vector<Providers> providers(std::span<const cache::ChunkKey> keys);
  // The chunk rebuilt from any K verified fragments, then checked against its manifest.
  Expected<cache::Bytes> reconstruct(const cache::ChunkKey& key, const std::vector<std::pair<int, std::string>>& holders);

  const std::shared_ptr<ShareNode> node_;
  cache::TierCounters counters_;
  // True when the chunk may be used now; false when it was held back for a spot check (queued in
  // node_->spot_checks()) or refused because the pending set is full.
  bool admit_unknown(const cache::ChunkKey& key, const Manifest& manifest, std::span<const std::uint8_t> chunk);
  // The engine's own chunk `ours` (a real chunk, not an alias) was stored: completes the check
  // waiting for its key, and keeps it if an alias may name it for another waiting check.
  void finish_spot_check(const cache::ChunkKey& key, std::span<const std::uint8_t> ours, const cache::ChunkHeader& header);
  // The engine stored an alias under `key` for the first tokens of one of its own chunks.
  void finish_spot_check_by_alias(const cache::ChunkKey& key, std::span<const std::uint8_t> alias,
                                  const cache::ChunkHeader& header);
  // Counts and acts on a comparison (a failure bans the producer).
  void record_spot_check(const identity::PublicKey& producer, const KvComparison& cmp);
  // The fetched chunk with its provenance recorded in its header (kVerified for a trusted producer,
  // else kUnchecked; the producer and its manifest as received), announced when trusted. Every
  // tier the store promotes it into then keeps where it came from.
  Expected<cache::Bytes> with_fetched_provenance(std::span<const std::uint8_t> chunk, const Manifest& manifest,
                                                 const std::string& manifest_bytes, bool trusted);

  std::mutex mu_;
  std::unordered_map<cache::ChunkKey, Providers> known_;  // guarded by mu_
};

}  // namespace kvstash::share
