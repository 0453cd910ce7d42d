#include "cache/chunk_codec.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <xxhash.h>

namespace kvstash::cache {
namespace {

ChunkMeta test_meta() {
  ChunkMeta m;
  for (int i = 0; i < 32; ++i) m.key.bytes[i] = static_cast<std::uint8_t>(100 + i);
  for (int i = 0; i < 32; ++i) m.model_fingerprint[i] = static_cast<std::uint8_t>(i * 3);
  m.kv_format = "f16-v1";
  m.token_count = 16;
  m.first_position = 256;
  m.n_layers = 2;
  m.n_kv_heads = 2;
  m.head_dim = 4;
  m.element_type = 1;
  return m;
}

Bytes test_payload(std::size_t n) {
  Bytes p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 31 + 7);
  return p;
}

ChunkError decode_error(const Bytes& bytes, const ChunkMeta& expected) {
  ChunkError why = ChunkError::kNone;
  auto view = decode_chunk(bytes, expected, &why);
  EXPECT_FALSE(view.has_value());
  return why;
}

TEST(ChunkCodec, RoundTrip) {
  Bytes payload = test_payload(1000);
  auto bytes = encode_chunk(test_meta(), payload);
  ASSERT_TRUE(bytes.has_value());
  // Version 2: v1's 140 + L, then P (4), the provenance checksum (8) and the provenance itself
  // (4 bytes for an unchecked chunk with no producer and no manifest).
  EXPECT_EQ(bytes->size(), chunk_header_min_size() + 6 + 12 + 4 + payload.size());
  auto view = decode_chunk(*bytes, test_meta());
  ASSERT_TRUE(view.has_value()) << view.status().to_string();
  EXPECT_EQ(view->header.meta, test_meta());
  EXPECT_FALSE(view->header.compressed());
  EXPECT_EQ(Bytes(view->payload.begin(), view->payload.end()), payload);
  // Uncompressed payloads are not copied.
  EXPECT_EQ(view->payload.data(), bytes->data() + view->header.header_size);
}

TEST(ChunkCodec, CompressedRoundTrip) {
  Bytes payload(50000, 0);  // KV of padding compresses; the point is the flag and the sizes
  for (std::size_t i = 0; i < payload.size(); i += 97) payload[i] = static_cast<std::uint8_t>(i);
  auto bytes = encode_chunk(test_meta(), payload, {.compress = true});
  ASSERT_TRUE(bytes.has_value());
  EXPECT_LT(bytes->size(), payload.size() / 2);
  auto view = decode_chunk(*bytes, test_meta());
  ASSERT_TRUE(view.has_value()) << view.status().to_string();
  EXPECT_TRUE(view->header.compressed());
  EXPECT_EQ(Bytes(view->payload.begin(), view->payload.end()), payload);
}

// Found by fuzz/chunk_codec_fuzz.cc: a compressed chunk whose (checksummed) header claims a huge
// payload made decode_chunk allocate and zero that much before zstd refused the frame. The frame's
// own content size is compared first now: nothing is allocated for a size the frame does not hold.
TEST(ChunkCodec, CompressedSizeClaimIsCheckedBeforeAllocating) {
  auto bytes = encode_chunk(test_meta(), Bytes(4096, 0), {.compress = true});
  ASSERT_TRUE(bytes.has_value());
  Bytes b = *bytes;
  // docs/chunk-format.md, version 2: the header checksum at 136 + L covers bytes [0, 136 + L).
  const std::size_t checksum_at = 136 + test_meta().kv_format.size();
  const std::uint64_t claimed = std::uint64_t{3} << 30;  // under the codec's 4 GiB bound
  for (int i = 0; i < 8; ++i) b[112 + i] = static_cast<std::uint8_t>(claimed >> (8 * i));  // payload_size
  const std::uint64_t sum = XXH3_64bits(b.data(), checksum_at);
  for (int i = 0; i < 8; ++i) b[checksum_at + i] = static_cast<std::uint8_t>(sum >> (8 * i));
  ASSERT_TRUE(parse_chunk_header(b).has_value());  // the header itself is consistent
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kDecompress);
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 << 10);  // KiB: far below the 3 GiB claimed
}

TEST(ChunkCodec, EachExpectationMismatchIsDistinct) {
  auto bytes = *encode_chunk(test_meta(), test_payload(64));
  ChunkMeta m = test_meta();
  m.key.bytes[5] ^= 1;
  EXPECT_EQ(decode_error(bytes, m), ChunkError::kKeyMismatch);
  m = test_meta();
  m.model_fingerprint[0] ^= 0x80;
  EXPECT_EQ(decode_error(bytes, m), ChunkError::kModelMismatch);
  m = test_meta();
  m.kv_format = "q8-v1";
  EXPECT_EQ(decode_error(bytes, m), ChunkError::kKvFormatMismatch);
  for (auto field : {&ChunkMeta::token_count, &ChunkMeta::first_position, &ChunkMeta::n_layers,
                     &ChunkMeta::n_kv_heads, &ChunkMeta::head_dim, &ChunkMeta::element_type}) {
    m = test_meta();
    m.*field += 1;
    EXPECT_EQ(decode_error(bytes, m), ChunkError::kShapeMismatch);
  }
}

TEST(ChunkCodec, StructuralErrorsAreDistinct) {
  const Bytes good = *encode_chunk(test_meta(), test_payload(64));
  Bytes b = good;
  b[0] = 'X';
  EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kBadMagic);
  b = good;
  b[8] = 3;  // version 3
  EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kBadVersion);
  EXPECT_EQ(decode_chunk(b, test_meta()).status().code(), StatusCode::kUnsupported);
  b = good;
  b[90] ^= 4;  // inside n_layers: caught by the header checksum before any field is believed
  EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kHeaderChecksum);
  b = good;
  b.back() ^= 1;
  EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kPayloadChecksum);
  b = good;
  b.push_back(0);
  EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kTrailingBytes);
  EXPECT_EQ(decode_error(Bytes{}, test_meta()), ChunkError::kTruncated);
}

TEST(ChunkCodec, EveryTruncationDetected) {
  const Bytes good = *encode_chunk(test_meta(), test_payload(40));
  for (std::size_t n = 0; n < good.size(); ++n) {
    Bytes b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kTruncated) << "length " << n;
  }
}

TEST(ChunkCodec, EveryBitFlipDetected) {
  for (bool compress : {false, true}) {
    const Bytes good = *encode_chunk(test_meta(), test_payload(48), {.compress = compress});
    for (std::size_t bit = 0; bit < good.size() * 8; ++bit) {
      Bytes b = good;
      b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
      ChunkError why = ChunkError::kNone;
      EXPECT_FALSE(decode_chunk(b, test_meta(), &why).has_value()) << "bit " << bit;
      EXPECT_NE(why, ChunkError::kNone);
      EXPECT_FALSE(verify_chunk(b).has_value()) << "bit " << bit;
    }
  }
}

TEST(ChunkCodec, HeaderParsesFromPrefix) {
  const Bytes good = *encode_chunk(test_meta(), test_payload(4096));
  auto header = parse_chunk_header(std::span(good).first(chunk_header_min_size() + 6 + 12 + 4));
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->meta, test_meta());
  EXPECT_EQ(header->total_size(), good.size());
  ASSERT_TRUE(verify_chunk(good).has_value());
}

TEST(ChunkCodec, RejectsOverlongKvFormat) {
  ChunkMeta m = test_meta();
  m.kv_format = std::string(kMaxKvFormatLength + 1, 'x');
  EXPECT_EQ(encode_chunk(m, test_payload(4)).status().code(), StatusCode::kInvalidArgument);
}

Provenance relayed_provenance() {
  Provenance p;
  p.trust = ChunkTrust::kVerified;
  ProducerKey producer{};
  for (int i = 0; i < 32; ++i) producer[i] = static_cast<std::uint8_t>(200 - i);
  p.producers = {producer};
  p.manifest = std::string("KVSMANIF") + std::string(300, '\x5a');  // opaque here
  return p;
}

// Version-1 bytes as docs/chunk-format.md's table has them (this build no longer writes them).
Bytes encode_v1(const ChunkMeta& meta, const Bytes& payload) {
  Bytes v2 = *encode_chunk(meta, payload);
  const std::size_t fixed = 132 + meta.kv_format.size();
  Bytes out(v2.begin(), v2.begin() + static_cast<std::ptrdiff_t>(fixed));
  out[8] = 1;
  const std::size_t header_size = fixed + 8;
  for (int i = 0; i < 4; ++i) out[12 + i] = static_cast<std::uint8_t>(header_size >> (8 * i));
  const std::uint64_t checksum = XXH3_64bits(out.data(), fixed);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(checksum >> (8 * i)));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

TEST(ChunkProvenance, RoundTripsEveryTrustState) {
  for (ChunkTrust trust : {ChunkTrust::kComputed, ChunkTrust::kVerified, ChunkTrust::kSpotChecked, ChunkTrust::kUnchecked}) {
    ChunkMeta m = test_meta();
    m.provenance = relayed_provenance();
    m.provenance.trust = trust;
    for (bool compress : {false, true}) {
      auto bytes = encode_chunk(m, test_payload(500), {.compress = compress});
      ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
      auto view = decode_chunk(*bytes, test_meta());  // provenance is not an expectation
      ASSERT_TRUE(view.has_value()) << view.status().to_string();
      EXPECT_EQ(view->header.version, kChunkFormatVersion);
      EXPECT_EQ(view->header.meta.provenance, m.provenance) << chunk_trust_name(trust);
      EXPECT_EQ(view->header.meta.provenance.trusted(), trust != ChunkTrust::kUnchecked);
      EXPECT_TRUE(view->header.meta.provenance.names(m.provenance.producers[0]));
    }
  }
}

TEST(ChunkProvenance, DefaultIsUncheckedSoNothingIsSignedByAccident) {
  auto view = decode_chunk(*encode_chunk(test_meta(), test_payload(8)), test_meta());
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->header.meta.provenance.trust, ChunkTrust::kUnchecked);
  EXPECT_FALSE(view->header.meta.provenance.trusted());
}

TEST(ChunkProvenance, WithProvenanceKeepsThePayloadBytes) {
  for (bool compress : {false, true}) {
    const Bytes payload = test_payload(3000);
    const Bytes original = *encode_chunk(test_meta(), payload, {.compress = compress});
    auto rewritten = with_provenance(original, relayed_provenance());
    ASSERT_TRUE(rewritten.has_value()) << rewritten.status().to_string();
    auto before = verify_chunk(original);
    auto after = verify_chunk(*rewritten);
    ASSERT_TRUE(before && after);
    EXPECT_EQ(after->meta.provenance, relayed_provenance());
    EXPECT_EQ(after->payload_checksum, before->payload_checksum);
    EXPECT_EQ(Bytes(rewritten->begin() + after->header_size, rewritten->end()),
              Bytes(original.begin() + before->header_size, original.end()));
    auto view = decode_chunk(*rewritten, test_meta());
    ASSERT_TRUE(view.has_value());
    EXPECT_EQ(Bytes(view->payload.begin(), view->payload.end()), payload);
  }
  Bytes damaged = *encode_chunk(test_meta(), test_payload(64));
  damaged.back() ^= 1;
  EXPECT_FALSE(with_provenance(damaged, relayed_provenance()).has_value());
}

TEST(ChunkProvenance, DamagedProvenanceIsNamedAsSuch) {
  ChunkMeta m = test_meta();
  m.provenance = relayed_provenance();
  const Bytes good = *encode_chunk(m, test_payload(64));
  auto header = verify_chunk(good);
  ASSERT_TRUE(header.has_value());
  const std::size_t fixed = 132 + m.kv_format.size();
  const std::size_t first = fixed + 12, end = header->header_size;  // provenance, then its checksum
  for (std::size_t at = first; at < end; ++at) {
    Bytes b = good;
    b[at] ^= 0x10;
    ChunkError why = ChunkError::kNone;
    EXPECT_FALSE(decode_chunk(b, test_meta(), &why).has_value()) << "byte " << at;
    EXPECT_EQ(why, ChunkError::kProvenance) << "byte " << at;
    EXPECT_EQ(decode_chunk(b, test_meta()).status().code(), StatusCode::kCorrupt);
  }
  EXPECT_STREQ(chunk_error_name(ChunkError::kProvenance), "damaged provenance");
  // The provenance length is under the header checksum: damage there is a header error.
  Bytes b = good;
  b[fixed] ^= 1;
  EXPECT_EQ(decode_error(b, test_meta()), ChunkError::kHeaderChecksum);
}

TEST(ChunkProvenance, EncodeRefusesWhatCannotBeRecorded) {
  ChunkMeta m = test_meta();
  m.provenance.trust = ChunkTrust::kUnknown;  // only a version-1 chunk reads as unknown
  EXPECT_EQ(encode_chunk(m, test_payload(4)).status().code(), StatusCode::kInvalidArgument);
  m.provenance.trust = ChunkTrust::kUnchecked;
  m.provenance.producers.resize(kMaxProvenanceProducers + 1);
  EXPECT_EQ(encode_chunk(m, test_payload(4)).status().code(), StatusCode::kInvalidArgument);
  m.provenance.producers.clear();
  m.provenance.manifest.assign(kMaxProvenanceManifest + 1, 'm');
  EXPECT_EQ(encode_chunk(m, test_payload(4)).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChunkProvenance, VersionOneChunksReadAsUnknown) {
  const Bytes payload = test_payload(200);
  const Bytes v1 = encode_v1(test_meta(), payload);
  auto view = decode_chunk(v1, test_meta());
  ASSERT_TRUE(view.has_value()) << view.status().to_string();
  EXPECT_EQ(view->header.version, 1);
  EXPECT_EQ(view->header.meta.provenance.trust, ChunkTrust::kUnknown);
  EXPECT_FALSE(view->header.meta.provenance.trusted());
  EXPECT_EQ(Bytes(view->payload.begin(), view->payload.end()), payload);
  // A reader that learns its provenance rewrites it as version 2.
  auto upgraded = with_provenance(v1, relayed_provenance());
  ASSERT_TRUE(upgraded.has_value());
  auto header = verify_chunk(*upgraded);
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->version, kChunkFormatVersion);
  EXPECT_EQ(header->meta.provenance, relayed_provenance());
}

TEST(ChunkProvenance, MaxHeaderSizeCoversTheLongestHeader) {
  ChunkMeta m = test_meta();
  m.kv_format.assign(kMaxKvFormatLength, 'k');
  m.provenance.producers.resize(kMaxProvenanceProducers);
  m.provenance.manifest.assign(kMaxProvenanceManifest, 'm');
  auto bytes = encode_chunk(m, test_payload(16));
  ASSERT_TRUE(bytes.has_value());
  auto header = parse_chunk_header(std::span(*bytes).first(chunk_header_max_size()));
  ASSERT_TRUE(header.has_value()) << header.status().to_string();
  EXPECT_EQ(header->header_size, chunk_header_max_size());
}

}  // namespace
}  // namespace kvstash::cache
