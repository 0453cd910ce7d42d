#include "share/manifest.h"

#include <cstring>

namespace kvstash::share {
namespace {

// Byte offsets of the version-1 manifest; docs/p2p-sharing.md has the same table.
constexpr char kMagic[8] = {'K', 'V', 'S', 'M', 'A', 'N', 'I', 'F'};
constexpr std::size_t kOffVersion = 8;
constexpr std::size_t kOffFlags = 10;
constexpr std::size_t kOffKey = 12;
constexpr std::size_t kOffModel = 44;
constexpr std::size_t kOffTokenCount = 76;
constexpr std::size_t kOffFirstPosition = 80;
constexpr std::size_t kOffLayers = 84;
constexpr std::size_t kOffKvHeads = 88;
constexpr std::size_t kOffHeadDim = 92;
constexpr std::size_t kOffElementType = 96;
constexpr std::size_t kOffPayloadSize = 100;
constexpr std::size_t kOffPayloadSha = 108;
constexpr std::size_t kOffProducer = 140;
constexpr std::size_t kOffKvFormatLength = 172;
constexpr std::size_t kOffKvFormat = 176;
constexpr std::size_t kSignatureSize = 64;
constexpr std::uint16_t kFlagSalted = 1;

void put_le(std::string& out, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out[at + i] = static_cast<char>(v >> (8 * i));
}
std::uint64_t get_le(std::string_view in, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(in[at + i]);
  return v;
}

Status reject(ManifestError error, ManifestError* why, const std::string& detail = {}) {
  if (why) *why = error;
  return corrupt(std::string("manifest: ") + manifest_error_name(error) + (detail.empty() ? "" : ": " + detail));
}

}  // namespace

const char* manifest_error_name(ManifestError error) {
  switch (error) {
    case ManifestError::kNone: return "ok";
    case ManifestError::kMalformed: return "malformed";
    case ManifestError::kKeyMismatch: return "key";
    case ManifestError::kSignature: return "signature";
    case ManifestError::kBanned: return "banned";
    case ManifestError::kUntrusted: return "untrusted";
    case ManifestError::kHeaderMismatch: return "header";
    case ManifestError::kHash: return "hash";
  }
  return "unknown";
}

std::string manifest_signed_bytes(const Manifest& m) {
  std::string out(kOffKvFormat + m.meta.kv_format.size(), '\0');
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_le(out, kOffVersion, kManifestVersion, 2);
  put_le(out, kOffFlags, m.meta.salted ? kFlagSalted : 0, 2);
  std::memcpy(out.data() + kOffKey, m.meta.key.bytes.data(), 32);
  std::memcpy(out.data() + kOffModel, m.meta.model_fingerprint.data(), 32);
  put_le(out, kOffTokenCount, m.meta.token_count, 4);
  put_le(out, kOffFirstPosition, m.meta.first_position, 4);
  put_le(out, kOffLayers, m.meta.n_layers, 4);
  put_le(out, kOffKvHeads, m.meta.n_kv_heads, 4);
  put_le(out, kOffHeadDim, m.meta.head_dim, 4);
  put_le(out, kOffElementType, m.meta.element_type, 4);
  put_le(out, kOffPayloadSize, m.payload_size, 8);
  std::memcpy(out.data() + kOffPayloadSha, m.payload_sha256.data(), 32);
  std::memcpy(out.data() + kOffProducer, m.producer.data(), 32);
  put_le(out, kOffKvFormatLength, m.meta.kv_format.size(), 4);
  std::memcpy(out.data() + kOffKvFormat, m.meta.kv_format.data(), m.meta.kv_format.size());
  return out;
}

std::string encode_manifest(const Manifest& m) {
  std::string out = manifest_signed_bytes(m);
  out.append(reinterpret_cast<const char*>(m.signature.data()), m.signature.size());
  return out;
}

Expected<Manifest> decode_manifest(std::string_view in) {
  if (in.size() < kOffKvFormat + kSignatureSize) return corrupt("manifest: truncated");
  if (std::memcmp(in.data(), kMagic, sizeof kMagic) != 0) return corrupt("manifest: bad magic");
  const auto version = get_le(in, kOffVersion, 2);
  if (version != kManifestVersion) return corrupt("manifest: unknown version " + std::to_string(version));
  const std::uint64_t kv_len = get_le(in, kOffKvFormatLength, 4);
  if (kv_len > cache::kMaxKvFormatLength) return corrupt("manifest: kv_format too long");
  if (in.size() != kOffKvFormat + kv_len + kSignatureSize) return corrupt("manifest: wrong length");
  Manifest m;
  m.meta.salted = (get_le(in, kOffFlags, 2) & kFlagSalted) != 0;
  std::memcpy(m.meta.key.bytes.data(), in.data() + kOffKey, 32);
  std::memcpy(m.meta.model_fingerprint.data(), in.data() + kOffModel, 32);
  m.meta.token_count = static_cast<std::uint32_t>(get_le(in, kOffTokenCount, 4));
  m.meta.first_position = static_cast<std::uint32_t>(get_le(in, kOffFirstPosition, 4));
  m.meta.n_layers = static_cast<std::uint32_t>(get_le(in, kOffLayers, 4));
  m.meta.n_kv_heads = static_cast<std::uint32_t>(get_le(in, kOffKvHeads, 4));
  m.meta.head_dim = static_cast<std::uint32_t>(get_le(in, kOffHeadDim, 4));
  m.meta.element_type = static_cast<std::uint32_t>(get_le(in, kOffElementType, 4));
  m.payload_size = get_le(in, kOffPayloadSize, 8);
  std::memcpy(m.payload_sha256.data(), in.data() + kOffPayloadSha, 32);
  std::memcpy(m.producer.data(), in.data() + kOffProducer, 32);
  m.meta.kv_format.assign(in.data() + kOffKvFormat, kv_len);
  std::memcpy(m.signature.data(), in.data() + kOffKvFormat + kv_len, kSignatureSize);
  return m;
}

Expected<Manifest> make_manifest(std::span<const std::uint8_t> chunk, const identity::NodeIdentity& producer) {
  auto header = cache::parse_chunk_header(chunk);
  if (!header) return header.status();
  auto view = cache::decode_chunk(chunk, header->meta);
  if (!view) return view.status();
  Manifest m;
  m.meta = header->meta;
  m.payload_size = view->payload.size();
  m.payload_sha256 = sha256(view->payload.data(), view->payload.size());
  m.producer = producer.public_key();
  m.signature = producer.sign(kManifestDomain, manifest_signed_bytes(m));
  return m;
}

Status check_chunk(std::string_view manifest_bytes, std::span<const std::uint8_t> chunk,
                   const cache::ChunkKey& requested, const TrustPolicy& policy, Manifest* out, ManifestError* why) {
  auto m = decode_manifest(manifest_bytes);
  if (!m) return reject(ManifestError::kMalformed, why, m.status().message());
  if (m->meta.key != requested) return reject(ManifestError::kKeyMismatch, why, m->meta.key.hex());
  if (!identity::verify(m->producer, kManifestDomain, manifest_signed_bytes(*m), m->signature)) {
    return reject(ManifestError::kSignature, why, identity::to_hex(m->producer));
  }
  if (policy.banned && policy.banned(m->producer)) return reject(ManifestError::kBanned, why, identity::to_hex(m->producer));
  if (!policy.trusted || !policy.trusted(m->producer)) {
    return reject(ManifestError::kUntrusted, why, identity::to_hex(m->producer));
  }
  // decode_chunk checks key, model, kv_format and shape against the manifest, then the whole
  // chunk's integrity (lengths, XXH3), then decompresses.
  auto view = cache::decode_chunk(chunk, m->meta);
  if (!view) return reject(ManifestError::kHeaderMismatch, why, view.status().message());
  if (view->header.meta.salted != m->meta.salted || view->payload.size() != m->payload_size) {
    return reject(ManifestError::kHeaderMismatch, why, "salted flag or payload size");
  }
  if (sha256(view->payload.data(), view->payload.size()) != m->payload_sha256) {
    return reject(ManifestError::kHash, why);
  }
  if (why) *why = ManifestError::kNone;
  if (out) *out = std::move(*m);
  return Status::ok();
}

}  // namespace kvstash::share
