#include "cache/chunk_key.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cstring>

namespace kvstash::cache {
namespace {

ModelFingerprint test_fingerprint() {
  ModelFingerprint fp;
  for (int i = 0; i < 32; ++i) fp[i] = static_cast<std::uint8_t>(i);
  return fp;
}

void append_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// The key spec rebuilt by hand into one buffer and hashed with the one-shot SHA256(), a path
// independent of the streaming EVP calls in chunk_key.cc.
ChunkKey reference_key0(const ModelFingerprint& fp, std::string_view fmt, std::string_view ns,
                        std::vector<std::int32_t> tokens) {
  std::vector<std::uint8_t> buf;
  for (char c : std::string_view("kvstash-chunk-v1")) buf.push_back(static_cast<std::uint8_t>(c));
  buf.insert(buf.end(), fp.begin(), fp.end());
  append_u32(buf, static_cast<std::uint32_t>(fmt.size()));
  buf.insert(buf.end(), fmt.begin(), fmt.end());
  append_u32(buf, static_cast<std::uint32_t>(ns.size()));
  buf.insert(buf.end(), ns.begin(), ns.end());
  for (auto t : tokens) append_u32(buf, static_cast<std::uint32_t>(t));
  ChunkKey key;
  SHA256(buf.data(), buf.size(), key.bytes.data());
  return key;
}

TEST(ChunkKey, FixedVectors) {
  // Computed with Python's hashlib over the bytes of docs/chunk-format.md.
  std::vector<std::int32_t> tokens = {1, 2, 3, 4};
  auto keys = chunk_keys(test_fingerprint(), "f16-v1", "", tokens, 2);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].hex(), "9373bf46306d57999a1a26d115527b3646c51e575b671e3ca482251b735934d8");
  EXPECT_EQ(keys[1].hex(), "de5ac134f9c66c0b865ace98fac8b7db4281d226d44d37fc48d1b1fc9345d32f");
  auto salted = chunk_keys(test_fingerprint(), "f16-v1", "tenant-a", tokens, 2);
  EXPECT_EQ(salted[0].hex(), "cb732feb47feca23394bca3229a5aa802c3975bcfef8a48fe7849946adef0529");
}

TEST(ChunkKey, MatchesIndependentSha256) {
  std::vector<std::int32_t> tokens = {7, -1, 65535, 1 << 20, 42, 0};
  auto keys = chunk_keys(test_fingerprint(), "q8-v2", "ns", tokens, 3);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], reference_key0(test_fingerprint(), "q8-v2", "ns", {7, -1, 65535}));
  std::vector<std::uint8_t> buf;
  for (char c : std::string_view("kvstash-chunk-v1")) buf.push_back(static_cast<std::uint8_t>(c));
  buf.insert(buf.end(), keys[0].bytes.begin(), keys[0].bytes.end());
  for (auto t : {1 << 20, 42, 0}) append_u32(buf, static_cast<std::uint32_t>(t));
  ChunkKey k1;
  SHA256(buf.data(), buf.size(), k1.bytes.data());
  EXPECT_EQ(keys[1], k1);
}

TEST(ChunkKey, PrefixProperty) {
  std::vector<std::int32_t> a(40), b(40);
  for (int i = 0; i < 40; ++i) a[i] = b[i] = i * 7;
  b[25] = 9999;  // differs inside the fourth chunk of 8
  auto ka = chunk_keys(test_fingerprint(), "f", "", a, 8);
  auto kb = chunk_keys(test_fingerprint(), "f", "", b, 8);
  ASSERT_EQ(ka.size(), 5u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ka[i], kb[i]) << i;
  for (int i = 3; i < 5; ++i) EXPECT_NE(ka[i], kb[i]) << i;  // a change poisons every later key
  // A longer sequence extends, never changes, the keys of its prefix; partial chunks get no key.
  std::vector<std::int32_t> shorter(a.begin(), a.begin() + 21);
  auto ks = chunk_keys(test_fingerprint(), "f", "", shorter, 8);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0], ka[0]);
  EXPECT_EQ(ks[1], ka[1]);
  EXPECT_TRUE(chunk_keys(test_fingerprint(), "f", "", a, 0).empty());
}

TEST(ChunkKey, SaltModelAndFormatChangeKeys) {
  std::vector<std::int32_t> t = {1, 2, 3, 4};
  auto base = chunk_keys(test_fingerprint(), "f16", "", t, 4)[0];
  auto other_fp = test_fingerprint();
  other_fp[31] ^= 1;
  EXPECT_NE(base, chunk_keys(other_fp, "f16", "", t, 4)[0]);
  EXPECT_NE(base, chunk_keys(test_fingerprint(), "f32", "", t, 4)[0]);
  EXPECT_NE(base, chunk_keys(test_fingerprint(), "f16", "salt", t, 4)[0]);
  // Length prefixes keep field boundaries: moving a byte from kv_format to namespace changes the key.
  EXPECT_NE(chunk_keys(test_fingerprint(), "ab", "c", t, 4)[0],
            chunk_keys(test_fingerprint(), "a", "bc", t, 4)[0]);
}

TEST(ChunkKey, HexRoundTrip) {
  auto key = chunk_keys(test_fingerprint(), "f", "", std::vector<std::int32_t>{5}, 1)[0];
  auto back = ChunkKey::from_hex(key.hex());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, key);
  EXPECT_FALSE(ChunkKey::from_hex("abc").has_value());
  EXPECT_FALSE(ChunkKey::from_hex(std::string(64, 'g')).has_value());
}

}  // namespace
}  // namespace kvstash::cache
