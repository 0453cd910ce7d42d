// ShareNode's HTTP side: GET /v1/kv/chunks/{key}, GET /v1/kv/responses/{key} and GET
// /v1/kv/peers (share_node.h).
//
// Chunks are read from the memory and disk tiers only (never from redis, an organisation's own
// store, nor from the peers tier, which would turn this node into a proxy). A disk read is bounded
// by the chunk's size; it runs on the HTTP layer's I/O thread like any other small answer.
#include <nlohmann/json.hpp>

#include "cache/response_record.h"
#include "share/share_node.h"

namespace kvstash::share {
namespace {

http::Response plain(int status, const std::string& message) {
  http::Response r;
  r.status = status;
  r.body = nlohmann::json{{"error", {{"message", message}}}}.dump();
  return r;
}

// A chunk or record stored or promoted here that tier 0 (memory or disk: a tier served from) has
// not written yet. It may already be announced: the peers tier's writer announces what it is given,
// possibly before tier 0's writer has run.
cache::SharedBytes queued_locally(cache::TieredStore* store, const cache::ChunkKey& key) {
  if (!store || store->tier_count() == 0) return nullptr;
  const std::string name = store->tier(0).name();
  return name == "memory" || name == "disk" ? store->queued(key) : nullptr;
}

}  // namespace

void ShareNode::handle(http::Request request, std::shared_ptr<http::Exchange> exchange) {
  constexpr std::string_view kChunks = "/v1/kv/chunks/";
  if (request.path.starts_with("/v1/kv/fragments/")) return handle_fragment(request, *exchange);
  if (request.method != "GET" && request.method != "HEAD") {
    http::Response r = plain(405, "method " + request.method + " is not allowed on " + request.path + " (use GET)");
    r.headers.push_back({"Allow", "GET"});
    return exchange->respond(std::move(r));
  }
  if (request.path.starts_with(kChunks)) return serve_chunk(request.path.substr(kChunks.size()), *exchange);
  constexpr std::string_view kResponses = "/v1/kv/responses/";
  if (request.path.starts_with(kResponses)) return serve_response(request.path.substr(kResponses.size()), *exchange);
  if (request.path == "/v1/kv/peers") return serve_peers(*exchange);
  exchange->respond(plain(404, "unknown endpoint: " + request.method + " " + request.path));
}

void ShareNode::serve_chunk(const std::string& key_hex, http::Exchange& exchange) {
  auto key = cache::ChunkKey::from_hex(key_hex);
  if (!key) return exchange.respond(plain(400, "chunk key '" + key_hex.substr(0, 80) + "': expected 64 hex digits"));
  cache::TieredStore* store = nullptr;
  {
    std::lock_guard lock(mu_);
    store = store_;
  }
  cache::SharedBytes chunk = queued_locally(store, *key);
  if (store) {
    for (std::size_t t = 0; t < store->tier_count() && !chunk; ++t) {
      const std::string name = store->tier(t).name();
      if (name != "memory" && name != "disk") continue;
      if (auto got = store->tier(t).get_shared(*key)) chunk = std::move(*got);
    }
  }
  if (!chunk) return exchange.respond(plain(404, "chunk " + key->hex() + " is not held here"));
  auto header = cache::verify_chunk(*chunk);
  if (!header || header->meta.key != *key || chunk->size() > options_.fetch.max_bytes) {
    return exchange.respond(plain(404, "chunk " + key->hex() + " is not held here"));
  }
  if (header->meta.salted && !options_.share_salted) {
    counters_.refused_salted.fetch_add(1, std::memory_order_relaxed);
    return exchange.respond(plain(403, "chunk " + key->hex() + " is salted (a tenant's namespace): not shared"));
  }
  // Only what this node computed from KV it trusts goes out under its signature; a relayed chunk
  // goes out under its producer's manifest exactly as received; nothing unchecked leaves at all.
  const cache::Provenance& provenance = header->meta.provenance;
  if (!shareable(provenance) || derives_from_banned(provenance)) {
    counters_.refused_unchecked.fetch_add(1, std::memory_order_relaxed);
    return exchange.respond(plain(404, "chunk " + key->hex() + " is not held here"));
  }
  Expected<std::string> manifest = signed_here(provenance) ? manifest_for(*key, *chunk, *header) : provenance.manifest;
  if (!manifest) return exchange.respond(plain(500, "chunk " + key->hex() + ": " + manifest.status().message()));
  http::Response r;
  r.content_type = "application/octet-stream";
  r.headers.push_back({kManifestHeader, hex_encode(*manifest)});
  r.body.assign(reinterpret_cast<const char*>(chunk->data()), chunk->size());
  counters_.served_chunks.fetch_add(1, std::memory_order_relaxed);
  counters_.served_bytes.fetch_add(chunk->size(), std::memory_order_relaxed);
  exchange.respond(std::move(r));
}

void ShareNode::serve_response(const std::string& key_hex, http::Exchange& exchange) {
  auto key = cache::ChunkKey::from_hex(key_hex);
  if (!key) return exchange.respond(plain(400, "record key '" + key_hex.substr(0, 80) + "': expected 64 hex digits"));
  cache::TieredStore* store = nullptr;
  {
    std::lock_guard lock(mu_);
    store = response_store_;
  }
  cache::SharedBytes record = queued_locally(store, *key);
  for (std::size_t t = 0; store && t < store->tier_count() && !record; ++t) {
    const std::string name = store->tier(t).name();
    if (name != "memory" && name != "disk") continue;
    if (auto got = store->tier(t).get_shared(*key)) record = std::move(*got);
  }
  if (!record) return exchange.respond(plain(404, "response record " + key->hex() + " is not held here"));
  auto header = cache::verify_chunk(*record);
  if (!header || header->meta.key != *key || header->meta.kv_format != cache::kResponseKvFormat ||
      record->size() > options_.fetch.max_bytes) {
    return exchange.respond(plain(404, "response record " + key->hex() + " is not held here"));
  }
  if (header->meta.salted && !options_.share_salted) {
    counters_.response_refused_salted.fetch_add(1, std::memory_order_relaxed);
    return exchange.respond(plain(403, "response record " + key->hex() + " is of a salted request: not shared"));
  }
  http::Response r;
  r.content_type = "application/octet-stream";
  r.body.assign(reinterpret_cast<const char*>(record->data()), record->size());
  counters_.responses_served.fetch_add(1, std::memory_order_relaxed);
  exchange.respond(std::move(r));
}

Expected<std::string> ShareNode::manifest_for(const cache::ChunkKey& key, std::span<const std::uint8_t> chunk,
                                              const cache::ChunkHeader& header) {
  // The only signature this node makes: over a chunk whose stored provenance says it computed it
  // from KV it trusts. Anything else (relayed, unchecked, a version-1 chunk of unknown origin) has
  // no manifest of ours, whatever this node remembers or forgets.
  if (!signed_here(header.meta.provenance)) {
    return invalid_argument("chunk " + key.hex() + " was not computed here (" +
                               cache::chunk_trust_name(header.meta.provenance.trust) + "): not signed");
  }
  {
    std::lock_guard lock(mu_);
    auto it = manifests_.find(key);
    // A cache of this node's own signatures, for the bytes they were made over.
    if (it != manifests_.end() && it->second.payload_checksum == header.payload_checksum) return it->second.bytes;
  }
  auto own = make_manifest(chunk, *identity_);
  if (!own) return own.status();
  remember_manifest(*own, header.payload_checksum);
  return encode_manifest(*own);
}

void ShareNode::serve_peers(http::Exchange& exchange) {
  nlohmann::json trust = nlohmann::json::array(), banned = nlohmann::json::array(), neighbours = nlohmann::json::array();
  for (const auto& k : trust_->keys()) trust.push_back(identity::to_hex(k));
  {
    std::lock_guard lock(mu_);
    for (const auto& k : banned_) banned.push_back(identity::to_hex(k));
  }
  for (const auto& n : dht_->neighbours()) neighbours.push_back({{"id", n.id}, {"address", n.address}});
  nlohmann::json body = {{"identity", identity_->public_key_hex()},
                         {"peer_url", peer_url()},
                         {"dht", {{"node_id", dht_->node_id()}, {"port", dht_->port()}, {"known_nodes", dht_->known_nodes()},
                                  {"neighbours", neighbours}}},
                         {"share_salted", options_.share_salted},
                         {"trusted_producers", trust},
                         {"banned_producers", banned}};
  http::Response r;
  r.body = body.dump(2);
  exchange.respond(std::move(r));
}

}  // namespace kvstash::share
