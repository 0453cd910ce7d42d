// ByteWriter / ByteReader: little-endian fields of the cache's own record formats (response records,
// semantic entries). The writer appends to a Bytes; the reader is bounds-checked: a read past the
// end leaves the destination untouched and makes ok() false for good, so a decoder reads every
// field and checks ok() once where a value matters.
//
// Thread safety: none needed (one object per encode or decode).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

#include "cache/chunk_codec.h"  // Bytes

namespace kvstash::cache {

class ByteWriter {
 public:
  explicit ByteWriter(Bytes& out) : out_(out) {}
  void u8(std::uint8_t v) { out_.push_back(v); }
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void f32(float v) { le(std::bit_cast<std::uint32_t>(v), 4); }
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }

 private:
  Bytes& out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == in_.size(); }
  std::size_t left() const { return in_.size() - pos_; }
  std::uint64_t le(int n) {
    if (!need(static_cast<std::size_t>(n))) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{in_[pos_ + static_cast<std::size_t>(i)]} << (8 * i);
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  float f32() { return std::bit_cast<float>(static_cast<std::uint32_t>(le(4))); }
  void raw(void* p, std::size_t n) {
    if (!need(n)) return;
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }

 private:
  bool need(std::size_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace kvstash::cache
