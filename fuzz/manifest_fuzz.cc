// Fuzzes the manifest reader and the peer chunk check (share::decode_manifest, check_chunk): both
// take bytes straight from a peer. Input: a mode byte, a 2-byte little-endian manifest length, the
// manifest, then the chunk. The fuzzer cannot forge ed25519 signatures, so besides checking the
// manifest as it came, the target signs the decoded manifest again with a fixed key it trusts and
// checks that too: that reaches the comparisons behind the signature (trust, ban, header against
// manifest, payload size, SHA-256). Mode bit 0: the chunk's XXH3 checksums are recomputed first
// (fuzz/chunk_fixup.h); bit 1: the re-signing producer is banned. A manifest that decodes must
// encode to bytes that decode to the same manifest; a chunk that passes must decode to exactly the
// manifest's payload size.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chunk_fixup.h"
#include "share/manifest.h"

namespace {

using kvstash::share::Manifest;

bool same(const Manifest& a, const Manifest& b) {
  return a.meta == b.meta && a.payload_size == b.payload_size && a.payload_sha256 == b.payload_sha256 &&
         a.producer == b.producer && a.signature == b.signature;
}

const kvstash::identity::NodeIdentity& signer() {
  static const kvstash::identity::NodeIdentity id = kvstash::identity::NodeIdentity::from_seed({7, 7, 7});
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t mode = data[0];
  const std::size_t manifest_len = std::min<std::size_t>(data[1] | (data[2] << 8), size - 3);
  const std::string_view manifest_bytes(reinterpret_cast<const char*>(data + 3), manifest_len);
  kvstash::cache::Bytes chunk(data + 3 + manifest_len, data + size);
  if (mode & 1) kvstash::fuzz::fix_chunk_checksums(chunk);

  const bool ban_signer = mode & 2;
  kvstash::share::TrustPolicy policy;
  policy.trusted = [](const kvstash::identity::PublicKey&) { return true; };
  policy.banned = [ban_signer](const kvstash::identity::PublicKey& key) {
    return ban_signer && key == signer().public_key();
  };

  auto manifest = kvstash::share::decode_manifest(manifest_bytes);
  kvstash::cache::ChunkKey requested;
  if (manifest) {
    requested = manifest->meta.key;
    auto again = kvstash::share::decode_manifest(kvstash::share::encode_manifest(*manifest));
    if (!again || !same(*again, *manifest)) std::abort();
  }
  kvstash::share::ManifestError why = kvstash::share::ManifestError::kNone;
  (void)kvstash::share::check_chunk(manifest_bytes, chunk, requested, policy, nullptr, &why);
  (void)kvstash::share::manifest_error_name(why);
  if (!manifest) return 0;

  Manifest resigned = *manifest;
  resigned.producer = signer().public_key();
  resigned.signature = signer().sign(kvstash::share::kManifestDomain, kvstash::share::manifest_signed_bytes(resigned));
  Manifest accepted;
  const auto status =
      kvstash::share::check_chunk(kvstash::share::encode_manifest(resigned), chunk, requested, policy, &accepted, &why);
  if (status.is_ok()) {
    if (ban_signer || !same(accepted, resigned)) std::abort();
    auto view = kvstash::cache::decode_chunk(chunk, accepted.meta);
    if (!view || view->payload.size() != accepted.payload_size) std::abort();
  } else if (why == kvstash::share::ManifestError::kNone || why == kvstash::share::ManifestError::kSignature) {
    std::abort();  // a rejection names its reason, and our own signature verifies
  }
  return 0;
}
