// ShareNode's bans (share_node.h): the ban file, what derives from a banned producer, and the walk
// that erases it from the local tiers (at a ban, and at start for bans from before a restart).
//
// The ban file is ShareOptions::ban_file: a comment line, then one hex ed25519 key a line, written
// whole to FILE.tmp and renamed over FILE at each ban (a crash leaves the old list or the new one);
// lines that are not keys are skipped with a warning. `kvstash serve` keeps it next to the identity
// key, so a node's bans live and go with its identity.
#include <sstream>

#include "cache/disk_tier.h"
#include "cache/file_system.h"
#include "cache/log.h"
#include "cache/response_record.h"
#include "cache/semantic_entry.h"
#include "share/share_node.h"

namespace kvstash::share {

bool ShareNode::banned(const identity::PublicKey& producer) const {
  std::lock_guard lock(mu_);
  return banned_.count(producer) != 0;
}

bool ShareNode::derives_from_banned(const cache::Provenance& provenance) const {
  if (provenance.producers.empty()) return false;
  std::lock_guard lock(mu_);
  // An incomplete list (more producers than a chunk records) may name any banned producer.
  if (provenance.producers.back() == cache::kMoreProducers) return !banned_.empty();
  for (const auto& producer : provenance.producers) {
    if (banned_.count(producer)) return true;
  }
  return false;
}

void ShareNode::on_ban(std::function<void(const identity::PublicKey&)> callback) {
  ban_callbacks_.push_back(std::move(callback));
}

void ShareNode::load_bans() {
  if (options_.ban_file.empty()) return;
  auto text = cache::posix_file_system()->read_file(options_.ban_file, std::uint64_t{1} << 24);
  if (!text) return;  // none yet
  std::istringstream in(std::string(text->begin(), text->end()));
  std::string line;
  std::size_t loaded = 0;
  std::lock_guard lock(mu_);
  while (std::getline(in, line)) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto key = identity::parse_public_key(line);
    if (!key) {
      cache::log_warning("peer sharing: " + options_.ban_file + ": ignored a line that is not a key");
      continue;
    }
    loaded += banned_.insert(*key).second ? 1 : 0;
  }
  purge_pending_ = !banned_.empty();  // chunks and records kept from before the restart
  if (loaded > 0) cache::log_info("peer sharing: " + std::to_string(loaded) + " banned producers from " + options_.ban_file);
}

void ShareNode::save_bans() {
  if (options_.ban_file.empty()) return;
  std::lock_guard write_lock(ban_mu_);
  std::string text = "# producers banned by this kvstash node (failed spot checks); one ed25519 key a line\n";
  {
    std::lock_guard lock(mu_);
    for (const auto& k : banned_) text += identity::to_hex(k) + "\n";
  }
  // Written whole then renamed over the old list: a crash leaves the old list or the new one.
  auto* fs = cache::posix_file_system();
  const std::string tmp = options_.ban_file + ".tmp";
  Status st = fs->write_file_synced(tmp, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
  if (st) st = fs->rename(tmp, options_.ban_file);
  if (!st) cache::log_warning("peer sharing: cannot save the ban list to " + options_.ban_file + ": " + st.message());
}

bool ShareNode::derives_from_banned_bytes(std::span<const std::uint8_t> bytes, bool records) const {
  auto header = cache::parse_chunk_header(bytes);
  if (!header) return false;
  if (!records) return derives_from_banned(header->meta.provenance);
  const bool record = header->meta.kv_format == cache::kResponseKvFormat;
  if (!record && header->meta.kv_format != cache::kSemanticKvFormat) return false;
  auto view = cache::decode_chunk(bytes, header->meta);
  if (!view) return false;
  if (record) {
    auto r = cache::decode_response_record(view->payload);
    return r && banned(r->producer);
  }
  auto e = cache::decode_semantic_entry(view->payload);
  return e && banned(e->producer);
}

void ShareNode::purge_banned(cache::TieredStore* store, bool records) {
  {
    std::lock_guard lock(mu_);
    if (banned_.empty()) return;
  }
  std::uint64_t purged = 0;
  for (std::size_t t = 0; store && t < store->tier_count(); ++t) {
    cache::Tier& tier = store->tier(t);
    const std::string name = tier.name();
    if (name != "memory" && name != "disk") continue;  // redis: the load filter, when read
    auto keys = tier.list_keys();
    if (!keys) continue;
    auto* disk = records ? nullptr : dynamic_cast<cache::DiskTier*>(&tier);
    for (const auto& key : *keys) {
      {
        std::lock_guard lock(mu_);
        if (stopping_) return;
      }
      bool derived = false;
      if (disk) {  // a chunk's provenance is in its header: no need to read megabytes of KV
        auto prefix = cache::posix_file_system()->read_file(disk->path_of(key), cache::chunk_header_max_size());
        derived = prefix && derives_from_banned_bytes(*prefix, false);
      } else if (auto bytes = tier.get_shared(key); bytes && *bytes) {
        derived = derives_from_banned_bytes(**bytes, records);
      }
      if (derived && tier.erase(key)) ++purged;
    }
  }
  if (purged == 0) return;
  (records ? counters_.purged_records : counters_.purged_chunks).fetch_add(purged, std::memory_order_relaxed);
  cache::log_warning("peer sharing: " + std::to_string(purged) + (records ? " response records" : " chunks") +
                     " derived from banned producers erased");
}

}  // namespace kvstash::share
