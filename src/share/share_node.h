// ShareNode: peer-to-peer KV sharing inside `kvstash serve` (issue 13). It owns this node's DHT
// node (share/dht_node.h), announces the chunks the node holds, answers peers' chunk requests,
// and backs the peers tier (share/peers_tier.h), the slowest tier of the TieredStore.
//
//   GET /v1/kv/chunks/{key}  the chunk as this node holds it (memory or disk tier) and, in the
//                            X-Kvstash-Manifest header, its signed manifest, chosen by the
//                            provenance stored in the chunk itself (cache/chunk_codec.h): the
//                            producer's manifest exactly as received for a chunk fetched verified
//                            (or spot-checked); this node's own signature only for a chunk it
//                            computed from KV it trusts. 404: not held, or not shareable (unchecked,
//                            computed on unchecked KV, a version-1 chunk of unknown origin, or
//                            derived from a banned producer); 403: a salted chunk without
//                            --share-salted.
//   PUT /v1/kv/fragments/{key}/{i}  a fragment of an erasure-coded chunk to hold (accepted when its
//                            signed fragment set verifies, its producer is trusted and its hash
//                            matches); GET returns it with its set and the chunk's manifest.
//   GET /v1/kv/responses/{key}  a response-cache record (cache/response_record.h) this node holds
//                            in its record store's memory or disk tier, in its chunk envelope; the
//                            record is signed by its producer, so no manifest travels with it.
//                            404: not held; 403: a salted request's record without --share-salted.
//   GET /v1/kv/peers         this node's identity, peer URL, DHT node and neighbours, trust list
//                            and banned producers, as JSON (`kvstash peers`).
//
// Announcing: every chunk the store writes (the peers tier's put(), called by the store's
// write-behind queue) and every chunk fetched and verified from a peer is announced as
// `key → peer_url`, unless it is salted and --share-salted is off, or its provenance is not
// shareable (see GET above): unchecked KV is never announced.
//
// Bans (a producer whose spot check failed) are kept in ShareOptions::ban_file and reloaded at
// start. A ban purges what derives from the producer: at once, the unchecked chunks remembered from
// it; then, on the re-announce thread, every chunk of the local tiers (memory, disk) whose
// provenance names it and every response record or semantic entry it signed (also walked on the
// disk tiers at start, for bans from before a restart); the engine's prefix-cache blocks through
// the on_ban callbacks; and, lazily, any other chunk a load meets (chunk_acceptable(), the store's
// filter: redis and whatever the walk missed is a miss and erased when read). A thread re-announces every
// `reannounce_interval` the announced chunks that a local tier still holds and forgets the rest.
//
// Response records (with --response-cache): the record store gets a response peers tier
// (share/response_peers_tier.h) and is attached with attach_response_store(); each record it
// stores or fetches is announced under response_topic(key), re-announced like chunks.
//
// At start (once set_peer_url() runs) the same thread walks the disk tiers' indexes (the KV
// store's and the record store's), reads each file's header only, and announces what may leave,
// at startup_announce_per_second: chunks kept from before a restart are offered again.
//
// Lifetime: create it before the store (its peers tier goes into the store), attach_store() once
// the store exists, set_peer_url() once the HTTP server listens, stop() before the store is
// destroyed (the re-announce thread reads the store's tiers).
//
// Thread safety: every public method may be called from any thread. Lock order: mu_ only; the
// DHT's and the tiers' own locks are never taken while holding it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cache/tiered_store.h"
#include "http/http_server.h"
#include "identity/identity.h"
#include "share/dht_node.h"
#include "share/directory_entry.h"
#include "share/erasure.h"
#include "share/manifest.h"
#include "share/peer_client.h"
#include "share/spot_check.h"

namespace kvstash::share {

struct ShareOptions {
  DhtOptions dht;                                     // --dht-port, --dht-bootstrap
  std::string peer_url;                               // --peer-url; "" = http://HOST:PORT of this server
  bool share_salted = false;                          // --share-salted: salted chunks may leave the node
  std::chrono::milliseconds lookup_timeout{500};      // one DHT lookup (all keys of a prefix at once)
  std::chrono::milliseconds negative_ttl{2000};       // "nobody has it" is believed this long
  std::chrono::milliseconds positive_ttl{30000};      // a key's providers are reused this long
  // One wall-clock deadline and one byte cap (head included) for every request to a peer: chunk,
  // record and fragment GETs, fragment PUTs (--peer-fetch-timeout-ms, --peer-fetch-max-bytes).
  FetchLimits fetch;
  std::size_t max_providers_tried = 4;                // providers asked for one chunk before a miss
  std::chrono::seconds reannounce_interval{300};      // < dht.value_ttl (600 s), so values never lapse
  std::size_t max_announced = 1 << 20;                // chunks kept announced at most
  // Chunks (and response records) found on the disk tier at start are announced at this rate, in
  // the background once the peer URL is known: a restarted node offers what it kept.
  std::size_t startup_announce_per_second = 500;
  std::size_t max_manifests = 1 << 16;                // remembered manifests (fetched and own)
  std::optional<ErasureScheme> erasure;               // --erasure K+M: also place coded fragments on peers
  // Placement runs on a thread of its own, never on the store's writer: chunks wait in a queue of
  // at most placement_queue (more are dropped, counted); one chunk's placement ends by
  // placement_timeout; each fragment is offered to at most max_fragment_holders peers in turn, and
  // a reconstruction fetches each index from at most that many holders, within one fetch timeout.
  std::size_t placement_queue = 64;
  std::chrono::milliseconds placement_timeout{5000};
  std::size_t max_fragment_holders = 3;               // --fragment-holders
  bool trust_any = false;                             // --trust any: unknown producers too, spot-checked
  double spot_check = 0.1;                            // --spot-check P: share of their chunks recomputed
  SpotCheckOptions spot_checks;                       // --spot-check-pending-max 256, --spot-check-expiry-ms 60000
  std::uint64_t max_fragment_bytes = std::uint64_t{256} << 20;  // fragments held for peers, 256 MiB
  // Banned producers, one hex key a line, rewritten at each ban; "" = bans last until exit.
  // `kvstash serve` keeps it next to the node's identity key (IDENTITY.banned).
  std::string ban_file;
};

// Provenance (cache/chunk_codec.h) as peer sharing reads it. A chunk this node signs: computed here
// from KV it trusts. A chunk it may serve or announce: one it signs, or one fetched verified or
// spot-checked whose producer's manifest it kept. Everything else (unchecked, computed on unchecked
// KV, version-1 chunks of unknown origin) stays on this node.
bool signed_here(const cache::Provenance& provenance);
bool shareable(const cache::Provenance& provenance);

// What /metrics shows (kvstash_share_*). Counters only grow.
struct ShareCounters {
  std::atomic<std::uint64_t> announcements_ok{0}, announcements_failed{0};
  std::atomic<std::uint64_t> lookups_hit{0}, lookups_miss{0}, lookups_timeout{0};
  std::atomic<std::uint64_t> fetches_ok{0}, fetch_errors{0}, fetched_bytes{0};
  std::atomic<std::uint64_t> served_chunks{0}, served_bytes{0}, refused_salted{0}, kept_salted{0};
  std::atomic<std::uint64_t> rejected[8]{};  // by ManifestError (index 0 unused)
  std::atomic<std::uint64_t> fragments_placed{0}, fragment_place_errors{0}, fragments_accepted{0};
  std::atomic<std::uint64_t> fragments_refused{0};        // PUTs refused (unsigned, untrusted, bad hash)
  std::atomic<std::uint64_t> placements_dropped{0};       // chunks not placed: the placement queue was full
  PeerIoCounters peer_io;                                 // every peer request: deadline and cap hits
  std::atomic<std::uint64_t> fragments_rejected{0};       // fetched fragments whose hash or set failed
  std::atomic<std::uint64_t> chunks_reconstructed{0};
  std::atomic<std::uint64_t> spot_checks_passed{0}, spot_checks_failed{0}, unchecked_accepted{0};
  std::atomic<std::uint64_t> spot_checks_dropped{0};  // unknown producers' chunks refused: pending set full
  std::atomic<std::uint64_t> spot_checks_inconclusive{0};  // ended without a verdict: our KV was not computed from trusted KV
  std::atomic<std::uint64_t> aliases_refused{0};      // prefix alias records fetched from peers (never used)
  // Directory entries read from the DHT and not used, by DirectoryEntryError (index 0 unused).
  std::atomic<std::uint64_t> directory_ignored[kDirectoryEntryErrors]{};
  std::atomic<std::uint64_t> directory_nodes{0};      // trusted, verified entries in the last directory read
  std::atomic<std::uint32_t> spot_check_max_diff_bits{0};  // max |ours - theirs| seen (a float's bits)
  // Response-cache records (kvstash_share_response_*).
  std::atomic<std::uint64_t> response_announcements_ok{0}, response_announcements_failed{0};
  std::atomic<std::uint64_t> response_lookups_hit{0}, response_lookups_miss{0}, response_lookups_timeout{0};
  std::atomic<std::uint64_t> responses_fetched{0}, response_fetch_errors{0}, responses_served{0};
  std::atomic<std::uint64_t> response_refused_salted{0}, response_kept_salted{0};
  std::atomic<std::uint64_t> response_rejected[4]{};  // by ResponseRejection
  std::atomic<std::uint64_t> startup_announced{0};  // chunks and records found on disk at start
  // Provenance (issue 31).
  std::atomic<std::uint64_t> refused_unchecked{0};  // chunk requests refused: not shareable here
  std::atomic<std::uint64_t> kept_unchecked{0};     // chunks stored and not announced: not shareable
  std::atomic<std::uint64_t> purged_chunks{0};      // chunks erased because they derive from a banned producer
  std::atomic<std::uint64_t> purged_records{0};     // response records and semantic entries of banned producers
};

// Why a record fetched from a peer was refused.
enum class ResponseRejection { kRecord = 0, kKey, kSignature, kUntrusted };
inline constexpr const char* kResponseRejectionNames[4] = {"record", "key", "signature", "untrusted"};

// DHT topics besides chunk_topic() (dht_node.h): every node's signed directory entry
// (directory_entry.h: its peer URL under its key), and a chunk's fragment holders ("INDEX URL").
inline constexpr const char* kDirectoryTopic = "kvstash-nodes-v1";
std::string fragment_topic(const cache::ChunkKey& key);
// A response record's providers: "kvstash-response-v1:" + hex(key).
std::string response_topic(const cache::ChunkKey& key);

class ShareNode : public http::Handler, public std::enable_shared_from_this<ShareNode> {
 public:
  // Starts the DHT node (errors: DhtNode::start's, and kInvalidArgument for a bad --peer-url).
  static Expected<std::shared_ptr<ShareNode>> start(const ShareOptions& options,
                                                    std::shared_ptr<const identity::NodeIdentity> identity,
                                                    std::shared_ptr<const identity::TrustList> trust);
  ~ShareNode() override;

  // The peers tier to append to the TieredStore (one per node).
  std::unique_ptr<cache::Tier> make_peers_tier();
  // The store whose local tiers (every tier but "peers") this node serves from and re-announces.
  void attach_store(cache::TieredStore* store);
  // The response peers tier of the response cache's record store, and that store (its memory and
  // disk tiers are served and re-announced). Optional: without them records are not shared.
  std::unique_ptr<cache::Tier> make_response_peers_tier();
  void attach_response_store(cache::TieredStore* store);
  // The URL peers fetch from; announcements made before it is known go out now.
  void set_peer_url(const std::string& url);
  // Stops re-announcing, detaches the store, leaves the DHT. Idempotent.
  void stop();

  void handle(http::Request request, std::shared_ptr<http::Exchange> exchange) override;
  std::string render_metrics() const;

  // --- For the peers tier. ---
  const ShareOptions& options() const { return options_; }
  ShareCounters& counters() { return counters_; }
  DhtNode* dht() { return dht_.get(); }
  std::string peer_url() const;
  TrustPolicy trust_policy() const;
  // Announces key (now, and again while a local tier holds it) if its header allows it to leave.
  void announce(const cache::ChunkKey& key, const cache::ChunkHeader& header);
  // Announces a response record (its envelope header says whether its request was salted).
  void announce_response(const cache::ChunkKey& key, const cache::ChunkHeader& header);
  // Remembers a manifest this node signed over a chunk it computed (a cache of its signatures;
  // relayed chunks carry their producer's manifest in their own header instead).
  void remember_manifest(const Manifest& manifest, std::uint64_t payload_checksum);
  // Bans `producer` (spot check failed): its chunks are refused from now on, and those accepted from
  // it unchecked (remember_unchecked) are erased from the local tiers.
  // The ban is written to ShareOptions::ban_file and purges what derives from the producer (see
  // the file comment).
  void ban(const identity::PublicKey& producer);
  void remember_unchecked(const identity::PublicKey& producer, const cache::ChunkKey& key);
  bool banned(const identity::PublicKey& producer) const;
  // False when the chunk's provenance names a banned producer, or says it was verified (or
  // spot-checked) for a producer this node no longer trusts (taken off --trust-keys, or --trust any
  // dropped since): the store's load filter, and what serving and announcing ask. Such a chunk is a
  // miss and is erased; the node computes that KV again.
  bool chunk_acceptable(const cache::ChunkHeader& header) const;
  bool derives_from_banned(const cache::Provenance& provenance) const;
  // Runs `callback` (on the banning thread) for every ban from now on: the engine forgets its
  // prefix-cache blocks derived from the producer. Register before the node is in use.
  void on_ban(std::function<void(const identity::PublicKey&)> callback);
  bool trusts(const identity::PublicKey& producer) const { return trust_->trusts(producer); }
  // A chunk this node computed and stored: with --erasure, it is queued for placement (a copy;
  // dropped and counted when the queue is full) and returns at once: the placement thread puts its
  // fragments on peers, bounded as ShareOptions says.
  void place_fragments(const cache::ChunkKey& key, std::span<const std::uint8_t> chunk, const cache::ChunkHeader& header);
  // Other nodes' peer URLs from the DHT's node directory (remembered for a few seconds): only those
  // of entries whose signature verifies, that have not expired and whose key is on the trust list
  // (--trust-keys; never widened by --trust any). The rest are counted by reason and ignored.
  std::vector<std::string> directory();
  // The spot checks waiting for the engine's KV (spot_check.h).
  SpotChecks& spot_checks() { return *spot_checks_; }

 private:
  ShareNode(ShareOptions options, std::shared_ptr<const identity::NodeIdentity> identity,
            std::shared_ptr<const identity::TrustList> trust);
  void serve_chunk(const std::string& key_hex, http::Exchange& exchange);
  void serve_peers(http::Exchange& exchange);
  void serve_response(const std::string& key_hex, http::Exchange& exchange);
  void handle_fragment(const http::Request& request, http::Exchange& exchange);
  // The manifest to send with `chunk` (a remembered one whose chunk is these bytes, else our own).
  Expected<std::string> manifest_for(const cache::ChunkKey& key, std::span<const std::uint8_t> chunk,
                                     const cache::ChunkHeader& header);
  void put_announcement(const cache::ChunkKey& key, const std::string& url);
  void put_response_announcement(const cache::ChunkKey& key, const std::string& url);
  // Puts this node's signed directory entry for `url` (fresh timestamp, valid for the DHT value TTL).
  void put_directory_entry(const std::string& url);
  void reannounce_loop();
  // Per key: does a local tier (memory, disk) of `store` hold it (all false without a store).
  // The startup walk of one store's disk tier (records: a response record store). Stops early
  // when stop() runs.
  void announce_disk(cache::TieredStore* store, bool records);
  static std::vector<bool> held_locally(cache::TieredStore* store, const std::vector<cache::ChunkKey>& keys);
  // Erases from the local tiers (memory, disk) of `store` the chunks whose provenance names a
  // banned producer (records: the response records and semantic entries they signed).
  void purge_banned(cache::TieredStore* store, bool records);
  // Whether these bytes (a chunk, or a record store's envelope) derive from a banned producer.
  bool derives_from_banned_bytes(std::span<const std::uint8_t> bytes, bool records) const;
  void load_bans();
  void save_bans();  // under ban_mu_, never mu_

  const ShareOptions options_;
  const std::shared_ptr<const identity::NodeIdentity> identity_;
  const std::shared_ptr<const identity::TrustList> trust_;
  std::unique_ptr<DhtNode> dht_;
  ShareCounters counters_;
  const std::unique_ptr<SpotChecks> spot_checks_;

  mutable std::mutex mu_;
  std::condition_variable wake_;                  // the re-announce thread's sleep; stop wakes it
  cache::TieredStore* store_ = nullptr;           // guarded by mu_
  std::string peer_url_;                          // guarded by mu_
  std::unordered_set<cache::ChunkKey> announced_; // guarded by mu_
  cache::TieredStore* response_store_ = nullptr;  // guarded by mu_
  std::unordered_set<cache::ChunkKey> announced_responses_;  // guarded by mu_
  struct KnownManifest {
    std::string bytes;
    std::uint64_t payload_checksum = 0;  // the chunk header's XXH3: the bytes it was checked with
  };
  std::unordered_map<cache::ChunkKey, KnownManifest> manifests_;  // guarded by mu_
  std::set<identity::PublicKey> banned_;                          // guarded by mu_
  struct HeldFragment {
    cache::Bytes bytes;
    std::string set, manifest;
  };
  std::map<std::pair<cache::ChunkKey, int>, HeldFragment> fragments_;  // guarded by mu_
  std::deque<std::pair<cache::ChunkKey, int>> fragment_order_;         // oldest first; guarded by mu_
  std::uint64_t fragment_bytes_ = 0;                                   // guarded by mu_
  std::vector<std::string> directory_;                                 // guarded by mu_
  std::map<identity::PublicKey, std::vector<cache::ChunkKey>> unchecked_;  // guarded by mu_
  std::chrono::steady_clock::time_point directory_expires_{};          // guarded by mu_
  bool stopping_ = false;                                         // guarded by mu_
  bool walk_pending_ = false;  // set_peer_url() ran: the startup walk is due; guarded by mu_
  bool purge_pending_ = false;  // a ban since the last purge walk; guarded by mu_
  std::vector<std::function<void(const identity::PublicKey&)>> ban_callbacks_;  // set before use
  std::mutex ban_mu_;  // serialises writes of the ban file (never held with mu_)
  std::thread reannouncer_;
  // Fragment placement (--erasure): chunks waiting, and the thread placing them (fragments.cc).
  struct Placement {
    cache::ChunkKey key;
    cache::Bytes chunk;
    cache::ChunkHeader header;
  };
  std::deque<Placement> placements_;               // guarded by mu_
  std::condition_variable placement_wake_;
  std::thread placer_;
  void placement_loop();
  void place_now(const Placement& job);
};

}  // namespace kvstash::share
