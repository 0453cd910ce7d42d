// ShareNode's erasure-coded side (share_node.h): placing a produced chunk's fragments on peers,
// holding the fragments peers place here, and the node directory that says who the peers are.
//
// DHT topics: "kvstash-nodes-v1" → every node's signed directory entry (directory_entry.h; the
// directory placement picks from, trusted keys only);
// "kvstash-fragments-v1:" + hex(key) → "INDEX URL" for each held fragment of that chunk.
#include <algorithm>
#include <future>
#include <map>

#include "cache/log.h"
#include "share/share_node.h"

namespace kvstash::share {
namespace {

constexpr std::chrono::seconds kDirectoryTtl{5};  // how long a directory lookup is reused

http::Response answer(int status, const std::string& message) {
  http::Response r;
  r.status = status;
  r.body = "{\"error\":{\"message\":\"" + message + "\"}}";
  return r;
}

}  // namespace

std::string fragment_topic(const cache::ChunkKey& key) { return "kvstash-fragments-v1:" + key.hex(); }

void ShareNode::put_directory_entry(const std::string& url) {
  // Valid as long as the DHT keeps the value (re-put every reannounce_interval, which is shorter):
  // a copy of it replayed later is refused once expired.
  const auto lifetime = std::chrono::duration_cast<std::chrono::seconds>(options_.dht.value_ttl);
  auto entry = make_directory_entry(*identity_, url, unix_now_s(), lifetime);
  if (!entry) {
    cache::log_warning("peer sharing: no directory entry for " + url + ": " + entry.status().message());
    return;
  }
  dht_->put(kDirectoryTopic, encode_directory_entry(*entry));
}

std::vector<std::string> ShareNode::directory() {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (now < directory_expires_) return directory_;
  }
  const std::string topic = kDirectoryTopic;
  auto found = dht_->get(std::span<const std::string>(&topic, 1), options_.lookup_timeout);
  const std::string self = peer_url();
  const std::uint64_t unix_now = unix_now_s();
  // The newest verified entry of each trusted key (a node re-signs its entry every re-announce
  // and after a restart, and the DHT keeps the older ones until they lapse).
  std::map<identity::PublicKey, DirectoryEntry> newest;
  for (const auto& value : found.front().providers) {
    DirectoryEntryError why = DirectoryEntryError::kNone;
    auto entry = check_directory_entry(value, unix_now, &why);
    if (entry && !trust_->trusts(entry->node)) why = DirectoryEntryError::kUntrusted;
    if (why != DirectoryEntryError::kNone) {
      counters_.directory_ignored[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (entry->node == identity_->public_key() || entry->url == self || !parse_peer_url(entry->url)) continue;
    auto [it, inserted] = newest.try_emplace(entry->node, *entry);
    if (!inserted && entry->issued_at > it->second.issued_at) it->second = *entry;
  }
  std::vector<std::string> urls;
  for (const auto& [key, entry] : newest) {
    if (std::find(urls.begin(), urls.end(), entry.url) == urls.end()) urls.push_back(entry.url);
  }
  counters_.directory_nodes.store(urls.size(), std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  directory_ = urls;
  directory_expires_ = now + kDirectoryTtl;
  return urls;
}

void ShareNode::place_fragments(const cache::ChunkKey& key, std::span<const std::uint8_t> chunk,
                                const cache::ChunkHeader& header) {
  if (!options_.erasure || (header.meta.salted && !options_.share_salted)) return;
  if (!signed_here(header.meta.provenance)) return;  // fragments carry this node's signature: only its own KV
  {
    std::lock_guard lock(mu_);
    if (!stopping_ && placements_.size() < options_.placement_queue) {
      placements_.push_back({key, cache::Bytes(chunk.begin(), chunk.end()), header});
      placement_wake_.notify_one();
      return;
    }
  }
  counters_.placements_dropped.fetch_add(1, std::memory_order_relaxed);
}

void ShareNode::placement_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    placement_wake_.wait(lock, [this] { return stopping_ || !placements_.empty(); });
    if (stopping_) return;
    Placement job = std::move(placements_.front());
    placements_.pop_front();
    lock.unlock();
    place_now(job);
    lock.lock();
  }
}

// One chunk's fragments, each offered to its holders in rendezvous order (at most
// max_fragment_holders of them, the next when one fails), all fragments at once, every PUT
// bounded by the fetch limits and by what is left of the chunk's placement_timeout.
void ShareNode::place_now(const Placement& job) {
  const ErasureScheme scheme = *options_.erasure;
  const auto deadline = std::chrono::steady_clock::now() + options_.placement_timeout;
  std::vector<std::string> peers = directory();
  if (peers.empty()) {
    counters_.fragment_place_errors.fetch_add(static_cast<std::uint64_t>(scheme.total()), std::memory_order_relaxed);
    return;
  }
  // Rendezvous order: each chunk spreads over different peers, and every node would pick the same.
  auto rank = [&](const std::string& url) {
    const std::string text = job.key.hex() + url;
    return sha256(text.data(), text.size());
  };
  std::sort(peers.begin(), peers.end(), [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  auto manifest = manifest_for(job.key, job.chunk, job.header);
  if (!manifest) return;
  const std::vector<cache::Bytes> fragments = erasure_encode(scheme, job.chunk);
  const std::string set = encode_fragment_set(make_fragment_set(job.key, scheme, job.chunk.size(), fragments, *identity_));
  const std::size_t tries = std::max<std::size_t>(1, std::min(options_.max_fragment_holders, peers.size()));
  std::vector<std::future<Status>> puts;
  for (int i = 0; i < scheme.total(); ++i) {
    puts.push_back(std::async(std::launch::async, [&, i] {
      Status last = unavailable("no holder tried");
      for (std::size_t k = 0; k < tries; ++k) {
        // Distinct peers while there are enough; with fewer peers than fragments some hold two.
        const std::string& holder = peers[(static_cast<std::size_t>(i) + k) % peers.size()];
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        FetchLimits limits = options_.fetch;
        limits.timeout = std::min(limits.timeout, left);
        last = put_fragment(holder, job.key.hex(), i, fragments[static_cast<std::size_t>(i)], set, *manifest, limits);
        if (last) break;
      }
      return last;
    }));
  }
  for (auto& p : puts) {
    (p.get() ? counters_.fragments_placed : counters_.fragment_place_errors).fetch_add(1, std::memory_order_relaxed);
  }
}

void ShareNode::handle_fragment(const http::Request& request, http::Exchange& exchange) {
  // /v1/kv/fragments/{64 hex}/{index}
  const std::string rest = request.path.substr(std::string("/v1/kv/fragments/").size());
  const auto slash = rest.find('/');
  auto key = cache::ChunkKey::from_hex(rest.substr(0, slash));
  const std::string index_text = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!key || index_text.empty() || index_text.size() > 2 ||
      !std::all_of(index_text.begin(), index_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return exchange.respond(answer(400, "expected /v1/kv/fragments/{64 hex digits}/{index}"));
  }
  const int index = std::stoi(index_text);
  const auto id = std::make_pair(*key, index);
  if (request.method == "GET" || request.method == "HEAD") {
    std::lock_guard lock(mu_);
    auto it = fragments_.find(id);
    if (it == fragments_.end()) return exchange.respond(answer(404, "fragment not held here"));
    http::Response r;
    r.content_type = "application/octet-stream";
    r.headers.push_back({kFragmentSetHeader, hex_encode(it->second.set)});
    r.headers.push_back({kManifestHeader, hex_encode(it->second.manifest)});
    r.body.assign(it->second.bytes.begin(), it->second.bytes.end());
    return exchange.respond(std::move(r));
  }
  if (request.method != "PUT") return exchange.respond(answer(405, "use GET or PUT"));
  // Authenticated by the producer's signature over the set, which names every fragment's hash.
  auto set_bytes = hex_decode(request.header(kFragmentSetHeader));
  auto manifest_bytes = hex_decode(request.header(kManifestHeader));
  auto set = set_bytes ? decode_fragment_set(*set_bytes) : Expected<FragmentSet>(corrupt("no set"));
  auto manifest = manifest_bytes ? decode_manifest(*manifest_bytes) : Expected<Manifest>(corrupt("no manifest"));
  const TrustPolicy policy = trust_policy();
  auto refuse = [&](int status, const std::string& why) {
    counters_.fragments_refused.fetch_add(1, std::memory_order_relaxed);
    exchange.respond(answer(status, why));
  };
  if (!set || !manifest || !fragment_set_verifies(*set, *key)) return refuse(400, "fragment set missing or not signed for this key");
  if (manifest->meta.key != *key || manifest->producer != set->producer ||
      !identity::verify(manifest->producer, kManifestDomain, manifest_signed_bytes(*manifest), manifest->signature)) {
    return refuse(400, "manifest missing or not the set producer's");
  }
  // Only producers on the trust list may place fragments here, also under --trust any: a spot check
  // needs the node's own KV, which a fragment held for others never meets, so strangers could fill
  // the fragment store (evicting trusted producers') and have this node announce what they choose.
  if (policy.banned(set->producer) || !trusts(set->producer)) return refuse(403, "producer not trusted here");
  if (request.body.size() > options_.max_fragment_bytes / 4) return refuse(413, "fragment too large");  // before hashing
  const cache::Bytes body(request.body.begin(), request.body.end());
  if (!fragment_matches(*set, index, body)) return refuse(400, "fragment does not match its hash in the set");
  std::string url;
  {
    std::lock_guard lock(mu_);
    if (!fragments_.count(id)) {
      fragment_bytes_ += body.size();
      fragment_order_.push_back(id);
    } else {
      fragment_bytes_ -= fragments_[id].bytes.size();
      fragment_bytes_ += body.size();
    }
    fragments_[id] = HeldFragment{body, *set_bytes, *manifest_bytes};
    while (fragment_bytes_ > options_.max_fragment_bytes && !fragment_order_.empty()) {
      auto old = fragments_.find(fragment_order_.front());
      if (old != fragments_.end()) {
        fragment_bytes_ -= old->second.bytes.size();
        fragments_.erase(old);
      }
      fragment_order_.pop_front();
    }
    url = peer_url_;
  }
  counters_.fragments_accepted.fetch_add(1, std::memory_order_relaxed);
  if (!url.empty()) {
    dht_->put(fragment_topic(*key), std::to_string(index) + " " + url, [self = weak_from_this()](bool ok) {
      if (auto node = self.lock()) (ok ? node->counters_.announcements_ok : node->counters_.announcements_failed).fetch_add(1);
    });
  }
  http::Response r;
  r.status = 201;
  r.body = "{}";
  exchange.respond(std::move(r));
}

}  // namespace kvstash::share
