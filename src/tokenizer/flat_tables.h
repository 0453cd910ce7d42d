// Open-addressing hash tables for a vocabulary: built once per model load (hundreds of thousands
// of entries) and read on every encode. std::unordered_map spent most of a 128k-token
// vocabulary's load in chasing and freeing its per-entry nodes (perf: 0.3-0.4 s of CPU per
// Llama 3 / Qwen2 tokenizer); these keep one flat array each, probed linearly.
//
//   TokenIndex  token text -> id, over the caller's vector of token texts (not copied: the caller
//               passes the same vector to find()); the first id of a duplicated text wins.
//   PairTable   (left id, right id) -> (rank, result id); the first insertion of a pair wins.
//
// Thread safety: immutable after build/insert; find() may run on many threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::tokenizer {

class TokenIndex {
 public:
  void build(const std::vector<std::string>& texts) {
    std::size_t capacity = 16;
    while (capacity < texts.size() * 2) capacity *= 2;  // load factor <= 1/2
    mask_ = capacity - 1;
    slots_.assign(capacity, 0);
    for (std::size_t id = 0; id < texts.size(); ++id) {
      const std::uint64_t h = std::hash<std::string_view>{}(texts[id]);
      for (std::size_t at = h & mask_;; at = (at + 1) & mask_) {
        if (slots_[at] == 0) {
          slots_[at] = (h & kHashMask) | (id + 1);
          break;
        }
        if (same(slots_[at], h, texts, texts[id])) break;  // a duplicate: the first id stays
      }
    }
  }
  std::optional<std::int32_t> find(std::string_view text, const std::vector<std::string>& texts) const {
    if (slots_.empty()) return std::nullopt;
    const std::uint64_t h = std::hash<std::string_view>{}(text);
    for (std::size_t at = h & mask_;; at = (at + 1) & mask_) {
      const std::uint64_t slot = slots_[at];
      if (slot == 0) return std::nullopt;
      if (same(slot, h, texts, text)) return static_cast<std::int32_t>((slot & kIdMask) - 1);
    }
  }

 private:
  // A slot: the hash's top 32 bits (a cheap first check) and id + 1 (0 = empty).
  static constexpr std::uint64_t kIdMask = 0xffffffffULL;
  static constexpr std::uint64_t kHashMask = ~kIdMask;
  static bool same(std::uint64_t slot, std::uint64_t h, const std::vector<std::string>& texts, std::string_view text) {
    return (slot & kHashMask) == (h & kHashMask) && texts[(slot & kIdMask) - 1] == text;
  }
  std::vector<std::uint64_t> slots_;
  std::size_t mask_ = 0;
};

template <typename Value>
class PairTable {
 public:
  void reserve(std::size_t n) {
    std::size_t capacity = 16;
    while (capacity < n * 2) capacity *= 2;
    mask_ = capacity - 1;
    slots_.assign(capacity, Slot{kEmpty, Value{}});
    size_ = 0;
  }
  // Inserts unless the key is there (the first value stays); false when it was. reserve() first,
  // with at least the number of insertions.
  bool insert(std::uint64_t key, const Value& value) {
    for (std::size_t at = spread(key) & mask_;; at = (at + 1) & mask_) {
      if (slots_[at].key == key) return false;
      if (slots_[at].key == kEmpty) {
        slots_[at] = {key, value};
        ++size_;
        return true;
      }
    }
  }
  const Value* find(std::uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (std::size_t at = spread(key) & mask_;; at = (at + 1) & mask_) {
      if (slots_[at].key == key) return &slots_[at].value;
      if (slots_[at].key == kEmpty) return nullptr;
    }
  }
  std::size_t size() const { return size_; }

 private:
  // (-1, -1): no token pair has it.
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct Slot {
    std::uint64_t key;
    Value value;
  };
  static std::uint64_t spread(std::uint64_t key) { return (key * 0x9E3779B97F4A7C15ULL) >> 20; }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace kvstash::tokenizer
