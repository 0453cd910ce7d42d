// Manifests: round trip, and one test per rejection check_chunk() can make.
#include "share/manifest.h"

#include <gtest/gtest.h>

#include "cache/test_util.h"

namespace kvstash::share {
namespace {

using cache::testing::test_chunk;
using cache::testing::test_key;
using cache::testing::test_meta;

identity::NodeIdentity node(std::uint8_t seed) {
  std::array<std::uint8_t, 32> s{};
  s.fill(seed);
  return identity::NodeIdentity::from_seed(s);
}

class ManifestTest : public ::testing::Test {
 protected:
  ManifestTest() : producer_(node(1)), stranger_(node(2)) {
    meta_ = test_meta(test_key(7), 32);
    chunk_ = test_chunk(meta_, 512, 3);
    manifest_ = *make_manifest(chunk_, producer_);
    trust_.add(producer_.public_key());
    policy_.trusted = [this](const identity::PublicKey& k) { return trust_.trusts(k); };
    policy_.banned = [this](const identity::PublicKey& k) { return k == banned_; };
  }
  ManifestError check(const std::string& manifest, const cache::Bytes& chunk, const cache::ChunkKey& key) {
    ManifestError why = ManifestError::kNone;
    Status st = check_chunk(manifest, chunk, key, policy_, nullptr, &why);
    EXPECT_EQ(st.is_ok(), why == ManifestError::kNone) << st.to_string();
    return why;
  }

  identity::NodeIdentity producer_, stranger_;
  identity::TrustList trust_;
  identity::PublicKey banned_{};
  TrustPolicy policy_;
  cache::ChunkMeta meta_;
  cache::Bytes chunk_;
  Manifest manifest_;
};

TEST_F(ManifestTest, RoundTripsAndAcceptsTheGenuineChunk) {
  const std::string bytes = encode_manifest(manifest_);
  auto back = decode_manifest(bytes);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->meta, manifest_.meta);
  EXPECT_EQ(back->payload_sha256, manifest_.payload_sha256);
  EXPECT_EQ(back->producer, producer_.public_key());
  EXPECT_EQ(back->payload_size, 512u);
  Manifest out;
  EXPECT_TRUE(check_chunk(bytes, chunk_, meta_.key, policy_, &out));
  EXPECT_EQ(out.meta.first_position, 32u);
}

TEST_F(ManifestTest, CompressionDoesNotChangeThePayloadHash) {
  auto compressed = cache::encode_chunk(meta_, cache::testing::test_payload(512, 3), {.compress = true});
  ASSERT_TRUE(compressed);
  EXPECT_NE(*compressed, chunk_);
  EXPECT_EQ(check(encode_manifest(manifest_), *compressed, meta_.key), ManifestError::kNone);
}

TEST_F(ManifestTest, MalformedBytesAreRejectedNotCrashedOn) {
  const std::string good = encode_manifest(manifest_);
  EXPECT_EQ(check("", chunk_, meta_.key), ManifestError::kMalformed);
  EXPECT_EQ(check(good.substr(0, good.size() - 1), chunk_, meta_.key), ManifestError::kMalformed);
  EXPECT_EQ(check(good + "x", chunk_, meta_.key), ManifestError::kMalformed);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_EQ(check(bad_magic, chunk_, meta_.key), ManifestError::kMalformed);
  std::string bad_version = good;
  bad_version[8] = 9;
  EXPECT_EQ(check(bad_version, chunk_, meta_.key), ManifestError::kMalformed);
  std::string long_format = good;
  long_format[172] = static_cast<char>(0xff);  // kv_format length far past the bytes
  EXPECT_EQ(check(long_format, chunk_, meta_.key), ManifestError::kMalformed);
}

TEST_F(ManifestTest, AManifestForAnotherKeyIsRejected) {
  EXPECT_EQ(check(encode_manifest(manifest_), chunk_, test_key(8)), ManifestError::kKeyMismatch);
}

TEST_F(ManifestTest, ForgedFieldsBreakTheSignature) {
  Manifest forged = manifest_;
  forged.meta.first_position = 0;  // claim another position, keep the producer's signature
  EXPECT_EQ(check(encode_manifest(forged), chunk_, meta_.key), ManifestError::kSignature);
  Manifest stolen_key = manifest_;
  stolen_key.producer = stranger_.public_key();  // claim another producer
  EXPECT_EQ(check(encode_manifest(stolen_key), chunk_, meta_.key), ManifestError::kSignature);
  // A signature made for another domain (e.g. a response record) is not a manifest signature.
  Manifest other_domain = manifest_;
  other_domain.signature = producer_.sign("kvstash-response-v1", manifest_signed_bytes(manifest_));
  EXPECT_EQ(check(encode_manifest(other_domain), chunk_, meta_.key), ManifestError::kSignature);
}

TEST_F(ManifestTest, AnUntrustedOrBannedProducerIsRejected) {
  auto by_stranger = make_manifest(chunk_, stranger_);
  ASSERT_TRUE(by_stranger);
  EXPECT_EQ(check(encode_manifest(*by_stranger), chunk_, meta_.key), ManifestError::kUntrusted);
  trust_.add(stranger_.public_key());
  EXPECT_EQ(check(encode_manifest(*by_stranger), chunk_, meta_.key), ManifestError::kNone);
  banned_ = stranger_.public_key();
  EXPECT_EQ(check(encode_manifest(*by_stranger), chunk_, meta_.key), ManifestError::kBanned);
}

TEST_F(ManifestTest, AChunkThatDisagreesWithItsManifestIsRejected) {
  const std::string manifest = encode_manifest(manifest_);
  cache::ChunkMeta moved = meta_;
  moved.first_position = 64;  // the same payload claimed at another position
  EXPECT_EQ(check(manifest, test_chunk(moved, 512, 3), meta_.key), ManifestError::kHeaderMismatch);
  cache::ChunkMeta salted = meta_;
  salted.salted = true;
  EXPECT_EQ(check(manifest, test_chunk(salted, 512, 3), meta_.key), ManifestError::kHeaderMismatch);
  cache::Bytes damaged = chunk_;
  damaged.back() ^= 1;  // the chunk's own checksum catches it
  EXPECT_EQ(check(manifest, damaged, meta_.key), ManifestError::kHeaderMismatch);
  damaged.pop_back();
  EXPECT_EQ(check(manifest, damaged, meta_.key), ManifestError::kHeaderMismatch);
}

TEST_F(ManifestTest, AWellFormedChunkWithOtherKvFailsTheHash) {
  // Same header, a self-consistent chunk (its XXH3 matches), but not the KV the producer signed.
  EXPECT_EQ(check(encode_manifest(manifest_), test_chunk(meta_, 512, 4), meta_.key), ManifestError::kHash);
}

TEST_F(ManifestTest, SaltedFlagTravelsInTheChunkHeaderAndManifest) {
  cache::ChunkMeta salted = meta_;
  salted.salted = true;
  const cache::Bytes chunk = test_chunk(salted, 128, 1);
  auto header = cache::parse_chunk_header(chunk);
  ASSERT_TRUE(header);
  EXPECT_TRUE(header->meta.salted);
  EXPECT_FALSE(cache::parse_chunk_header(chunk_)->meta.salted);
  auto m = make_manifest(chunk, producer_);
  ASSERT_TRUE(m);
  EXPECT_TRUE(decode_manifest(encode_manifest(*m))->meta.salted);
  EXPECT_EQ(check(encode_manifest(*m), chunk, meta_.key), ManifestError::kNone);
}

}  // namespace
}  // namespace kvstash::share
