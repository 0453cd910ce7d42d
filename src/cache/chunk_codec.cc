#include "cache/chunk_codec.h"

#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace kvstash::cache {
namespace {

// Byte offsets of the header (versions 1 and 2 agree up to kOffKvFormat + L); docs/chunk-format.md
// has the same table.
constexpr char kMagic[8] = {'K', 'V', 'S', 'C', 'H', 'U', 'N', 'K'};
constexpr std::size_t kOffVersion = 8;
constexpr std::size_t kOffFlags = 10;
constexpr std::size_t kOffHeaderSize = 12;
constexpr std::size_t kOffKey = 16;
constexpr std::size_t kOffModel = 48;
constexpr std::size_t kOffTokenCount = 80;
constexpr std::size_t kOffFirstPosition = 84;
constexpr std::size_t kOffLayers = 88;
constexpr std::size_t kOffKvHeads = 92;
constexpr std::size_t kOffHeadDim = 96;
constexpr std::size_t kOffElementType = 100;
constexpr std::size_t kOffStoredSize = 104;
constexpr std::size_t kOffPayloadSize = 112;
constexpr std::size_t kOffPayloadChecksum = 120;
constexpr std::size_t kOffKvFormatLength = 128;
constexpr std::size_t kOffKvFormat = 132;
constexpr std::size_t kHeaderChecksumSize = 8;
constexpr std::size_t kMinHeaderSize = kOffKvFormat + kHeaderChecksumSize;  // version 1, L = 0
// Version 2, after kv_format (at 132 + L): u32 P, the header checksum over [0, 136 + L), P bytes of
// provenance, and the provenance block's own XXH3 (so damage to it is named as such).
constexpr std::size_t kV2Extra = 4 + 8;  // P, provenance checksum (the header checksum is v1's)
constexpr std::size_t kProvenanceFixed = 4;  // trust, n_producers, u16 manifest length
constexpr std::size_t kMaxProvenanceSize = kProvenanceFixed + 32 * kMaxProvenanceProducers + kMaxProvenanceManifest;
constexpr std::uint16_t kFlagZstd = 1;
constexpr std::uint16_t kFlagSalted = 2;
// A decompressed payload larger than this is refused rather than allocated: a chunk of 256 tokens
// of a 70B model in f16 is ~80 MiB, so 4 GiB is far beyond any real chunk.
constexpr std::uint64_t kMaxPayloadSize = std::uint64_t{4} << 30;

void put_le(std::uint8_t* p, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint64_t get_le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Status fail(ChunkError error, ChunkError* why, std::string detail = {}) {
  if (why) *why = error;
  std::string message = std::string("chunk: ") + chunk_error_name(error);
  if (!detail.empty()) message += ": " + detail;
  return Status(error == ChunkError::kBadVersion ? StatusCode::kUnsupported : StatusCode::kCorrupt,
                std::move(message));
}

}  // namespace

const char* chunk_error_name(ChunkError error) {
  switch (error) {
    case ChunkError::kNone: return "ok";
    case ChunkError::kTruncated: return "truncated";
    case ChunkError::kTrailingBytes: return "trailing bytes";
    case ChunkError::kBadMagic: return "bad magic";
    case ChunkError::kBadVersion: return "unknown format version";
    case ChunkError::kHeaderChecksum: return "header checksum mismatch";
    case ChunkError::kKeyMismatch: return "key mismatch";
    case ChunkError::kModelMismatch: return "model fingerprint mismatch";
    case ChunkError::kKvFormatMismatch: return "kv_format mismatch";
    case ChunkError::kShapeMismatch: return "shape mismatch";
    case ChunkError::kPayloadChecksum: return "payload checksum mismatch";
    case ChunkError::kDecompress: return "decompression failed";
    case ChunkError::kProvenance: return "damaged provenance";
  }
  return "unknown";
}

std::size_t chunk_header_min_size() { return kMinHeaderSize; }

namespace {

Expected<std::string> encode_provenance(const Provenance& p) {
  if (p.trust == ChunkTrust::kUnknown || static_cast<int>(p.trust) > static_cast<int>(ChunkTrust::kUnchecked)) {
    return invalid_argument("chunk: provenance trust state " + std::to_string(static_cast<int>(p.trust)));
  }
  if (p.producers.size() > kMaxProvenanceProducers) return invalid_argument("chunk: too many provenance producers");
  if (p.manifest.size() > kMaxProvenanceManifest) return invalid_argument("chunk: provenance manifest too long");
  std::string out(kProvenanceFixed, '\0');
  out[0] = static_cast<char>(p.trust);
  out[1] = static_cast<char>(p.producers.size());
  out[2] = static_cast<char>(p.manifest.size() & 0xff);
  out[3] = static_cast<char>(p.manifest.size() >> 8);
  for (const auto& k : p.producers) out.append(reinterpret_cast<const char*>(k.data()), k.size());
  out += p.manifest;
  return out;
}

bool decode_provenance(const std::uint8_t* b, std::size_t n, Provenance& p) {
  if (n < kProvenanceFixed) return false;
  const int trust = b[0];
  if (trust < 1 || trust > static_cast<int>(ChunkTrust::kUnchecked)) return false;
  const std::size_t producers = b[1], manifest = get_le(b + 2, 2);
  if (producers > kMaxProvenanceProducers || manifest > kMaxProvenanceManifest) return false;
  if (n != kProvenanceFixed + 32 * producers + manifest) return false;
  p.trust = static_cast<ChunkTrust>(trust);
  p.producers.resize(producers);
  for (std::size_t i = 0; i < producers; ++i) std::memcpy(p.producers[i].data(), b + kProvenanceFixed + 32 * i, 32);
  p.manifest.assign(reinterpret_cast<const char*>(b + kProvenanceFixed + 32 * producers), manifest);
  return true;
}

// A version-2 header for a stored payload of these sizes and checksum.
Expected<Bytes> encode_header(const ChunkMeta& meta, std::uint16_t flags, std::uint64_t stored, std::uint64_t payload_size,
                              std::uint64_t payload_checksum) {
  if (meta.kv_format.size() > kMaxKvFormatLength) return invalid_argument("chunk: kv_format too long");
  auto provenance = encode_provenance(meta.provenance);
  if (!provenance) return provenance.status();
  const std::size_t fixed = kOffKvFormat + meta.kv_format.size();  // 132 + L
  const std::size_t header_size = fixed + kV2Extra + kHeaderChecksumSize + provenance->size();
  Bytes out(header_size);
  std::uint8_t* h = out.data();
  std::memcpy(h, kMagic, sizeof kMagic);
  put_le(h + kOffVersion, kChunkFormatVersion, 2);
  put_le(h + kOffFlags, flags, 2);
  put_le(h + kOffHeaderSize, header_size, 4);
  std::memcpy(h + kOffKey, meta.key.bytes.data(), 32);
  std::memcpy(h + kOffModel, meta.model_fingerprint.data(), 32);
  put_le(h + kOffTokenCount, meta.token_count, 4);
  put_le(h + kOffFirstPosition, meta.first_position, 4);
  put_le(h + kOffLayers, meta.n_layers, 4);
  put_le(h + kOffKvHeads, meta.n_kv_heads, 4);
  put_le(h + kOffHeadDim, meta.head_dim, 4);
  put_le(h + kOffElementType, meta.element_type, 4);
  put_le(h + kOffStoredSize, stored, 8);
  put_le(h + kOffPayloadSize, payload_size, 8);
  put_le(h + kOffPayloadChecksum, payload_checksum, 8);
  put_le(h + kOffKvFormatLength, meta.kv_format.size(), 4);
  std::memcpy(h + kOffKvFormat, meta.kv_format.data(), meta.kv_format.size());
  put_le(h + fixed, provenance->size(), 4);
  put_le(h + fixed + 4, XXH3_64bits(h, fixed + 4), 8);
  std::memcpy(h + fixed + 12, provenance->data(), provenance->size());
  put_le(h + fixed + 12 + provenance->size(), XXH3_64bits(provenance->data(), provenance->size()), 8);
  return out;
}

}  // namespace

std::size_t chunk_header_max_size() {
  return kMinHeaderSize + kMaxKvFormatLength + kV2Extra + kMaxProvenanceSize;
}

const char* chunk_trust_name(ChunkTrust trust) {
  switch (trust) {
    case ChunkTrust::kUnknown: return "unknown";
    case ChunkTrust::kComputed: return "computed";
    case ChunkTrust::kVerified: return "verified";
    case ChunkTrust::kSpotChecked: return "spot-checked";
    case ChunkTrust::kUnchecked: return "unchecked";
  }
  return "invalid";
}

bool Provenance::names(const ProducerKey& producer) const {
  if (!producers.empty() && producers.back() == kMoreProducers) return true;
  return std::find(producers.begin(), producers.end(), producer) != producers.end();
}

Expected<Bytes> encode_chunk(const ChunkMeta& meta, std::span<const std::uint8_t> payload,
                             const EncodeOptions& options) {
  if (payload.size() > kMaxPayloadSize) return invalid_argument("chunk: payload too large");
  std::uint16_t flags = meta.salted ? kFlagSalted : 0;
  Bytes stored;
  std::span<const std::uint8_t> body = payload;
  if (options.compress) {
    stored.resize(ZSTD_compressBound(payload.size()));
    std::size_t n = ZSTD_compress(stored.data(), stored.size(), payload.data(), payload.size(), options.compression_level);
    if (ZSTD_isError(n)) return internal_error(std::string("chunk: zstd: ") + ZSTD_getErrorName(n));
    stored.resize(n);
    body = stored;
    flags |= kFlagZstd;
  }
  auto out = encode_header(meta, flags, body.size(), payload.size(), XXH3_64bits(body.data(), body.size()));
  if (!out) return out;
  out->insert(out->end(), body.begin(), body.end());
  return out;
}

Expected<Bytes> with_provenance(std::span<const std::uint8_t> chunk, const Provenance& provenance) {
  auto header = verify_chunk(chunk);
  if (!header) return header.status();
  ChunkMeta meta = header->meta;
  meta.provenance = provenance;
  auto out = encode_header(meta, header->flags, header->stored_payload_size, header->payload_size, header->payload_checksum);
  if (!out) return out;
  auto body = chunk.subspan(header->header_size);
  out->insert(out->end(), body.begin(), body.end());
  return out;
}

Expected<ChunkHeader> parse_chunk_header(std::span<const std::uint8_t> bytes, ChunkError* why) {
  const std::uint8_t* h = bytes.data();
  if (bytes.size() < sizeof kMagic) return fail(ChunkError::kTruncated, why, "no magic");
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) return fail(ChunkError::kBadMagic, why);
  if (bytes.size() < kMinHeaderSize) return fail(ChunkError::kTruncated, why, "short header");
  ChunkHeader header;
  header.version = static_cast<std::uint16_t>(get_le(h + kOffVersion, 2));
  if (header.version != 1 && header.version != 2) {
    return fail(ChunkError::kBadVersion, why, std::to_string(header.version));
  }
  const std::uint64_t kv_len = get_le(h + kOffKvFormatLength, 4);
  if (kv_len > kMaxKvFormatLength) return fail(ChunkError::kHeaderChecksum, why, "kv_format length");
  const std::size_t fixed = kOffKvFormat + kv_len;  // where v1's checksum, v2's P, begins
  std::size_t header_size = fixed + kHeaderChecksumSize;
  Provenance provenance;
  provenance.trust = ChunkTrust::kUnknown;
  if (header.version == 1) {
    if (bytes.size() < header_size) return fail(ChunkError::kTruncated, why, "short header");
    if (XXH3_64bits(h, fixed) != get_le(h + fixed, 8)) return fail(ChunkError::kHeaderChecksum, why);
  } else {
    if (bytes.size() < fixed + 12) return fail(ChunkError::kTruncated, why, "short header");
    if (XXH3_64bits(h, fixed + 4) != get_le(h + fixed + 4, 8)) return fail(ChunkError::kHeaderChecksum, why);
    const std::uint64_t p_len = get_le(h + fixed, 4);
    if (p_len > kMaxProvenanceSize) return fail(ChunkError::kProvenance, why, "provenance length");
    header_size = fixed + kV2Extra + kHeaderChecksumSize + p_len;
    if (bytes.size() < header_size) return fail(ChunkError::kTruncated, why, "short provenance");
    const std::uint8_t* p = h + fixed + 12;
    if (XXH3_64bits(p, p_len) != get_le(p + p_len, 8)) return fail(ChunkError::kProvenance, why, "checksum");
    if (!decode_provenance(p, p_len, provenance)) return fail(ChunkError::kProvenance, why, "malformed");
  }
  // Past the checksum the fields are what the writer wrote; what remains are writer bugs.
  header.flags = static_cast<std::uint16_t>(get_le(h + kOffFlags, 2));
  header.header_size = static_cast<std::uint32_t>(get_le(h + kOffHeaderSize, 4));
  if (header.header_size != header_size) return fail(ChunkError::kHeaderChecksum, why, "header size");
  ChunkMeta& m = header.meta;
  std::memcpy(m.key.bytes.data(), h + kOffKey, 32);
  std::memcpy(m.model_fingerprint.data(), h + kOffModel, 32);
  m.token_count = static_cast<std::uint32_t>(get_le(h + kOffTokenCount, 4));
  m.first_position = static_cast<std::uint32_t>(get_le(h + kOffFirstPosition, 4));
  m.n_layers = static_cast<std::uint32_t>(get_le(h + kOffLayers, 4));
  m.n_kv_heads = static_cast<std::uint32_t>(get_le(h + kOffKvHeads, 4));
  m.head_dim = static_cast<std::uint32_t>(get_le(h + kOffHeadDim, 4));
  m.element_type = static_cast<std::uint32_t>(get_le(h + kOffElementType, 4));
  m.kv_format.assign(reinterpret_cast<const char*>(h + kOffKvFormat), kv_len);
  m.salted = (header.flags & kFlagSalted) != 0;
  m.provenance = std::move(provenance);
  header.stored_payload_size = get_le(h + kOffStoredSize, 8);
  header.payload_size = get_le(h + kOffPayloadSize, 8);
  header.payload_checksum = get_le(h + kOffPayloadChecksum, 8);
  if (header.payload_size > kMaxPayloadSize || header.stored_payload_size > kMaxPayloadSize) {
    return fail(ChunkError::kHeaderChecksum, why, "payload size out of range");
  }
  if (!header.compressed() && header.payload_size != header.stored_payload_size) {
    return fail(ChunkError::kHeaderChecksum, why, "payload sizes disagree");
  }
  return header;
}

Expected<ChunkHeader> verify_chunk(std::span<const std::uint8_t> bytes, ChunkError* why) {
  auto header = parse_chunk_header(bytes, why);
  if (!header) return header;
  if (bytes.size() < header->total_size()) return fail(ChunkError::kTruncated, why, "short payload");
  if (bytes.size() > header->total_size()) return fail(ChunkError::kTrailingBytes, why);
  if (XXH3_64bits(bytes.data() + header->header_size, header->stored_payload_size) !=
      header->payload_checksum) {
    return fail(ChunkError::kPayloadChecksum, why);
  }
  return header;
}

Expected<ChunkView> decode_chunk(std::span<const std::uint8_t> bytes, const ChunkMeta& expected,
                                 ChunkError* why) {
  // Header expectations first: they are cheap, and a chunk of the wrong model should say so
  // rather than report whatever else is wrong with it.
  auto parsed = parse_chunk_header(bytes, why);
  if (!parsed) return parsed.status();
  const ChunkMeta& m = parsed->meta;
  if (m.key != expected.key) return fail(ChunkError::kKeyMismatch, why, m.key.hex());
  if (m.model_fingerprint != expected.model_fingerprint) return fail(ChunkError::kModelMismatch, why);
  if (m.kv_format != expected.kv_format) return fail(ChunkError::kKvFormatMismatch, why, m.kv_format);
  if (m.token_count != expected.token_count || m.first_position != expected.first_position ||
      m.n_layers != expected.n_layers || m.n_kv_heads != expected.n_kv_heads ||
      m.head_dim != expected.head_dim || m.element_type != expected.element_type) {
    return fail(ChunkError::kShapeMismatch, why);
  }
  auto verified = verify_chunk(bytes, why);
  if (!verified) return verified.status();
  ChunkView view;
  view.header = std::move(*verified);
  auto stored = bytes.subspan(view.header.header_size, view.header.stored_payload_size);
  if (!view.header.compressed()) {
    view.payload = stored;
  } else {
    // The frame states its decompressed size (encode_chunk always writes it): a header that claims
    // more than the frame holds is refused before anything is allocated for it.
    if (ZSTD_getFrameContentSize(stored.data(), stored.size()) != view.header.payload_size) {
      return fail(ChunkError::kDecompress, why, "frame size differs from the header's");
    }
    view.owned.resize(view.header.payload_size);
    std::size_t n = ZSTD_decompress(view.owned.data(), view.owned.size(), stored.data(), stored.size());
    if (ZSTD_isError(n) || n != view.header.payload_size) return fail(ChunkError::kDecompress, why);
    view.payload = view.owned;
  }
  if (why) *why = ChunkError::kNone;
  return view;
}

}  // namespace kvstash::cache
