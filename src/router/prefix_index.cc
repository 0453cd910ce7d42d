#include "router/prefix_index.h"

#include <algorithm>

namespace kvstash::router {

RequestKeys compute_request_keys(const WorkerKvInfo& info, std::span<const std::int32_t> tokens,
                                 const std::string& cache_salt) {
  RequestKeys out;
  out.prompt_tokens = static_cast<int>(tokens.size());
  if (tokens.empty() || info.block_size <= 0) return out;
  // The engine computes the last prompt token whatever it holds (its logits give the first token).
  out.max_blocks = (out.prompt_tokens - 1) / info.block_size;
  const auto reusable = tokens.first(static_cast<std::size_t>(out.max_blocks) * static_cast<std::size_t>(info.block_size));
  out.block_keys = cache::chunk_keys(info.fingerprint, info.kv_format, cache_salt, reusable,
                                     static_cast<std::size_t>(info.block_size));
  if (info.chunk_tokens > 0) {
    out.chunk_keys = cache::chunk_keys(info.fingerprint, info.kv_format, cache_salt, reusable,
                                       static_cast<std::size_t>(info.chunk_tokens));
  }
  return out;
}

void PrefixIndex::clear() {
  std::lock_guard lock(mu_);
  for (auto& set : held_) set.clear();
}

void PrefixIndex::apply(const cache::KvChange& change) { apply(std::span<const cache::KvChange>(&change, 1)); }

void PrefixIndex::apply(std::span<const cache::KvChange> changes) {
  std::lock_guard lock(mu_);
  for (const cache::KvChange& c : changes) {
    auto& set = held_[static_cast<int>(c.source)];
    if (c.stored) {
      set.insert(c.key);
    } else {
      set.erase(c.key);
    }
  }
}

std::size_t PrefixIndex::size(cache::KvSource source) const {
  std::lock_guard lock(mu_);
  return held_[static_cast<int>(source)].size();
}

PrefixMatch PrefixIndex::match(const WorkerKvInfo& info, const RequestKeys& keys) const {
  PrefixMatch m;
  if (keys.max_blocks == 0) return m;
  const int bs = info.block_size;
  const auto& pool = held_[static_cast<int>(cache::KvSource::kPool)];
  const auto& memory = held_[static_cast<int>(cache::KvSource::kMemory)];
  const auto& disk = held_[static_cast<int>(cache::KvSource::kDisk)];
  std::lock_guard lock(mu_);
  int pool_blocks = 0;
  while (pool_blocks < static_cast<int>(keys.block_keys.size()) && pool.count(keys.block_keys[static_cast<std::size_t>(pool_blocks)])) {
    ++pool_blocks;
  }
  // The tiers' run: full chunks from the first, then at most one tail (the longest held). Each
  // block remembers its fastest tier (true: memory).
  std::vector<bool> in_memory;
  if (info.chunk_tokens > 0) {
    const int bpc = info.chunk_tokens / bs;
    std::size_t c = 0;
    for (; c < keys.chunk_keys.size(); ++c) {
      const bool mem = memory.count(keys.chunk_keys[c]) > 0;
      if (!mem && !disk.count(keys.chunk_keys[c])) break;
      in_memory.insert(in_memory.end(), static_cast<std::size_t>(bpc), mem);
    }
    {  // where the run ends: a stored tail, or a stored chunk's head (its prefix aliases)
      const int first = static_cast<int>(c) * bpc;
      const int k_max = c == keys.chunk_keys.size() ? keys.max_blocks - first : bpc - 1;
      for (int k = k_max; k > 0; --k) {
        const cache::ChunkKey& tail = keys.block_keys[static_cast<std::size_t>(first + k - 1)];
        const bool mem = memory.count(tail) > 0;
        if (!mem && !disk.count(tail)) continue;
        in_memory.insert(in_memory.end(), static_cast<std::size_t>(k), mem);
        break;
      }
    }
  }
  m.pool_tokens = pool_blocks * bs;
  for (std::size_t b = static_cast<std::size_t>(pool_blocks); b < in_memory.size(); ++b) {
    (in_memory[b] ? m.memory_tokens : m.disk_tokens) += bs;
  }
  return m;
}

}  // namespace kvstash::router
