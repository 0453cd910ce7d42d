#include "share/peers_tier.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <random>

#include "cache/prefix_alias.h"
#include "share/spot_check.h"

namespace kvstash::share {
namespace {

// Remembered lookups at most; past it the expired ones go, then (a flood of distinct keys) all.
constexpr std::size_t kMaxRemembered = 1 << 16;

bool is_alias(std::span<const std::uint8_t> chunk) {
  auto header = cache::parse_chunk_header(chunk);
  return header && header->meta.kv_format == cache::kAliasKvFormat;
}

}  // namespace

std::vector<PeersTier::Providers> PeersTier::providers(std::span<const cache::ChunkKey> keys) {
  std::vector<Providers> out(keys.size());
  std::vector<std::size_t> unknown;
  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto it = known_.find(keys[i]);
      if (it != known_.end() && it->second.expires > now) {
        out[i] = it->second;
      } else {
        unknown.push_back(i);
      }
    }
  }
  if (unknown.empty() || !node_->dht()) return out;
  std::vector<cache::ChunkKey> ask;
  std::vector<std::string> topics;  // per key: its providers, then its fragment holders
  for (std::size_t i : unknown) {
    ask.push_back(keys[i]);
    topics.push_back(chunk_topic(keys[i]));
    topics.push_back(fragment_topic(keys[i]));
  }
  const std::vector<DhtNode::Lookup> found = node_->dht()->get(topics, node_->options().lookup_timeout);
  const std::string self = node_->peer_url();
  ShareCounters& c = node_->counters();
  const auto later = Clock::now();
  std::lock_guard lock(mu_);
  if (known_.size() + ask.size() > kMaxRemembered) {
    std::erase_if(known_, [&](const auto& e) { return e.second.expires <= later; });
    if (known_.size() + ask.size() > kMaxRemembered) known_.clear();
  }
  for (std::size_t j = 0; j < ask.size() && 2 * j + 1 < found.size(); ++j) {
    Providers p;
    for (const std::string& url : found[2 * j].providers) {
      if (url != self) p.urls.push_back(url);
    }
    for (const std::string& value : found[2 * j + 1].providers) {  // "INDEX URL"
      const auto space = value.find(' ');
      if (space == std::string::npos || space == 0 || space > 2) continue;
      const int index = std::atoi(value.c_str());
      const std::string url = value.substr(space + 1);
      if (index >= 0 && index < kMaxFragments && url != self) p.fragments.emplace_back(index, url);
    }
    const bool completed = found[2 * j].completed && found[2 * j + 1].completed;
    if (!p.empty()) {
      c.lookups_hit.fetch_add(1, std::memory_order_relaxed);
    } else if (completed) {
      c.lookups_miss.fetch_add(1, std::memory_order_relaxed);
    } else {
      c.lookups_timeout.fetch_add(1, std::memory_order_relaxed);
    }
    p.expires = later + (p.empty() ? node_->options().negative_ttl : node_->options().positive_ttl);
    known_[ask[j]] = p;
    out[unknown[j]] = std::move(p);
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
  const Providers known = providers(std::span<const cache::ChunkKey>(&key, 1)).front();
  const std::vector<std::string>& urls = known.urls;
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
    if (is_alias(fetched->chunk)) {  // aliases stay local: none from a peer is followed
      c.aliases_refused.fetch_add(1, std::memory_order_relaxed);
      counters_.rejected();
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
    const bool trusted = node_->trusts(manifest.producer);
    if (!trusted && !admit_unknown(key, manifest, fetched->chunk)) {
      counters_.miss();
      return not_found("peers: chunk " + key_hex + " taken for a spot check");
    }
    auto recorded = with_fetched_provenance(fetched->chunk, manifest, fetched->manifest, trusted);
    if (!recorded) {
      refused.push_back(urls[i]);
      continue;
    }
    c.fetches_ok.fetch_add(1, std::memory_order_relaxed);
    c.fetched_bytes.fetch_add(fetched->chunk.size(), std::memory_order_relaxed);
    counters_.hit(recorded->size(), Clock::now() - start);
    return std::move(*recorded);
  }
  if (!refused.empty()) {  // the next lookup of this key skips the providers that failed it
    std::lock_guard lock(mu_);
    if (auto it = known_.find(key); it != known_.end()) {
      std::erase_if(it->second.urls, [&](const std::string& u) {
        return std::find(refused.begin(), refused.end(), u) != refused.end();
      });
    }
  }
  if (!known.fragments.empty()) {
    auto rebuilt = reconstruct(key, known.fragments);
    if (rebuilt) {
      counters_.hit(rebuilt->size(), Clock::now() - start);
      return rebuilt;
    }
  }
  counters_.miss();
  return not_found("peers: no provider supplied a verified chunk " + key_hex);
}

Expected<cache::Bytes> PeersTier::reconstruct(const cache::ChunkKey& key, const std::vector<std::pair<int, std::string>>& holders) {
  ShareCounters& c = node_->counters();
  const TrustPolicy policy = node_->trust_policy();
  // Holders come from unsigned DHT values: anyone can announce tarpits for an index. At most
  // max_fragment_holders are tried per index, and all of them within one fetch deadline.
  std::map<int, std::vector<std::string>> by_index;
  for (const auto& [index, url] : holders) {
    auto& urls = by_index[index];
    if (urls.size() < node_->options().max_fragment_holders) urls.push_back(url);
  }
  const FetchLimits limits = node_->options().fetch;
  const auto deadline = Clock::now() + limits.timeout;
  // One fetch per index, in parallel; within an index, its holders one after the other.
  std::vector<std::pair<int, std::future<std::optional<FetchedFragment>>>> fetches;
  for (const auto& [index, urls] : by_index) {
    fetches.emplace_back(index, std::async(std::launch::async, [&, index = index, urls = urls]() -> std::optional<FetchedFragment> {
      for (const std::string& url : urls) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) break;
        FetchLimits rest = limits;
        rest.timeout = left;
        auto f = fetch_fragment(url, key.hex(), index, rest);
        if (f) return std::move(*f);
        c.fetch_errors.fetch_add(1, std::memory_order_relaxed);
      }
      return std::nullopt;
    }));
  }
  std::vector<std::pair<int, FetchedFragment>> got;
  for (auto& [index, f] : fetches) {
    if (auto fragment = f.get()) got.emplace_back(index, std::move(*fragment));
  }
  // The first set that verifies for this key and names a trusted producer fixes every hash.
  std::optional<FragmentSet> set;
  std::string manifest;
  for (const auto& [index, f] : got) {
    auto s = decode_fragment_set(f.set);
    if (s && fragment_set_verifies(*s, key) && !policy.banned(s->producer) && policy.trusted(s->producer)) {
      set = std::move(*s);
      manifest = f.manifest;
      break;
    }
  }
  if (!set) {
    if (!got.empty()) c.rejected[static_cast<int>(ManifestError::kUntrusted)].fetch_add(1, std::memory_order_relaxed);
    return not_found("peers: no trusted fragment set for " + key.hex());
  }
  std::vector<Fragment> good;
  for (const auto& [index, f] : got) {
    if (static_cast<int>(good.size()) == set->scheme.k) break;  // enough: the rest need no hashing
    if (fragment_matches(*set, index, f.bytes)) {
      good.push_back({index, f.bytes});
    } else {
      c.fragments_rejected.fetch_add(1, std::memory_order_relaxed);  // identified: another index is used
    }
  }
  auto chunk = erasure_decode(set->scheme, good, set->chunk_size);
  if (!chunk) return not_found("peers: " + chunk.status().message());
  if (is_alias(*chunk)) {
    c.aliases_refused.fetch_add(1, std::memory_order_relaxed);
    counters_.rejected();
    return not_found("peers: a prefix alias from peers is refused");
  }
  Manifest checked;
  ManifestError why = ManifestError::kNone;
  if (!check_chunk(manifest, *chunk, key, policy, &checked, &why)) {
    c.rejected[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
    counters_.rejected();
    return not_found("peers: reconstructed chunk rejected");
  }
  const bool trusted = node_->trusts(checked.producer);
  if (!trusted && !admit_unknown(key, checked, *chunk)) return not_found("peers: taken for a spot check");
  auto recorded = with_fetched_provenance(*chunk, checked, manifest, trusted);
  if (!recorded) return not_found("peers: " + recorded.status().message());
  c.chunks_reconstructed.fetch_add(1, std::memory_order_relaxed);
  c.fetched_bytes.fetch_add(chunk->size(), std::memory_order_relaxed);
  return recorded;
}

Expected<cache::Bytes> PeersTier::with_fetched_provenance(std::span<const std::uint8_t> chunk, const Manifest& manifest,
                                                          const std::string& manifest_bytes, bool trusted) {
  // What the sender's header says about provenance is its claim, never ours: replaced here by what
  // this node checked. The manifest is kept exactly as received, to be served on unchanged.
  cache::Provenance provenance;
  provenance.trust = trusted ? cache::ChunkTrust::kVerified : cache::ChunkTrust::kUnchecked;
  provenance.producers = {manifest.producer};
  provenance.manifest = manifest_bytes;
  auto recorded = cache::with_provenance(chunk, provenance);
  if (!recorded) return recorded;
  if (trusted) {
    const auto header = cache::parse_chunk_header(*recorded);
    node_->announce(manifest.meta.key, *header);  // an unchecked chunk is never announced
  }
  return recorded;
}

bool PeersTier::admit_unknown(const cache::ChunkKey& key, const Manifest& manifest, std::span<const std::uint8_t> chunk) {
  ShareCounters& c = node_->counters();
  SpotChecks& checks = node_->spot_checks();
  const auto now = SpotChecks::Clock::now();
  // While the set is full nothing unknown is used, checked or not: filling it (with checks whose
  // KV never comes) must not open a window in which chunks go in unchecked.
  if (checks.full(now)) {
    c.spot_checks_dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const bool check = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < node_->options().spot_check;
  if (!check) {
    node_->remember_unchecked(manifest.producer, key);
    c.unchecked_accepted.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  auto view = cache::decode_chunk(chunk, manifest.meta);  // checked by check_chunk already
  if (!view) return false;
  SpotChecks::Check held;
  held.meta = view->header.meta;
  held.producer = manifest.producer;
  held.payload.assign(view->payload.begin(), view->payload.end());
  if (checks.hold(std::move(held), now) == SpotChecks::Hold::kFull) {  // filled by another thread since
    c.spot_checks_dropped.fetch_add(1, std::memory_order_relaxed);
  }
  return false;  // queued (or already waiting): the engine computes it, put() compares
}

void PeersTier::record_spot_check(const identity::PublicKey& producer, const KvComparison& cmp) {
  ShareCounters& c = node_->counters();
  std::uint32_t bits = 0;
  std::memcpy(&bits, &cmp.max_abs_diff, sizeof bits);  // non-negative floats order as their bits
  std::uint32_t seen = c.spot_check_max_diff_bits.load(std::memory_order_relaxed);
  while (bits > seen && !c.spot_check_max_diff_bits.compare_exchange_weak(seen, bits, std::memory_order_relaxed)) {
  }
  if (cmp.close) {
    c.spot_checks_passed.fetch_add(1, std::memory_order_relaxed);
  } else {
    c.spot_checks_failed.fetch_add(1, std::memory_order_relaxed);
    node_->ban(producer);
  }
}

void PeersTier::finish_spot_check(const cache::ChunkKey& key, std::span<const std::uint8_t> ours,
                                  const cache::ChunkHeader& header) {
  SpotChecks& checks = node_->spot_checks();
  const auto now = SpotChecks::Clock::now();
  auto pending = checks.take(key, now);
  // Only KV computed here from trusted KV is evidence. Ours computed on some other peer's unchecked
  // chunk would let that peer decide the verdict: ban an honest producer (ours is wrong) or clear a
  // cheater whose earlier chunk ours was computed on. Such a check ends without a verdict.
  if (!signed_here(header.meta.provenance)) {
    if (pending) node_->counters().spot_checks_inconclusive.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const bool keep = checks.may_resolve(header.meta, now);  // an alias may name this chunk next
  if (!pending && !keep) return;
  auto view = cache::decode_chunk(ours, header.meta);
  if (!view) {  // our own chunk does not decode: nothing to compare with; the check waits on
    if (pending) checks.restore(std::move(*pending), now);
    return;
  }
  if (pending) {
    // The same key: the same tokens at the same positions, so the same shape (else not close).
    const KvComparison cmp = pending->meta.token_count == header.meta.token_count
                                 ? kv_close(view->payload, pending->payload, header.meta.element_type)
                                 : KvComparison{};
    record_spot_check(pending->producer, cmp);
  }
  if (keep) checks.keep_own(header.meta, std::make_shared<const cache::Bytes>(view->payload.begin(), view->payload.end()));
}

void PeersTier::finish_spot_check_by_alias(const cache::ChunkKey& key, std::span<const std::uint8_t> alias,
                                           const cache::ChunkHeader& header) {
  SpotChecks& checks = node_->spot_checks();
  const auto now = SpotChecks::Clock::now();
  auto pending = checks.take(key, now);
  if (!pending) return;
  const auto target = cache::decode_alias(alias, header.meta);
  const auto own = target ? checks.own(target->key) : std::nullopt;
  if (!own) {  // the chunk it names was not kept (written long before): the check waits, or expires
    checks.restore(std::move(*pending), now);
    return;
  }
  record_spot_check(pending->producer, kv_prefix_close(own->meta, *own->payload, pending->meta, pending->payload));
}

Status PeersTier::put(const cache::ChunkKey& key, std::span<const std::uint8_t> bytes) {
  auto header = cache::parse_chunk_header(bytes);
  if (!header || header->meta.key != key) return invalid_argument("peers: not a chunk of key " + key.hex());
  if (header->meta.kv_format == cache::kAliasKvFormat) {  // prefix aliases stay local (never announced)
    finish_spot_check_by_alias(key, bytes, *header);
    return Status::ok();
  }
  finish_spot_check(key, bytes, *header);  // the engine's own KV of a chunk held back for a check
  node_->announce(key, *header);
  node_->place_fragments(key, bytes, *header);  // --erasure only
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
