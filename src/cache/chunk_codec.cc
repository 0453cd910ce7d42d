#include "cache/chunk_codec.h"

#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <limits>

namespace kvstash::cache {
namespace {

// Byte offsets of the version-1 header; docs/chunk-format.md has the same table.
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
constexpr std::size_t kMinHeaderSize = kOffKvFormat + kHeaderChecksumSize;
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
  }
  return "unknown";
}

std::size_t chunk_header_min_size() { return kMinHeaderSize; }

Expected<Bytes> encode_chunk(const ChunkMeta& meta, std::span<const std::uint8_t> payload,
                             const EncodeOptions& options) {
  if (meta.kv_format.size() > kMaxKvFormatLength) return invalid_argument("chunk: kv_format too long");
  if (payload.size() > kMaxPayloadSize) return invalid_argument("chunk: payload too large");
  const std::size_t header_size = kMinHeaderSize + meta.kv_format.size();
  Bytes out(header_size);
  std::uint16_t flags = meta.salted ? kFlagSalted : 0;
  if (options.compress) {
    out.resize(header_size + ZSTD_compressBound(payload.size()));
    std::size_t n = ZSTD_compress(out.data() + header_size, out.size() - header_size, payload.data(),
                                  payload.size(), options.compression_level);
    if (ZSTD_isError(n)) return internal_error(std::string("chunk: zstd: ") + ZSTD_getErrorName(n));
    out.resize(header_size + n);
    flags |= kFlagZstd;
  } else {
    out.insert(out.end(), payload.begin(), payload.end());
  }
  const std::uint64_t stored = out.size() - header_size;
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
  put_le(h + kOffPayloadSize, payload.size(), 8);
  put_le(h + kOffPayloadChecksum, XXH3_64bits(h + header_size, stored), 8);
  put_le(h + kOffKvFormatLength, meta.kv_format.size(), 4);
  std::memcpy(h + kOffKvFormat, meta.kv_format.data(), meta.kv_format.size());
  const std::size_t checked = header_size - kHeaderChecksumSize;
  put_le(h + checked, XXH3_64bits(h, checked), 8);
  return out;
}

Expected<ChunkHeader> parse_chunk_header(std::span<const std::uint8_t> bytes, ChunkError* why) {
  const std::uint8_t* h = bytes.data();
  if (bytes.size() < sizeof kMagic) return fail(ChunkError::kTruncated, why, "no magic");
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) return fail(ChunkError::kBadMagic, why);
  if (bytes.size() < kMinHeaderSize) return fail(ChunkError::kTruncated, why, "short header");
  ChunkHeader header;
  header.version = static_cast<std::uint16_t>(get_le(h + kOffVersion, 2));
  if (header.version != kChunkFormatVersion) {
    return fail(ChunkError::kBadVersion, why, std::to_string(header.version));
  }
  const std::uint64_t kv_len = get_le(h + kOffKvFormatLength, 4);
  if (kv_len > kMaxKvFormatLength) return fail(ChunkError::kHeaderChecksum, why, "kv_format length");
  const std::size_t header_size = kMinHeaderSize + kv_len;
  if (bytes.size() < header_size) return fail(ChunkError::kTruncated, why, "short header");
  const std::size_t checked = header_size - kHeaderChecksumSize;
  if (XXH3_64bits(h, checked) != get_le(h + checked, 8)) return fail(ChunkError::kHeaderChecksum, why);
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
