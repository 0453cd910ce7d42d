#include "engine/block_pool.h"

#include <algorithm>

#include <cassert>

namespace kvstash {

BlockPool::BlockPool(const ModelConfig& config, int block_size, std::int64_t n_blocks) {
  view_.n_blocks = n_blocks;
  view_.set_shape(config);
  view_.block_size = block_size;
  const std::size_t elems = view_.block_elems() * static_cast<std::size_t>(n_blocks);
  storage_ = HugePageBuffer::allocate(elems * sizeof(std::uint16_t));
  if (storage_.data() != nullptr) {
    view_.base = reinterpret_cast<std::uint16_t*>(storage_.data());
  } else {
    small_storage_.resize(elems);
    view_.base = small_storage_.data();
  }
  meta_.resize(static_cast<std::size_t>(n_blocks));
  free_.reserve(static_cast<std::size_t>(n_blocks));
  // Hand out low block numbers first (pop from the back).
  for (std::int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
}

Expected<std::int32_t> BlockPool::allocate() {
  std::int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    BlockMeta& m = meta_[static_cast<std::size_t>(block)];
    key_changed(false, *m.key);
    by_key_.erase(*m.key);
    m.key.reset();
  } else {
    return resource_exhausted("KV block pool is full (" + std::to_string(n_blocks()) + " blocks in use)");
  }
  meta_[static_cast<std::size_t>(block)].refs = 1;
  meta_[static_cast<std::size_t>(block)].taint.reset();
  return block;
}

void BlockPool::retain(std::int32_t block) {
  BlockMeta& m = meta_[static_cast<std::size_t>(block)];
  if (m.refs == 0) {
    assert(m.key && "retaining a free block");
    lru_.erase(m.lru_pos);
  }
  ++m.refs;
}

void BlockPool::release(std::int32_t block) {
  BlockMeta& m = meta_[static_cast<std::size_t>(block)];
  assert(m.refs > 0);
  if (--m.refs > 0) return;
  if (m.key) {
    m.lru_pos = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::release_table(std::vector<std::int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) release(*it);
  table.clear();
}

std::optional<std::int32_t> BlockPool::lookup(const cache::ChunkKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  retain(it->second);
  return it->second;
}

void BlockPool::register_block(std::int32_t block, const cache::ChunkKey& key) {
  BlockMeta& m = meta_[static_cast<std::size_t>(block)];
  if (m.key || by_key_.count(key)) return;
  m.key = key;
  by_key_.emplace(key, block);
  key_changed(true, key);
}

void BlockPool::unregister(std::int32_t block) {
  BlockMeta& m = meta_[static_cast<std::size_t>(block)];
  assert(m.refs > 0);
  if (!m.key) return;
  key_changed(false, *m.key);
  by_key_.erase(*m.key);
  m.key.reset();
}

std::int64_t BlockPool::forget_derived_from(const cache::ProducerKey& producer) {
  std::int64_t forgotten = 0;
  for (std::size_t b = 0; b < meta_.size(); ++b) {
    BlockMeta& m = meta_[b];
    if (!m.key || !m.taint) continue;
    const bool overflowed = !m.taint->empty() && m.taint->back() == cache::kMoreProducers;
    if (!overflowed && std::find(m.taint->begin(), m.taint->end(), producer) == m.taint->end()) continue;
    key_changed(false, *m.key);
    by_key_.erase(*m.key);
    m.key.reset();
    if (m.refs == 0) {  // cached: free now
      lru_.erase(m.lru_pos);
      free_.push_back(static_cast<std::int32_t>(b));
    }
    ++forgotten;
  }
  return forgotten;
}

KvTaint merge_taint(const KvTaint& a, const KvTaint& b) {
  if (!b || a == b) return a;
  if (!a) return b;
  auto merged = std::make_shared<std::vector<cache::ProducerKey>>(*a);
  for (const auto& k : *b) {
    if (!merged->empty() && merged->back() == cache::kMoreProducers) break;  // already incomplete
    if (std::find(merged->begin(), merged->end(), k) != merged->end()) continue;
    if (merged->size() + 1 >= cache::kMaxProvenanceProducers && k != cache::kMoreProducers) {
      merged->resize(cache::kMaxProvenanceProducers - 1);  // no room for all: say the list is incomplete
      merged->push_back(cache::kMoreProducers);
      break;
    }
    merged->push_back(k);
  }
  if (merged->size() == a->size()) return a;
  return merged;
}

KvTaint taint_of(const cache::Provenance& provenance) {
  if (provenance.trusted()) return nullptr;
  return std::make_shared<const std::vector<cache::ProducerKey>>(provenance.producers);
}

cache::Provenance provenance_of(const KvTaint& taint) {
  cache::Provenance p;
  p.trust = taint ? cache::ChunkTrust::kUnchecked : cache::ChunkTrust::kComputed;
  if (taint) p.producers = *taint;
  return p;
}

std::span<std::uint8_t> BlockPool::block_bytes(std::int32_t block) {
  auto* p = reinterpret_cast<std::uint8_t*>(view_.base + view_.block_elems() * static_cast<std::size_t>(block));
  return {p, view_.block_bytes()};
}

}  // namespace kvstash
