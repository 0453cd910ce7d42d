// DirectoryEntry: one node's line in the DHT node directory (topic "kvstash-nodes-v1"), signed by
// the node's own ed25519 key, so that a producer places erasure-coded fragments only on nodes it
// trusts (fragments.cc) and never on a URL that anyone could have put into the DHT.
//
// An entry names the node's peer URL, its public key, when it was issued and until when it holds
// (Unix seconds). The signature is the node's over identity::sign_message("kvstash-directory-v1",
// every byte before the signature): an entry cannot be altered, nor passed off as another kind of
// signed record, and a copied (replayed) entry is refused once expired. The byte format (version 1)
// is in docs/p2p-sharing.md, "Directory entry format".
//
// check_directory_entry() decides whether an entry may be used; whether its key is trusted is the
// caller's question (the node's TrustList), asked only of entries that pass.
//
// Thread safety: all functions are pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "identity/identity.h"
#include "kvstash/status.h"

namespace kvstash::share {

inline constexpr std::uint16_t kDirectoryEntryVersion = 1;
inline constexpr const char* kDirectoryDomain = "kvstash-directory-v1";
inline constexpr std::size_t kMaxDirectoryUrlLength = 256;  // longer URLs are junk (as in the DHT)
// An entry's validity (expires_at - issued_at) may not exceed this: bounds how long a copied
// entry can be replayed, whatever its signer wrote.
inline constexpr std::chrono::seconds kMaxDirectoryEntryLifetime{24 * 3600};
// A clock ahead of ours by up to this much is tolerated in issued_at (nodes' clocks differ).
inline constexpr std::chrono::seconds kDirectoryClockSkew{300};

struct DirectoryEntry {
  std::string url;                // http://HOST:PORT, where the node takes fragment PUTs
  identity::PublicKey node{};     // the node's ed25519 public key (the signer)
  std::uint64_t issued_at = 0;    // Unix seconds
  std::uint64_t expires_at = 0;   // Unix seconds; refused from this second on
  identity::Signature signature{};
};

// Why an entry read from the DHT is not used; the /metrics label (directory_entry_error_name).
enum class DirectoryEntryError {
  kNone = 0,
  kUnsigned,   // not a version-1 entry (a bare URL, as nodes before signing published, or junk)
  kSignature,  // the signature does not verify under the entry's key
  kExpired,    // expired, issued in the future (beyond the skew), or valid for too long
  kUntrusted,  // verified, but the key is not on this node's trust list (the caller's check)
};
inline constexpr int kDirectoryEntryErrors = 5;
// "ok", "unsigned", "signature", "expired", "untrusted".
const char* directory_entry_error_name(DirectoryEntryError error);

// An entry for `url` signed by `node`, valid from now_unix_s for `lifetime` (capped at
// kMaxDirectoryEntryLifetime). Errors: kInvalidArgument for an empty or too long URL.
Expected<DirectoryEntry> make_directory_entry(const identity::NodeIdentity& node, const std::string& url,
                                              std::uint64_t now_unix_s, std::chrono::seconds lifetime);

// The version-1 bytes, signature last; and back (kCorrupt on anything malformed, never a crash).
std::string encode_directory_entry(const DirectoryEntry& entry);
Expected<DirectoryEntry> decode_directory_entry(std::string_view bytes);
// The bytes the signature covers: encode_directory_entry() without its last 64 bytes.
std::string directory_entry_signed_bytes(const DirectoryEntry& entry);

// The entry in `bytes` if it decodes, its signature verifies and it is valid at now_unix_s;
// otherwise kCorrupt, and *why (if given) says which check failed (kUnsigned, kSignature, kExpired).
Expected<DirectoryEntry> check_directory_entry(std::string_view bytes, std::uint64_t now_unix_s,
                                               DirectoryEntryError* why = nullptr);

// Now, in Unix seconds (the clock entries are issued and checked against).
std::uint64_t unix_now_s();

}  // namespace kvstash::share
