// The node's ed25519 identity (libsodium): one key pair per node, kept in a key file created at first
// start, and the list of producers whose signed records this node accepts.
//
// Records that travel between nodes (response records, KV chunk manifests) are signed by the node that
// computed them. A checksum catches accidents; only a signature by a trusted key catches malice. What is
// signed is always a domain tag plus the record's canonical bytes (see sign_message()), so a signature
// made for one kind of record can never be replayed as another kind.
//
// Thread safety: NodeIdentity and TrustList are immutable after construction; any thread may call
// their const methods concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "kvstash/status.h"

namespace kvstash::identity {

using PublicKey = std::array<std::uint8_t, 32>;  // crypto_sign_PUBLICKEYBYTES
using Signature = std::array<std::uint8_t, 64>;  // crypto_sign_BYTES

// The bytes a signature covers: a domain tag ("kvstash-response-v1", "kvstash-manifest-v1", …), its
// length, then the message. Exposed so that tests and docs can state exactly what is signed.
std::string sign_message(std::string_view domain, std::string_view message);

// True when `signature` is `key`'s signature over sign_message(domain, message).
bool verify(const PublicKey& key, std::string_view domain, std::string_view message, const Signature& signature);

// Lowercase hex of a public key (64 characters), and back. parse_public_key accepts surrounding
// whitespace and fails with kInvalidArgument on anything else than 64 hex digits.
std::string to_hex(const PublicKey& key);
Expected<PublicKey> parse_public_key(std::string_view hex);

class NodeIdentity {
 public:
  // Loads the key file at `path`, or creates it (mode 0600, parent directories too) when it does not
  // exist; processes that start at once on one path end up with the same key. The file holds the 32-byte seed as 64 hex digits and a newline. Errors: kIoError (cannot
  // read or write), kCorrupt (the file exists but is not a key file; it is never overwritten).
  static Expected<NodeIdentity> load_or_create(const std::string& path);
  // A fresh identity that lives only in memory (tests, `--identity ''`).
  static NodeIdentity generate();
  // The identity a seed determines (tests that need the same key twice).
  static NodeIdentity from_seed(const std::array<std::uint8_t, 32>& seed);

  const PublicKey& public_key() const { return public_key_; }
  std::string public_key_hex() const { return to_hex(public_key_); }
  Signature sign(std::string_view domain, std::string_view message) const;

 private:
  NodeIdentity() = default;
  PublicKey public_key_{};
  std::array<std::uint8_t, 64> secret_key_{};  // crypto_sign_SECRETKEYBYTES (seed ‖ public key)
};

// The producers whose records are accepted: this node's own key plus the keys of a trust file.
class TrustList {
 public:
  TrustList() = default;
  explicit TrustList(const PublicKey& self) { keys_.insert(self); }
  // Reads a trust file: one hex public key per line; blank lines and text after '#' are ignored.
  // Errors name the file and the line (kIoError, kInvalidArgument).
  Status add_file(const std::string& path);
  void add(const PublicKey& key) { keys_.insert(key); }
  bool trusts(const PublicKey& key) const { return keys_.count(key) != 0; }
  std::size_t size() const { return keys_.size(); }
  const std::set<PublicKey>& keys() const { return keys_; }

 private:
  std::set<PublicKey> keys_;
};

}  // namespace kvstash::identity
