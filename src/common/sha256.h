// SHA-256 (OpenSSL's libcrypto underneath). Incremental hashing for keys and fingerprints.
//
// Thread safety: a Sha256 object is used by one thread at a time; separate objects are independent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvstash {

using Digest = std::array<std::uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, std::size_t n);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  Sha256& update_u32(std::uint32_t v);  // little-endian
  Sha256& update_u64(std::uint64_t v);  // little-endian
  Digest finish();

 private:
  void* ctx_;
};

Digest sha256(const void* data, std::size_t n);
std::string to_hex(const std::uint8_t* data, std::size_t n);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }

}  // namespace kvstash
