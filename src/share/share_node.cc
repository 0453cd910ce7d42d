#include "share/share_node.h"

#include "common/prometheus_text.h"

#include <algorithm>
#include <cstring>

#include "cache/disk_tier.h"
#include "cache/file_system.h"
#include "cache/log.h"
#include "cache/prefix_alias.h"
#include "common/prometheus_text.h"
#include "cache/response_record.h"
#include "share/peers_tier.h"
#include "share/response_peers_tier.h"

namespace kvstash::share {

ShareNode::ShareNode(ShareOptions options, std::shared_ptr<const identity::NodeIdentity> identity,
                     std::shared_ptr<const identity::TrustList> trust)
    : options_([&] {
        options.fetch.counters = &counters_.peer_io;  // every peer request is counted here
        return std::move(options);
      }()),
      identity_(std::move(identity)),
      trust_(std::move(trust)),
      spot_checks_(std::make_unique<SpotChecks>(options_.spot_checks)) {}

Expected<std::shared_ptr<ShareNode>> ShareNode::start(const ShareOptions& options,
                                                      std::shared_ptr<const identity::NodeIdentity> identity,
                                                      std::shared_ptr<const identity::TrustList> trust) {
  if (!identity || !trust) return invalid_argument("peer sharing needs the node's identity and trust list");
  if (!options.peer_url.empty()) {
    if (auto u = parse_peer_url(options.peer_url); !u) return Status(u.status().code(), "--peer-url: " + u.status().message());
  }
  if (options.reannounce_interval.count() <= 0 || options.reannounce_interval >= options.dht.value_ttl) {
    return invalid_argument("peer sharing: the re-announce interval must be positive and shorter than the value TTL");
  }
  auto dht = DhtNode::start(options.dht);
  if (!dht) return dht.status();
  std::shared_ptr<ShareNode> node(new ShareNode(options, std::move(identity), std::move(trust)));
  node->dht_ = std::move(*dht);
  node->peer_url_ = options.peer_url;
  node->load_bans();
  node->reannouncer_ = std::thread([raw = node.get()] { raw->reannounce_loop(); });
  if (options.erasure) node->placer_ = std::thread([raw = node.get()] { raw->placement_loop(); });
  cache::log_info("peer sharing: dht node " + node->dht_->node_id() + " on udp port " +
                   std::to_string(node->dht_->port()) + (options.dht.bootstrap.empty() ? " (first node)" : ", bootstrap " +
                   [&] { std::string s; for (auto& b : options.dht.bootstrap) s += (s.empty() ? "" : ",") + b; return s; }()) +
                   (options.share_salted ? "; salted chunks are shared (--share-salted)" : "; salted chunks stay here"));
  return node;
}

ShareNode::~ShareNode() { stop(); }

std::unique_ptr<cache::Tier> ShareNode::make_peers_tier() { return std::make_unique<PeersTier>(shared_from_this()); }

std::unique_ptr<cache::Tier> ShareNode::make_response_peers_tier() {
  return std::make_unique<ResponsePeersTier>(shared_from_this());
}

bool signed_here(const cache::Provenance& provenance) {
  return provenance.trust == cache::ChunkTrust::kComputed && provenance.producers.empty() && provenance.manifest.empty();
}

bool shareable(const cache::Provenance& provenance) {
  if (signed_here(provenance)) return true;
  return (provenance.trust == cache::ChunkTrust::kVerified || provenance.trust == cache::ChunkTrust::kSpotChecked) &&
         !provenance.manifest.empty();
}

std::string response_topic(const cache::ChunkKey& key) { return "kvstash-response-v1:" + key.hex(); }

void ShareNode::attach_response_store(cache::TieredStore* store) {
  std::lock_guard lock(mu_);
  if (!stopping_) response_store_ = store;
}

void ShareNode::announce_response(const cache::ChunkKey& key, const cache::ChunkHeader& header) {
  if (header.meta.salted && !options_.share_salted) {
    counters_.response_kept_salted.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::string url;
  {
    std::lock_guard lock(mu_);
    if (stopping_ || announced_responses_.size() >= options_.max_announced) return;
    if (!announced_responses_.insert(key).second) return;  // the loop refreshes it
    url = peer_url_;
  }
  if (!url.empty()) put_response_announcement(key, url);  // else set_peer_url() announces it
}

void ShareNode::put_response_announcement(const cache::ChunkKey& key, const std::string& url) {
  dht_->put(response_topic(key), url, [self = weak_from_this()](bool ok) {
    if (auto node = self.lock()) {
      (ok ? node->counters_.response_announcements_ok : node->counters_.response_announcements_failed).fetch_add(1);
    }
  });
}

void ShareNode::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !reannouncer_.joinable() && !placer_.joinable()) return;
    stopping_ = true;
    store_ = nullptr;
    response_store_ = nullptr;
  }
  wake_.notify_all();
  placement_wake_.notify_all();
  if (reannouncer_.joinable()) reannouncer_.join();
  if (placer_.joinable()) placer_.join();
  if (dht_) dht_->stop();
}

void ShareNode::attach_store(cache::TieredStore* store) {
  std::lock_guard lock(mu_);
  if (!stopping_) store_ = store;
}

std::string ShareNode::peer_url() const {
  std::lock_guard lock(mu_);
  return peer_url_;
}

void ShareNode::set_peer_url(const std::string& url) {
  std::vector<cache::ChunkKey> pending, pending_responses;
  std::string announced_url;
  {
    std::lock_guard lock(mu_);
    if (peer_url_.empty()) peer_url_ = url;  // else --peer-url was given: it wins
    announced_url = peer_url_;
    pending.assign(announced_.begin(), announced_.end());
    pending_responses.assign(announced_responses_.begin(), announced_responses_.end());
    walk_pending_ = true;
  }
  wake_.notify_all();
  cache::log_info("peer sharing: announcing chunks as " + announced_url);
  put_directory_entry(announced_url);
  for (const auto& key : pending) put_announcement(key, announced_url);
  for (const auto& key : pending_responses) put_response_announcement(key, announced_url);
}

TrustPolicy ShareNode::trust_policy() const {
  TrustPolicy p;
  p.trusted = [trust = trust_, any = options_.trust_any](const identity::PublicKey& k) { return any || trust->trusts(k); };
  p.banned = [self = weak_from_this()](const identity::PublicKey& k) {
    auto node = self.lock();
    return node && node->banned(k);
  };
  return p;
}

void ShareNode::ban(const identity::PublicKey& producer) {
  std::vector<cache::ChunkKey> drop;
  cache::TieredStore* store = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!banned_.insert(producer).second) return;
    if (auto it = unchecked_.find(producer); it != unchecked_.end()) {
      drop = std::move(it->second);
      unchecked_.erase(it);
    }
    for (const auto& key : drop) {
      manifests_.erase(key);
      announced_.erase(key);
    }
    store = store_;
    purge_pending_ = true;  // the walk for what derives from it runs on the re-announce thread
  }
  wake_.notify_all();
  save_bans();
  cache::log_warning("peer sharing: producer " + identity::to_hex(producer) + " failed a spot check: banned; " +
                     std::to_string(drop.size()) + " of its chunks dropped");
  for (std::size_t t = 0; store && t < store->tier_count(); ++t) {
    if (store->tier(t).name() == "peers") continue;
    for (const auto& key : drop) (void)store->tier(t).erase(key);
  }
  for (const auto& callback : ban_callbacks_) callback(producer);
}

void ShareNode::remember_unchecked(const identity::PublicKey& producer, const cache::ChunkKey& key) {
  std::lock_guard lock(mu_);
  auto& keys = unchecked_[producer];
  if (keys.size() < options_.max_manifests) keys.push_back(key);
}

void ShareNode::announce(const cache::ChunkKey& key, const cache::ChunkHeader& header) {
  // Prefix aliases stay local: peers find chunks by their own keys, and an alias per block would
  // cost a DHT put per block.
  if (header.meta.kv_format == cache::kAliasKvFormat) return;
  if (header.meta.salted && !options_.share_salted) {
    counters_.kept_salted.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!shareable(header.meta.provenance) || derives_from_banned(header.meta.provenance)) {
    counters_.kept_unchecked.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::string url;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (!announced_.insert(key).second) return;  // already announced; the loop refreshes it
    if (announced_.size() > options_.max_announced) {
      announced_.erase(key);
      return;
    }
    url = peer_url_;
  }
  if (!url.empty()) put_announcement(key, url);
}

void ShareNode::put_announcement(const cache::ChunkKey& key, const std::string& url) {
  dht_->announce(key, url, [self = weak_from_this()](bool ok) {
    if (auto node = self.lock()) (ok ? node->counters_.announcements_ok : node->counters_.announcements_failed).fetch_add(1);
  });
}

void ShareNode::remember_manifest(const Manifest& manifest, std::uint64_t payload_checksum) {
  std::lock_guard lock(mu_);
  if (manifests_.size() >= options_.max_manifests) manifests_.erase(manifests_.begin());  // any one: a bound, not a policy
  manifests_[manifest.meta.key] = {encode_manifest(manifest), payload_checksum};
}

void ShareNode::announce_disk(cache::TieredStore* store, bool records) {
  const std::size_t batch = std::max<std::size_t>(1, options_.startup_announce_per_second / 10);
  const std::uint64_t header_bytes = cache::chunk_header_max_size();
  std::size_t announced = 0;
  for (std::size_t t = 0; store && t < store->tier_count(); ++t) {
    auto* disk = dynamic_cast<cache::DiskTier*>(&store->tier(t));
    if (!disk) continue;
    auto keys = disk->list_keys();
    if (!keys) continue;
    for (std::size_t i = 0; i < keys->size(); ++i) {
      if (i > 0 && i % batch == 0) {  // a tenth of a second per batch: the rate
        std::unique_lock lock(mu_);
        if (wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_; })) return;
      }
      const cache::ChunkKey& key = (*keys)[i];
      auto prefix = cache::posix_file_system()->read_file(disk->path_of(key), header_bytes);
      if (!prefix) continue;  // evicted since
      auto header = cache::parse_chunk_header(*prefix);
      if (!header || header->meta.key != key) continue;
      if (header->meta.kv_format == cache::kAliasKvFormat) continue;  // local only (see announce)
      const bool is_record = header->meta.kv_format == cache::kResponseKvFormat;
      if (is_record != records) continue;
      if (records) {
        announce_response(key, *header);
      } else {
        announce(key, *header);
      }
      ++announced;
    }
  }
  if (announced > 0) {
    counters_.startup_announced.fetch_add(announced, std::memory_order_relaxed);
    cache::log_info("peer sharing: " + std::to_string(announced) + (records ? " response records" : " chunks") +
                    " found on disk offered to peers");
  }
}

std::vector<bool> ShareNode::held_locally(cache::TieredStore* store, const std::vector<cache::ChunkKey>& keys) {
  std::vector<bool> held(keys.size(), false);
  for (std::size_t t = 0; store && t < store->tier_count(); ++t) {
    const std::string name = store->tier(t).name();
    if (name == "peers" || name == "redis") continue;
    const std::vector<bool> h = store->tier(t).holds(keys);
    for (std::size_t i = 0; i < keys.size() && i < h.size(); ++i) held[i] = held[i] || h[i];
  }
  return held;
}

void ShareNode::reannounce_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait_for(lock, options_.reannounce_interval, [this] { return stopping_ || walk_pending_ || purge_pending_; });
    if (stopping_) return;
    if (walk_pending_ || purge_pending_) {
      const bool walk = walk_pending_;
      walk_pending_ = false;
      purge_pending_ = false;
      cache::TieredStore* store = store_;
      cache::TieredStore* response_store = response_store_;
      lock.unlock();
      purge_banned(store, false);  // first: a purged chunk is not announced
      purge_banned(response_store, true);
      if (walk) {
        announce_disk(store, false);
        announce_disk(response_store, true);
      }
      lock.lock();
      continue;
    }
    std::vector<cache::ChunkKey> keys(announced_.begin(), announced_.end());
    std::vector<cache::ChunkKey> responses(announced_responses_.begin(), announced_responses_.end());
    std::vector<std::pair<cache::ChunkKey, int>> held_fragments(fragment_order_.begin(), fragment_order_.end());
    cache::TieredStore* store = store_;
    cache::TieredStore* response_store = response_store_;
    const std::string url = peer_url_;
    lock.unlock();
    if (!url.empty()) {
      put_directory_entry(url);
      for (const auto& [key, index] : held_fragments) dht_->put(fragment_topic(key), std::to_string(index) + " " + url);
    }
    // Which announced chunks and records a local tier still holds (tier locks, never ours).
    const std::vector<bool> held = held_locally(store, keys);
    const std::vector<bool> held_responses = held_locally(response_store, responses);
    for (std::size_t i = 0; i < keys.size() && !url.empty(); ++i) {
      if (held[i]) put_announcement(keys[i], url);
    }
    for (std::size_t i = 0; i < responses.size() && !url.empty(); ++i) {
      if (held_responses[i]) put_response_announcement(responses[i], url);
    }
    lock.lock();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!held[i]) announced_.erase(keys[i]);
    }
    for (std::size_t i = 0; i < responses.size(); ++i) {
      if (!held_responses[i]) announced_responses_.erase(responses[i]);
    }
  }
}

bool ShareNode::chunk_acceptable(const cache::ChunkHeader& header) const {
  const cache::Provenance& provenance = header.meta.provenance;
  if (derives_from_banned(provenance)) return false;
  const bool relayed = provenance.trust == cache::ChunkTrust::kVerified || provenance.trust == cache::ChunkTrust::kSpotChecked;
  if (!relayed) return true;
  if (provenance.producers.empty()) return false;  // a relayed chunk names its producer
  const identity::PublicKey& producer = provenance.producers.front();
  if (trusts(producer)) return true;
  return provenance.trust == cache::ChunkTrust::kSpotChecked && options_.trust_any;
}

std::string ShareNode::render_metrics() const {
  PrometheusText m;
  auto value = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  std::size_t announced = 0, banned = 0, placements_waiting = 0, announced_responses = 0;
  {
    std::lock_guard lock(mu_);
    announced = announced_.size();
    banned = banned_.size();
    placements_waiting = placements_.size();
    announced_responses = announced_responses_.size();
  }
  m.family("kvstash_share_dht_nodes", "gauge", "DHT nodes this node knows (good and dubious)")
      .sample(dht_ ? dht_->known_nodes() : 0);
  m.family("kvstash_share_announced_chunks", "gauge", "Chunks this node announces as their provider").sample(announced);
  m.family("kvstash_share_banned_producers", "gauge", "Producers banned here (failed spot checks)").sample(banned);
  m.family("kvstash_share_announcements_total", "counter", "DHT announcements by result")
      .sample("result", "ok", value(counters_.announcements_ok))
      .sample("result", "failed", value(counters_.announcements_failed));
  m.family("kvstash_share_lookups_total", "counter", "DHT lookups of chunk keys by result")
      .sample("result", "hit", value(counters_.lookups_hit))
      .sample("result", "miss", value(counters_.lookups_miss))
      .sample("result", "timeout", value(counters_.lookups_timeout));
  m.counter("kvstash_share_fetches_total", "Chunks fetched from peers and verified", value(counters_.fetches_ok));
  m.counter("kvstash_share_fetch_errors_total", "Chunk fetches that failed (unreachable, timeout, too large, 404)",
            value(counters_.fetch_errors));
  m.counter("kvstash_share_fetched_bytes_total", "Chunk bytes fetched from peers and verified", value(counters_.fetched_bytes));
  m.counter("kvstash_share_served_chunks_total", "Chunks served to peers", value(counters_.served_chunks));
  m.counter("kvstash_share_served_bytes_total", "Chunk bytes served to peers", value(counters_.served_bytes));
  m.counter("kvstash_share_refused_salted_total", "Requests for a salted chunk refused (no --share-salted)",
            value(counters_.refused_salted));
  m.counter("kvstash_share_kept_salted_total", "Salted chunks stored and not announced (no --share-salted)",
            value(counters_.kept_salted));
  m.family("kvstash_share_rejections_total", "counter", "Chunks from peers rejected before reaching the engine, by reason");
  for (int r = 1; r < 8; ++r) {
    m.sample("reason", manifest_error_name(static_cast<ManifestError>(r)), value(counters_.rejected[r]));
  }
  m.sample("reason", "fragment", value(counters_.fragments_rejected))
      .sample("reason", "spot_check", value(counters_.spot_checks_failed))
      .sample("reason", "alias", value(counters_.aliases_refused));
  m.counter("kvstash_share_fragments_placed_total", "Fragments of this node's chunks placed on peers (--erasure)",
            value(counters_.fragments_placed));
  m.counter("kvstash_share_fragment_place_errors_total", "Fragments that could not be placed (no peer, refused, unreachable)",
            value(counters_.fragment_place_errors));
  m.counter("kvstash_share_fragments_accepted_total", "Fragments peers placed here and this node holds",
            value(counters_.fragments_accepted));
  m.counter("kvstash_share_fragment_placements_dropped_total", "Chunks not placed as fragments: the placement queue was full",
            value(counters_.placements_dropped));
  m.family("kvstash_share_fragment_placement_queue", "gauge", "Chunks waiting for fragment placement")
      .sample(placements_waiting);
  m.family("kvstash_share_peer_requests_total", "counter",
           "Requests to peers (every GET and PUT), and those cut at the wall-clock deadline or the byte cap")
      .sample("end", "all", value(counters_.peer_io.requests))
      .sample("end", "deadline", value(counters_.peer_io.deadline_hit))
      .sample("end", "cap", value(counters_.peer_io.cap_hit));
  m.counter("kvstash_share_fragments_refused_total", "Fragment PUTs refused (unsigned, untrusted producer, bad hash)",
            value(counters_.fragments_refused));
  m.family("kvstash_share_spot_checks_total", "counter",
           "Chunks of unknown producers held for a spot check (--trust any), by result; dropped: refused unchecked "
           "while the pending set was full; inconclusive: this node's KV of it was computed on unchecked KV")
      .sample("result", "passed", value(counters_.spot_checks_passed))
      .sample("result", "failed", value(counters_.spot_checks_failed))
      .sample("result", "expired", spot_checks_->expired())
      .sample("result", "dropped", value(counters_.spot_checks_dropped))
      .sample("result", "inconclusive", value(counters_.spot_checks_inconclusive));
  m.family("kvstash_share_spot_checks_pending", "gauge", "Spot checks waiting for this node's own KV of the chunk")
      .sample(spot_checks_->pending(SpotChecks::Clock::now()));
  m.family("kvstash_share_directory_nodes", "gauge", "Trusted, verified node directory entries (fragment holders)")
      .sample(value(counters_.directory_nodes));
  m.family("kvstash_share_directory_ignored_total", "counter", "Node directory entries read and ignored, by reason");
  for (int r = 1; r < kDirectoryEntryErrors; ++r) {
    m.sample("reason", directory_entry_error_name(static_cast<DirectoryEntryError>(r)), value(counters_.directory_ignored[r]));
  }
  m.counter("kvstash_share_unchecked_chunks_total", "Chunks of unknown producers accepted without a spot check",
            value(counters_.unchecked_accepted));
  const std::uint32_t diff_bits = counters_.spot_check_max_diff_bits.load(std::memory_order_relaxed);
  float diff = 0;
  std::memcpy(&diff, &diff_bits, sizeof diff);
  m.gauge("kvstash_share_spot_check_max_abs_diff", "Largest |ours - theirs| of a KV element seen in spot checks", diff);
  m.family("kvstash_share_response_announced_records", "gauge", "Response-cache records this node announces")
      .sample(announced_responses);
  m.family("kvstash_share_response_announcements_total", "counter", "DHT announcements of response records by result")
      .sample("result", "ok", value(counters_.response_announcements_ok))
      .sample("result", "failed", value(counters_.response_announcements_failed));
  m.family("kvstash_share_response_lookups_total", "counter", "DHT lookups of response record keys by result")
      .sample("result", "hit", value(counters_.response_lookups_hit))
      .sample("result", "miss", value(counters_.response_lookups_miss))
      .sample("result", "timeout", value(counters_.response_lookups_timeout));
  m.counter("kvstash_share_response_fetches_total", "Response records fetched from peers and verified",
            value(counters_.responses_fetched));
  m.counter("kvstash_share_response_fetch_errors_total", "Response record fetches that failed (unreachable, timeout, 404)",
            value(counters_.response_fetch_errors));
  m.counter("kvstash_share_response_served_total", "Response records served to peers", value(counters_.responses_served));
  m.counter("kvstash_share_response_refused_salted_total", "Requests for a salted request's record refused",
            value(counters_.response_refused_salted));
  m.counter("kvstash_share_response_kept_salted_total", "Salted requests' records stored and not announced",
            value(counters_.response_kept_salted));
  m.family("kvstash_share_response_rejections_total", "counter", "Response records from peers refused, by reason");
  for (int r = 0; r < 4; ++r) m.sample("reason", kResponseRejectionNames[r], value(counters_.response_rejected[r]));
  m.counter("kvstash_share_refused_unchecked_total",
            "Chunk requests refused: unchecked, computed on unchecked KV or of unknown origin", value(counters_.refused_unchecked));
  m.counter("kvstash_share_kept_unchecked_total", "Chunks stored here and not announced: not shareable (unchecked provenance)",
            value(counters_.kept_unchecked));
  m.counter("kvstash_share_purged_chunks_total", "Chunks erased because they derive from a banned producer",
            value(counters_.purged_chunks));
  m.counter("kvstash_share_purged_records_total", "Response records and semantic entries of banned producers erased",
            value(counters_.purged_records));
  m.counter("kvstash_share_startup_announced_total", "Chunks and response records found on disk at start and announced",
            value(counters_.startup_announced));
  m.counter("kvstash_share_chunks_reconstructed_total", "Chunks rebuilt from K fragments and verified",
            value(counters_.chunks_reconstructed));
  return m.take();
}

}  // namespace kvstash::share
