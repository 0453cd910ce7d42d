#include "share/directory_entry.h"

#include <algorithm>
#include <cstring>

namespace kvstash::share {
namespace {

// Byte offsets of the version-1 entry; docs/p2p-sharing.md has the same table.
constexpr char kMagic[8] = {'K', 'V', 'S', 'N', 'O', 'D', 'E', 'S'};
constexpr std::size_t kOffVersion = 8;
constexpr std::size_t kOffUrlLength = 10;
constexpr std::size_t kOffNode = 12;
constexpr std::size_t kOffIssuedAt = 44;
constexpr std::size_t kOffExpiresAt = 52;
constexpr std::size_t kOffUrl = 60;
constexpr std::size_t kSignatureSize = 64;

void put_le(std::string& out, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out[at + static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * i));
}
std::uint64_t get_le(std::string_view in, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(in[at + static_cast<std::size_t>(i)]);
  return v;
}

Status reject(DirectoryEntryError error, DirectoryEntryError* why, const std::string& detail) {
  if (why) *why = error;
  return corrupt(std::string("directory entry: ") + directory_entry_error_name(error) + ": " + detail);
}

}  // namespace

const char* directory_entry_error_name(DirectoryEntryError error) {
  switch (error) {
    case DirectoryEntryError::kNone: return "ok";
    case DirectoryEntryError::kUnsigned: return "unsigned";
    case DirectoryEntryError::kSignature: return "signature";
    case DirectoryEntryError::kExpired: return "expired";
    case DirectoryEntryError::kUntrusted: return "untrusted";
  }
  return "unknown";
}

std::uint64_t unix_now_s() {
  const auto since = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(since).count());
}

std::string directory_entry_signed_bytes(const DirectoryEntry& e) {
  std::string out(kOffUrl + e.url.size(), '\0');
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_le(out, kOffVersion, kDirectoryEntryVersion, 2);
  put_le(out, kOffUrlLength, e.url.size(), 2);
  std::memcpy(out.data() + kOffNode, e.node.data(), e.node.size());
  put_le(out, kOffIssuedAt, e.issued_at, 8);
  put_le(out, kOffExpiresAt, e.expires_at, 8);
  std::memcpy(out.data() + kOffUrl, e.url.data(), e.url.size());
  return out;
}

std::string encode_directory_entry(const DirectoryEntry& e) {
  std::string out = directory_entry_signed_bytes(e);
  out.append(reinterpret_cast<const char*>(e.signature.data()), e.signature.size());
  return out;
}

Expected<DirectoryEntry> make_directory_entry(const identity::NodeIdentity& node, const std::string& url,
                                              std::uint64_t now_unix_s, std::chrono::seconds lifetime) {
  if (url.empty() || url.size() > kMaxDirectoryUrlLength) {
    return invalid_argument("directory entry: the URL must be 1 to " + std::to_string(kMaxDirectoryUrlLength) + " bytes");
  }
  DirectoryEntry e;
  e.url = url;
  e.node = node.public_key();
  e.issued_at = now_unix_s;
  const auto seconds = std::min(lifetime, kMaxDirectoryEntryLifetime).count();
  e.expires_at = now_unix_s + static_cast<std::uint64_t>(std::max<std::int64_t>(1, seconds));
  e.signature = node.sign(kDirectoryDomain, directory_entry_signed_bytes(e));
  return e;
}

Expected<DirectoryEntry> decode_directory_entry(std::string_view bytes) {
  if (bytes.size() < kOffUrl + kSignatureSize || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return corrupt("directory entry: no version-1 entry (too short or bad magic)");
  }
  if (get_le(bytes, kOffVersion, 2) != kDirectoryEntryVersion) return corrupt("directory entry: unknown version");
  const std::size_t url_length = get_le(bytes, kOffUrlLength, 2);
  if (url_length == 0 || url_length > kMaxDirectoryUrlLength || bytes.size() != kOffUrl + url_length + kSignatureSize) {
    return corrupt("directory entry: bad URL length");
  }
  DirectoryEntry e;
  std::memcpy(e.node.data(), bytes.data() + kOffNode, e.node.size());
  e.issued_at = get_le(bytes, kOffIssuedAt, 8);
  e.expires_at = get_le(bytes, kOffExpiresAt, 8);
  e.url.assign(bytes.substr(kOffUrl, url_length));
  std::memcpy(e.signature.data(), bytes.data() + kOffUrl + url_length, kSignatureSize);
  return e;
}

Expected<DirectoryEntry> check_directory_entry(std::string_view bytes, std::uint64_t now_unix_s, DirectoryEntryError* why) {
  if (why) *why = DirectoryEntryError::kNone;
  auto e = decode_directory_entry(bytes);
  if (!e) return reject(DirectoryEntryError::kUnsigned, why, e.status().message());
  if (!identity::verify(e->node, kDirectoryDomain, bytes.substr(0, bytes.size() - kSignatureSize), e->signature)) {
    return reject(DirectoryEntryError::kSignature, why, "does not verify under " + identity::to_hex(e->node));
  }
  const auto max_lifetime = static_cast<std::uint64_t>(kMaxDirectoryEntryLifetime.count());
  const auto skew = static_cast<std::uint64_t>(kDirectoryClockSkew.count());
  if (e->expires_at <= e->issued_at || e->expires_at - e->issued_at > max_lifetime) {
    return reject(DirectoryEntryError::kExpired, why, "validity period out of bounds");
  }
  if (now_unix_s >= e->expires_at) return reject(DirectoryEntryError::kExpired, why, "expired");
  if (e->issued_at > now_unix_s + skew) return reject(DirectoryEntryError::kExpired, why, "issued in the future");
  return e;
}

}  // namespace kvstash::share
