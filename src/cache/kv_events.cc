#include "cache/kv_events.h"

#include "cache/tiered_store.h"

#include <algorithm>
#include <cstdio>
#include <random>

namespace kvstash::cache {

const char* kv_source_name(KvSource source) {
  switch (source) {
    case KvSource::kPool: return "pool";
    case KvSource::kMemory: return "memory";
    case KvSource::kDisk: return "disk";
  }
  return "?";
}

Expected<KvSource> kv_source_from_name(std::string_view name) {
  for (int i = 0; i < kKvSourceCount; ++i) {
    if (name == kv_source_name(static_cast<KvSource>(i))) return static_cast<KvSource>(i);
  }
  return invalid_argument("unknown KV event source '" + std::string(name) + "' (pool, memory or disk)");
}

namespace {

std::string random_epoch() {
  std::random_device device;
  const std::uint64_t v = (std::uint64_t{device()} << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

KvEventLog::KvEventLog(KvEventLogOptions options) : options_(options), epoch_(random_epoch()) {
  ring_.resize(std::max<std::size_t>(1, options_.retained));
}

bool KvEventLog::publish_locked(std::span<const KvChange> changes) {
  bool any = false;
  for (const KvChange& c : changes) {
    auto& held = held_[static_cast<int>(c.source)];
    const bool changed = c.stored ? held.insert(c.key).second : held.erase(c.key) > 0;
    if (!changed) continue;  // a repeat: the state (and so the stream) is unchanged
    ++last_seq_;
    ring_[(last_seq_ - 1) % ring_.size()] = KvEvent{last_seq_, c};
    any = true;
  }
  return any;
}

void KvEventLog::publish(std::span<const KvChange> changes) {
  bool any = false;
  {
    std::lock_guard lock(mu_);
    any = publish_locked(changes);
  }
  if (any) changed_.notify_all();
}

bool KvEventLog::try_publish(std::span<const KvChange> changes) {
  bool any = false;
  {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    any = publish_locked(changes);
  }
  if (any) changed_.notify_all();
  return true;
}

std::uint64_t KvEventLog::last_seq() const {
  std::lock_guard lock(mu_);
  return last_seq_;
}

KvSnapshot KvEventLog::snapshot() const {
  KvSnapshot out;
  std::lock_guard lock(mu_);
  out.seq = last_seq_;
  for (int i = 0; i < kKvSourceCount; ++i) out.keys[i].assign(held_[i].begin(), held_[i].end());
  return out;
}

Expected<std::vector<KvEvent>> KvEventLog::events_after(std::uint64_t since, std::size_t max) const {
  std::lock_guard lock(mu_);
  const std::uint64_t oldest = last_seq_ >= ring_.size() ? last_seq_ - ring_.size() + 1 : 1;
  if (since > last_seq_ || since + 1 < oldest) {
    return not_found("events after " + std::to_string(since) + " are not retained (oldest " +
                                               std::to_string(oldest) + ", last " + std::to_string(last_seq_) + ")");
  }
  std::vector<KvEvent> out;
  for (std::uint64_t s = since + 1; s <= last_seq_ && out.size() < max; ++s) out.push_back(ring_[(s - 1) % ring_.size()]);
  return out;
}

bool KvEventLog::wait_after(std::uint64_t since, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return closed_ || last_seq_ > since; });
  return last_seq_ > since;
}

void KvEventLog::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  changed_.notify_all();
}

void attach_tier_events(TieredStore& store, KvEventLog& log) {
  for (std::size_t i = 0; i < store.tier_count(); ++i) {
    Tier& tier = store.tier(i);
    Expected<KvSource> source = kv_source_from_name(tier.name());
    if (!source) continue;  // redis, peers: shared between nodes, not this node's to report
    const KvSource src = *source;
    // The observer first, then what is held: a change in between is reported twice at worst,
    // and the log drops the repeat.
    tier.set_key_observer([&log, src](bool held, const ChunkKey& key) { log.publish(KvChange{held, src, key}); });
    if (Expected<std::vector<ChunkKey>> keys = tier.list_keys()) {
      std::vector<KvChange> changes;
      changes.reserve(keys->size());
      for (const ChunkKey& key : *keys) changes.push_back(KvChange{true, src, key});
      log.publish(changes);
    }
  }
}

}  // namespace kvstash::cache
