#include "engine/block_pool.h"

#include <algorithm>

#include <cassert>
#include <cstring>

namespace kvstash {

namespace {

// Memory for `elems` f16 values: huge pages where the kernel gives them, else `fallback`.
std::uint16_t* kv_storage(std::size_t elems, HugePageBuffer& huge, std::vector<std::uint16_t>& fallback) {
  huge = HugePageBuffer::allocate(elems * sizeof(std::uint16_t));
  if (huge.data() != nullptr) return reinterpret_cast<std::uint16_t*>(huge.data());
  fallback.resize(elems);
  return fallback.data();
}

}  // namespace

BlockPool::BlockPool(const ModelConfig& config, int block_size, std::int64_t n_blocks) {
  view_.n_blocks = n_blocks;
  view_.set_shape(config);
  view_.block_size = block_size;
  setup_split(config);
  // (A model whose every layer has a window keeps no full-layer KV: at least one value, never read.)
  view_.base = kv_storage(std::max<std::size_t>(1, view_.block_elems() * static_cast<std::size_t>(n_blocks)), storage_,
                          small_storage_);
  if (view_.window_group_layers > 0) {  // setup_split found window layers
    view_.window_base =
        kv_storage(std::max<std::size_t>(1, view_.window_block_elems() * static_cast<std::size_t>(n_blocks)),
                   window_storage_, small_window_storage_);
    window_of_.assign(static_cast<std::size_t>(n_blocks), -1);
    window_holders_.assign(static_cast<std::size_t>(n_blocks), 0);
    view_.window_of = window_of_.data();
    window_free_.reserve(static_cast<std::size_t>(n_blocks));
    for (std::int64_t b = n_blocks - 1; b >= 0; --b) window_free_.push_back(static_cast<std::int32_t>(b));
  }
  // Every block's memory is backed ahead of its first use, off the engine thread, from
  // start_prefault() on (block_pool.h).
  for (auto [buffer, prefault] : {std::pair{&storage_, &prefault_}, std::pair{&window_storage_, &window_prefault_}}) {
    if (buffer->data() == nullptr) continue;
    *prefault = std::make_unique<Prefaulter>(buffer->data(), buffer->size());
  }
  meta_.resize(static_cast<std::size_t>(n_blocks));
  free_.reserve(static_cast<std::size_t>(n_blocks));
  // Hand out low block numbers first (pop from the back).
  for (std::int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
}

void BlockPool::start_prefault() {
  if (prefault_started_) return;
  prefault_started_ = true;
  if (prefault_) prefault_->want(storage_.size());
  if (window_prefault_) window_prefault_->want(window_storage_.size());
}

bool BlockPool::prefault_done() const {
  auto done = [](const std::unique_ptr<Prefaulter>& p, std::size_t size) {
    return !p || !p->supported() || p->populated() >= size;
  };
  return prefault_started_ && done(prefault_, storage_.size()) && done(window_prefault_, window_storage_.size());
}

void BlockPool::setup_split(const ModelConfig& config) {
  int n_window = 0, max_window = 0;
  for (const LayerSpec& l : config.layers) {
    if (l.attention.kind == AttentionKind::kSlidingWindow) {
      ++n_window;
      max_window = std::max(max_window, l.attention.window);
    }
  }
  if (n_window == 0) return;  // one group: the layout of every model without window layers
  int in_full = 0, in_window = 0;
  for (const LayerSpec& l : config.layers) {
    const bool window = l.attention.kind == AttentionKind::kSlidingWindow;
    layer_window_.push_back(window ? 1 : 0);
    layer_index_.push_back(static_cast<std::int16_t>(window ? in_window++ : in_full++));
  }
  view_.group_layers = in_full;
  view_.window_group_layers = in_window;
  view_.layer_index = layer_index_.data();
  view_.layer_window = layer_window_.data();
  view_.max_window = max_window;
  // window_base is set by the constructor once the storage exists; split() tests it.
}

Expected<std::int32_t> BlockPool::allocate() {
  std::int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    // The least recently used unpinned cached block; pinned ones met on the way move to the
    // recent end (they stay cached), so the next eviction does not walk them again. All pinned:
    // the least recently used of them goes (a pin never fails an allocation).
    if (!pins_.empty()) {
      for (std::size_t walked = 0, n = lru_.size(); walked < n && pinned(meta_[static_cast<std::size_t>(lru_.front())]); ++walked) {
        lru_.splice(lru_.end(), lru_, lru_.begin());
      }
      if (pinned(meta_[static_cast<std::size_t>(lru_.front())])) ++pinned_evictions_;
    }
    block = lru_.front();
    lru_.pop_front();
    BlockMeta& m = meta_[static_cast<std::size_t>(block)];
    key_changed(false, *m.key);
    by_key_.erase(*m.key);
    m.key.reset();
    if (split() && window_of_[static_cast<std::size_t>(block)] >= 0) {
      --n_window_cached_;
      free_window(block);
    }
  } else {
    return resource_exhausted("KV block pool is full (" + std::to_string(n_blocks()) + " blocks in use)");
  }
  if (split()) {
    // Every window block belongs to a distinct allocated or cached block, so with as many window
    // blocks as blocks one is free whenever this block was (block_pool.h).
    assert(!window_free_.empty());
    window_of_[static_cast<std::size_t>(block)] = window_free_.back();
    window_free_.pop_back();
    window_holders_[static_cast<std::size_t>(block)] = 1;
  }
  meta_[static_cast<std::size_t>(block)].refs = 1;
  meta_[static_cast<std::size_t>(block)].taint.reset();
  return block;
}

void BlockPool::retain(std::int32_t block, bool need_window) {
  BlockMeta& m = meta_[static_cast<std::size_t>(block)];
  const bool window = split() && window_of_[static_cast<std::size_t>(block)] >= 0;
  if (m.refs == 0) {
    assert(m.key && "retaining a free block");
    lru_.erase(m.lru_pos);
    if (window) --n_window_cached_;
  }
  ++m.refs;
  if (window && need_window) ++window_holders_[static_cast<std::size_t>(block)];
}

void BlockPool::release(std::int32_t block, bool need_window) {
  BlockMeta& m = meta_[static_cast<std::size_t>(block)];
  assert(m.refs > 0);
  const bool window = split() && window_of_[static_cast<std::size_t>(block)] >= 0;
  if (window && need_window) {
    assert(window_holders_[static_cast<std::size_t>(block)] > 0);
    --window_holders_[static_cast<std::size_t>(block)];
  }
  if (--m.refs > 0) {
    // The holders left are all past this block's window part: nobody reads it again.
    if (window && window_holders_[static_cast<std::size_t>(block)] == 0) free_window(block);
    return;
  }
  if (m.key) {
    m.lru_pos = lru_.insert(lru_.end(), block);
    if (window) ++n_window_cached_;  // kept with the cached block: a later prefix hit may resume on it
  } else {
    free_.push_back(block);
    if (window) free_window(block);
  }
}

void BlockPool::release_table(std::vector<std::int32_t>& table, int n_window_dropped) {
  for (std::size_t i = table.size(); i-- > 0;) release(table[i], static_cast<int>(i) >= n_window_dropped);
  table.clear();
}

void BlockPool::drop_window(std::int32_t block) {
  if (!split() || window_of_[static_cast<std::size_t>(block)] < 0) return;
  assert(meta_[static_cast<std::size_t>(block)].refs > 0 && window_holders_[static_cast<std::size_t>(block)] > 0);
  if (--window_holders_[static_cast<std::size_t>(block)] == 0) free_window(block);
}

void BlockPool::free_window(std::int32_t block) {
  window_free_.push_back(window_of_[static_cast<std::size_t>(block)]);
  window_of_[static_cast<std::size_t>(block)] = -1;
  window_holders_[static_cast<std::size_t>(block)] = 0;
}

bool BlockPool::key_has_window(const cache::ChunkKey& key) const {
  auto it = by_key_.find(key);
  return it != by_key_.end() && has_window(it->second);
}

std::int64_t BlockPool::n_window_used() const {
  if (!split()) return 0;
  return n_blocks() - static_cast<std::int64_t>(window_free_.size()) - n_window_cached_;
}

std::size_t BlockPool::record_bytes() const {
  return view_.block_bytes() + view_.window_block_elems() * sizeof(std::uint16_t);
}

bool BlockPool::copy_out(std::int32_t block, std::uint8_t* out) const {
  if (!has_window(block)) return false;
  const std::size_t full = view_.block_bytes();
  std::memcpy(out, view_.base + view_.block_elems() * static_cast<std::size_t>(block), full);
  if (split()) {
    std::memcpy(out + full,
                view_.window_base + view_.window_block_elems() * static_cast<std::size_t>(window_of_[static_cast<std::size_t>(block)]),
                view_.window_block_elems() * sizeof(std::uint16_t));
  }
  return true;
}

void BlockPool::copy_in(std::int32_t block, const std::uint8_t* in) {
  assert(has_window(block));
  const std::size_t full = view_.block_bytes();
  std::memcpy(view_.base + view_.block_elems() * static_cast<std::size_t>(block), in, full);
  if (split()) {
    std::memcpy(view_.window_base + view_.window_block_elems() * static_cast<std::size_t>(window_of_[static_cast<std::size_t>(block)]),
                in + full, view_.window_block_elems() * sizeof(std::uint16_t));
  }
}

std::optional<std::int32_t> BlockPool::lookup(const cache::ChunkKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  retain(it->second);
  if (auto pin = pins_.find(key); pin != pins_.end()) pin->second.until = std::max(pin->second.until, pin_now_ + pin->second.ttl);
  return it->second;
}

std::size_t BlockPool::pin(std::span<const cache::ChunkKey> keys, std::chrono::seconds ttl) {
  if (ttl.count() <= 0) return 0;
  const auto max_pins = static_cast<std::size_t>(pin_max_share_ * static_cast<double>(n_blocks()));
  std::size_t pinned_now = 0;
  for (const cache::ChunkKey& key : keys) {
    auto it = pins_.find(key);
    if (it == pins_.end()) {
      if (pins_.size() >= max_pins) {
        ++pins_refused_;
        continue;
      }
      it = pins_.emplace(key, Pin{ttl, pin_now_ + ttl}).first;
    } else {
      it->second.ttl = std::max(it->second.ttl, ttl);
      it->second.until = std::max(it->second.until, pin_now_ + ttl);
    }
    next_expiry_ = std::min(next_expiry_, it->second.until);
    ++pinned_now;
  }
  return pinned_now;
}

void BlockPool::set_pin_clock(PinClock::time_point now) {
  pin_now_ = now;
  if (now < next_expiry_) return;
  next_expiry_ = PinClock::time_point::max();
  for (auto it = pins_.begin(); it != pins_.end();) {
    if (it->second.until <= now) {
      it = pins_.erase(it);
    } else {
      next_expiry_ = std::min(next_expiry_, it->second.until);
      ++it;
    }
  }
}

std::int64_t BlockPool::n_pinned_cached() const {
  // Over the pins (at most pin_max_share of the blocks), not the whole LRU: this runs every step.
  std::int64_t n = 0;
  for (const auto& [key, pin] : pins_) {
    const auto it = by_key_.find(key);
    n += it != by_key_.end() && meta_[static_cast<std::size_t>(it->second)].refs == 0;
  }
  return n;
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
      if (split() && window_of_[b] >= 0) {
        --n_window_cached_;
        free_window(static_cast<std::int32_t>(b));
      }
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
