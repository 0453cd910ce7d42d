// Directory entries: round trip, and each reason check_directory_entry() refuses one.
#include "share/directory_entry.h"

#include <gtest/gtest.h>

namespace kvstash::share {
namespace {

identity::NodeIdentity node(std::uint8_t seed) {
  std::array<std::uint8_t, 32> s{};
  s.fill(seed);
  return identity::NodeIdentity::from_seed(s);
}

constexpr std::uint64_t kNow = 1'800'000'000;  // a fixed "now" (2027): no test depends on the clock
const std::string kUrl = "http://127.0.0.1:8080";

DirectoryEntryError why_refused(const std::string& bytes, std::uint64_t now) {
  DirectoryEntryError why = DirectoryEntryError::kNone;
  auto e = check_directory_entry(bytes, now, &why);
  EXPECT_EQ(e.has_value(), why == DirectoryEntryError::kNone) << (e ? "" : e.status().to_string());
  return why;
}

TEST(DirectoryEntryTest, RoundTripsAndVerifies) {
  const auto n = node(1);
  auto made = make_directory_entry(n, kUrl, kNow, std::chrono::seconds(600));
  ASSERT_TRUE(made) << made.status().to_string();
  const std::string bytes = encode_directory_entry(*made);
  EXPECT_EQ(bytes.size(), 60 + kUrl.size() + 64);  // the documented layout's size
  auto back = decode_directory_entry(bytes);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->url, kUrl);
  EXPECT_EQ(back->node, n.public_key());
  EXPECT_EQ(back->issued_at, kNow);
  EXPECT_EQ(back->expires_at, kNow + 600);
  EXPECT_EQ(back->signature, made->signature);
  EXPECT_EQ(encode_directory_entry(*back), bytes);
  auto checked = check_directory_entry(bytes, kNow + 1);
  ASSERT_TRUE(checked) << checked.status().to_string();
  EXPECT_EQ(checked->url, kUrl);
  // What is signed: the domain tag and every byte before the signature.
  EXPECT_TRUE(identity::verify(n.public_key(), kDirectoryDomain, bytes.substr(0, bytes.size() - 64), made->signature));
  EXPECT_FALSE(identity::verify(n.public_key(), "kvstash-manifest-v1", bytes.substr(0, bytes.size() - 64), made->signature));
}

TEST(DirectoryEntryTest, ABareUrlOrJunkIsUnsigned) {
  EXPECT_EQ(why_refused(kUrl, kNow), DirectoryEntryError::kUnsigned);
  EXPECT_EQ(why_refused("", kNow), DirectoryEntryError::kUnsigned);
  std::string bytes = encode_directory_entry(*make_directory_entry(node(1), kUrl, kNow, std::chrono::seconds(600)));
  for (std::size_t cut = 0; cut < bytes.size(); cut += 7) {  // every truncation refused, never a crash
    EXPECT_EQ(why_refused(bytes.substr(0, cut), kNow), DirectoryEntryError::kUnsigned) << cut;
  }
  std::string other_version = bytes;
  other_version[8] = 2;
  EXPECT_EQ(why_refused(other_version, kNow), DirectoryEntryError::kUnsigned);
  std::string long_length = bytes;
  long_length[10] = static_cast<char>(0xff);
  EXPECT_EQ(why_refused(long_length, kNow), DirectoryEntryError::kUnsigned);
}

TEST(DirectoryEntryTest, AlteredOrForgedEntriesFailTheSignature) {
  const auto n = node(1), stranger = node(2);
  const DirectoryEntry e = *make_directory_entry(n, kUrl, kNow, std::chrono::seconds(600));
  // Another URL under the node's signature (an attacker redirecting its fragments).
  DirectoryEntry moved = e;
  moved.url = "http://127.0.0.1:9999";
  EXPECT_EQ(why_refused(encode_directory_entry(moved), kNow), DirectoryEntryError::kSignature);
  // A later expiry under the node's signature (extending a replay).
  DirectoryEntry extended = e;
  extended.expires_at += 3600;
  EXPECT_EQ(why_refused(encode_directory_entry(extended), kNow), DirectoryEntryError::kSignature);
  // The node's key claimed, a stranger's signature.
  DirectoryEntry forged = *make_directory_entry(stranger, kUrl, kNow, std::chrono::seconds(600));
  forged.node = n.public_key();
  EXPECT_EQ(why_refused(encode_directory_entry(forged), kNow), DirectoryEntryError::kSignature);
  // One flipped signature bit.
  std::string bytes = encode_directory_entry(e);
  bytes.back() ^= 1;
  EXPECT_EQ(why_refused(bytes, kNow), DirectoryEntryError::kSignature);
  // The stranger's own entry verifies (trust is the caller's question).
  EXPECT_EQ(why_refused(encode_directory_entry(*make_directory_entry(stranger, kUrl, kNow, std::chrono::seconds(600))), kNow),
            DirectoryEntryError::kNone);
}

TEST(DirectoryEntryTest, ExpiredFutureAndOverlongEntriesAreRefused) {
  const auto n = node(1);
  const std::string bytes = encode_directory_entry(*make_directory_entry(n, kUrl, kNow, std::chrono::seconds(600)));
  EXPECT_EQ(why_refused(bytes, kNow + 599), DirectoryEntryError::kNone);
  EXPECT_EQ(why_refused(bytes, kNow + 600), DirectoryEntryError::kExpired);  // a replay after its expiry
  EXPECT_EQ(why_refused(bytes, kNow + 100000), DirectoryEntryError::kExpired);
  // Issued ahead of our clock: tolerated within the skew, refused beyond it.
  EXPECT_EQ(why_refused(bytes, kNow - static_cast<std::uint64_t>(kDirectoryClockSkew.count())), DirectoryEntryError::kNone);
  EXPECT_EQ(why_refused(bytes, kNow - static_cast<std::uint64_t>(kDirectoryClockSkew.count()) - 1), DirectoryEntryError::kExpired);
  // A signer asking for a year gets the cap from make_directory_entry...
  const auto capped = *make_directory_entry(n, kUrl, kNow, std::chrono::hours(24 * 365));
  EXPECT_EQ(capped.expires_at - capped.issued_at, static_cast<std::uint64_t>(kMaxDirectoryEntryLifetime.count()));
  // ...and a hand-made entry valid for longer is refused even when correctly signed.
  DirectoryEntry overlong = capped;
  overlong.expires_at = overlong.issued_at + static_cast<std::uint64_t>(kMaxDirectoryEntryLifetime.count()) + 1;
  overlong.signature = n.sign(kDirectoryDomain, directory_entry_signed_bytes(overlong));
  EXPECT_EQ(why_refused(encode_directory_entry(overlong), kNow), DirectoryEntryError::kExpired);
}

TEST(DirectoryEntryTest, UrlBoundsAreEnforcedWhenMaking) {
  EXPECT_FALSE(make_directory_entry(node(1), "", kNow, std::chrono::seconds(600)));
  EXPECT_FALSE(make_directory_entry(node(1), std::string(kMaxDirectoryUrlLength + 1, 'x'), kNow, std::chrono::seconds(600)));
  auto longest = make_directory_entry(node(1), std::string(kMaxDirectoryUrlLength, 'x'), kNow, std::chrono::seconds(600));
  ASSERT_TRUE(longest);
  EXPECT_EQ(why_refused(encode_directory_entry(*longest), kNow), DirectoryEntryError::kNone);
}

}  // namespace
}  // namespace kvstash::share
