#include "cache/disk_tier.h"

#include <unistd.h>

#include <algorithm>

#include "cache/log.h"

namespace kvstash::cache {
namespace {

constexpr std::string_view kSuffix = ".kvc";
constexpr std::size_t kShardDigits = 2;  // 256 shards

bool is_shard_name(const std::string& name) {
  if (name.size() != kShardDigits) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

DiskTier::DiskTier(const DiskTierOptions& options)
    : options_(options), fs_(options.fs ? options.fs : posix_file_system()), pins_(options.pins, options.capacity_bytes) {}

Expected<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierOptions& options) {
  if (options.dir.empty()) return invalid_argument("disk tier: no directory");
  std::unique_ptr<DiskTier> tier(new DiskTier(options));
  KVSTASH_RETURN_IF_ERROR(tier->fs_->make_dirs(options.dir));
  KVSTASH_RETURN_IF_ERROR(tier->scan());
  return tier;
}

std::string DiskTier::path_of(const ChunkKey& key) const {
  std::string hex = key.hex();
  return options_.dir + "/" + hex.substr(0, kShardDigits) + "/" + hex + std::string(kSuffix);
}

Status DiskTier::scan() {
  auto shards = fs_->list_dir(options_.dir);
  if (!shards) return shards.status();
  struct Found {
    ChunkKey key;
    std::uint64_t size;
    std::int64_t mtime_ns;
  };
  std::vector<Found> found;
  const std::uint64_t header_prefix = chunk_header_max_size();
  for (const FileInfo& shard : *shards) {
    if (!shard.is_dir || !is_shard_name(shard.name)) continue;
    const std::string shard_dir = options_.dir + "/" + shard.name;
    auto files = fs_->list_dir(shard_dir);
    if (!files) continue;
    for (const FileInfo& file : *files) {
      if (file.is_dir) continue;
      const std::string path = shard_dir + "/" + file.name;
      if (file.name.starts_with(".") && file.name.find(".tmp.") != std::string::npos) {
        (void)fs_->remove(path);  // an interrupted write
        continue;
      }
      if (!file.name.ends_with(kSuffix)) continue;  // not ours
      auto key = ChunkKey::from_hex(file.name.substr(0, file.name.size() - kSuffix.size()));
      if (!key) continue;
      auto prefix = fs_->read_file(path, header_prefix);
      Expected<ChunkHeader> header = prefix ? parse_chunk_header(*prefix) : prefix.status();
      if (!header || header->meta.key != *key || header->total_size() != file.size) {
        (void)fs_->remove(path);
        counters_.rejected();
        continue;
      }
      found.push_back({*key, file.size, file.mtime_ns});
    }
  }
  // Oldest first, each pushed to the front: the most recently used ends up at the front.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::lock_guard lock(mu_);
  for (const Found& f : found) {
    lru_.push_front({f.key, f.size});
    index_[f.key] = lru_.begin();
    bytes_used_ += f.size;
  }
  // The bound may have shrunk since the files were written.
  while (bytes_used_ > options_.capacity_bytes && !lru_.empty()) {
    auto cold = std::prev(lru_.end());
    (void)fs_->remove(path_of(cold->key));
    drop_locked(cold);
    counters_.evicted();
  }
  return Status::ok();
}

std::size_t DiskTier::contains(std::span<const ChunkKey> keys) {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  while (n < keys.size() && index_.count(keys[n])) ++n;
  return n;
}

std::vector<bool> DiskTier::holds(std::span<const ChunkKey> keys) {
  std::vector<bool> out(keys.size());
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < keys.size(); ++i) out[i] = index_.count(keys[i]) > 0;
  return out;
}

Expected<Bytes> DiskTier::get(const ChunkKey& key) {
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (!index_.count(key)) {
      counters_.miss();
      return not_found("disk tier: " + key.hex());
    }
  }
  const std::string path = path_of(key);
  auto bytes = fs_->read_file_once(path);
  if (!bytes) {
    // Evicted or erased between the index check and the read, or the file is gone under us.
    counters_.miss();
    if (bytes.status().code() != StatusCode::kNotFound) counters_.error();
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) drop_locked(it->second);
    return not_found("disk tier: " + bytes.status().message());
  }
  ChunkError why = ChunkError::kNone;
  auto header = verify_chunk(*bytes, &why);
  if (!header || header->meta.key != key) {
    remove_file_and_entry(key);
    counters_.rejected();
    counters_.miss();
    return corrupt("disk tier: " + path + ": " +
                   (header ? std::string("holds another key") : header.status().message()));
  }
  (void)fs_->touch(path);  // best effort: only the LRU order after a restart depends on it
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) lru_.splice(lru_.begin(), lru_, it->second);
    pins_.on_hit(key);
  }
  counters_.hit(bytes->size(), std::chrono::steady_clock::now() - start);
  return bytes;
}

Status DiskTier::put(const ChunkKey& key, std::span<const std::uint8_t> bytes) {
  auto header = parse_chunk_header(bytes);
  if (!header || header->meta.key != key || header->total_size() != bytes.size()) {
    return invalid_argument("disk tier: put of bytes that are not the chunk " + key.hex());
  }
  std::string temp;
  {
    std::lock_guard lock(mu_);
    if (std::chrono::steady_clock::now() < writes_off_until_) {
      return resource_exhausted("disk tier: writes disabled after an error");
    }
    if (writes_off_logged_) {
      writes_off_logged_ = false;
      log_warning("disk tier " + options_.dir + ": writes enabled again");
    }
    // Replacing a key: drop the old entry first so its bytes count as free.
    if (auto it = index_.find(key); it != index_.end()) {
      (void)fs_->remove(path_of(key));
      drop_locked(it->second);
    }
    if (!make_room_locked(bytes.size())) {
      return resource_exhausted("disk tier: chunk larger than the tier");
    }
    bytes_reserved_ += bytes.size();
    temp = options_.dir + "/" + key.hex().substr(0, kShardDigits) + "/." + key.hex() + ".tmp." +
           std::to_string(::getpid()) + "." + std::to_string(temp_counter_++);
  }
  const std::string final_path = path_of(key);
  Status st = fs_->make_dirs(final_path.substr(0, final_path.rfind('/')));
  if (st) st = fs_->write_file_synced(temp, bytes);
  if (st) st = fs_->rename(temp, final_path);
  std::lock_guard lock(mu_);
  bytes_reserved_ -= bytes.size();
  if (!st) {
    (void)fs_->remove(temp);
    counters_.error();
    disable_writes(st);
    return st;
  }
  if (auto it = index_.find(key); it != index_.end()) drop_locked(it->second);  // a racing put
  lru_.push_front({key, bytes.size()});
  index_[key] = lru_.begin();
  key_changed(true, key);
  bytes_used_ += bytes.size();
  pins_.on_put(key, bytes.size());
  counters_.written(bytes.size());
  return Status::ok();
}

void DiskTier::touch(std::span<const ChunkKey> keys) {
  std::vector<std::string> paths;
  {
    std::lock_guard lock(mu_);
    for (const ChunkKey& key : keys) {
      if (auto it = index_.find(key); it != index_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        pins_.on_hit(key);
        paths.push_back(path_of(key));
      }
    }
  }
  for (const std::string& path : paths) (void)fs_->touch(path);  // best effort, as in get()
}

std::size_t DiskTier::pin(std::span<const ChunkKey> keys, std::chrono::seconds ttl) {
  std::lock_guard lock(mu_);
  pins_.expire();
  std::size_t n = 0;
  for (const ChunkKey& key : keys) {
    auto it = index_.find(key);
    const std::int64_t held = it == index_.end() ? -1 : static_cast<std::int64_t>(it->second->size);
    if (pins_.pin(key, ttl, held)) ++n;
  }
  return n;
}

bool DiskTier::make_room_locked(std::uint64_t incoming) {
  if (incoming > options_.capacity_bytes) return false;
  if (bytes_used_ + bytes_reserved_ + incoming > options_.capacity_bytes) pins_.expire();
  // Live pinned files at the cold end move to the warm end (memory_tier.cc does the same).
  std::size_t passed = 0;
  while (bytes_used_ + bytes_reserved_ + incoming > options_.capacity_bytes) {
    if (lru_.empty()) return false;  // the rest is reserved by writes in flight
    auto cold = std::prev(lru_.end());
    if (passed < lru_.size() && pins_.pinned(cold->key)) {
      lru_.splice(lru_.begin(), lru_, cold);
      ++passed;
      continue;
    }
    (void)fs_->remove(path_of(cold->key));
    drop_locked(cold);
    counters_.evicted();
  }
  return true;
}

void DiskTier::disable_writes(const Status& why) {
  writes_off_until_ = std::chrono::steady_clock::now() + options_.write_backoff;
  if (!writes_off_logged_) {
    writes_off_logged_ = true;
    log_warning("disk tier " + options_.dir + ": write failed (" + why.to_string() +
                "); disk writes disabled for " + std::to_string(options_.write_backoff.count()) + " ms");
  }
}

bool DiskTier::writes_disabled() const {
  std::lock_guard lock(mu_);
  return std::chrono::steady_clock::now() < writes_off_until_;
}

void DiskTier::drop_locked(Lru::iterator it) {
  pins_.on_drop(it->key);
  bytes_used_ -= it->size;
  key_changed(false, it->key);
  index_.erase(it->key);
  lru_.erase(it);
}

void DiskTier::remove_file_and_entry(const ChunkKey& key) {
  std::lock_guard lock(mu_);
  (void)fs_->remove(path_of(key));
  if (auto it = index_.find(key); it != index_.end()) drop_locked(it->second);
}

Status DiskTier::erase(const ChunkKey& key) {
  remove_file_and_entry(key);
  return Status::ok();
}

TierStats DiskTier::stats() const {
  TierStats s;
  counters_.fill(s);
  std::lock_guard lock(mu_);
  s.entries = index_.size();
  s.bytes_used = bytes_used_;
  s.capacity_bytes = options_.capacity_bytes;
  pins_.expire();
  const PinStats p = pins_.stats();
  s.pinned_entries = p.pinned_entries;
  s.pinned_bytes = p.pinned_bytes;
  s.pin_intents = p.intents;
  s.pins_refused = p.pins_refused;
  s.pins_expired = p.pins_expired;
  return s;
}

Expected<std::vector<ChunkKey>> DiskTier::list_keys() {
  std::lock_guard lock(mu_);
  std::vector<ChunkKey> keys;
  keys.reserve(lru_.size());
  for (const Entry& e : lru_) keys.push_back(e.key);
  return keys;
}

Status DiskTier::clear() {
  std::lock_guard lock(mu_);
  Status first;
  for (const Entry& e : lru_) {
    Status st = fs_->remove(path_of(e.key));
    if (!st && first.is_ok()) first = st;
  }
  for (const Entry& e : lru_) key_changed(false, e.key);
  lru_.clear();
  index_.clear();
  pins_.clear();
  bytes_used_ = 0;
  return first;
}

}  // namespace kvstash::cache
