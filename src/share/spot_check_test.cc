// The spot check's comparison: float rounding passes, altered KV fails.
#include "share/spot_check.h"

#include <gtest/gtest.h>

#include <vector>

#include "cache/test_util.h"
#include "common/fp16.h"

namespace kvstash::share {
namespace {

std::vector<std::uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> out;
  for (float f : v) {
    const std::uint16_t h = f32_to_f16(f);
    out.push_back(static_cast<std::uint8_t>(h));
    out.push_back(static_cast<std::uint8_t>(h >> 8));
  }
  return out;
}

TEST(SpotCheckTest, RoundingPassesAlteredKvFails) {
  const auto ours = f16_bytes({0.5f, -1.25f, 3.0f, 0.0f, 100.0f});
  EXPECT_TRUE(kv_close(ours, ours, 1).close);
  EXPECT_EQ(kv_close(ours, ours, 1).max_abs_diff, 0.0f);
  const auto rounded = f16_bytes({0.5005f, -1.251f, 3.002f, 0.001f, 100.1f});
  const auto near = kv_close(ours, rounded, 1);
  EXPECT_TRUE(near.close);
  EXPECT_GT(near.max_abs_diff, 0.0f);
  EXPECT_FALSE(kv_close(ours, f16_bytes({0.5f, -1.25f, 3.5f, 0.0f, 100.0f}), 1).close);  // one element altered
  EXPECT_FALSE(kv_close(ours, f16_bytes({0.5f, -1.25f, 3.0f, 0.0f}), 1).close);         // sizes differ
  auto flipped = ours;
  flipped[3] ^= 0x40;  // one exponent bit: a large change
  EXPECT_FALSE(kv_close(ours, flipped, 1).close);
  // Other element types: equal bytes only.
  EXPECT_TRUE(kv_close(ours, ours, 0).close);
  EXPECT_FALSE(kv_close(ours, rounded, 0).close);
}

using Clock = SpotChecks::Clock;
using cache::testing::test_key;
using cache::testing::test_meta;

SpotChecks::Check check_of(int key, std::uint32_t tokens = 16, std::uint8_t producer = 1) {
  SpotChecks::Check c;
  c.meta = test_meta(test_key(key));
  c.meta.token_count = tokens;
  c.producer.fill(producer);
  c.payload = f16_bytes(std::vector<float>(tokens, 1.0f));  // one f16 per token: a small stand-in
  return c;
}

TEST(SpotChecksTest, AHeldCheckIsTakenOnceBeforeItsDeadline) {
  SpotChecks checks({.max_pending = 4, .expiry = std::chrono::milliseconds(1000)});
  const auto t0 = Clock::now();
  EXPECT_EQ(checks.hold(check_of(1), t0), SpotChecks::Hold::kQueued);
  EXPECT_EQ(checks.hold(check_of(1), t0), SpotChecks::Hold::kAlreadyQueued);
  EXPECT_EQ(checks.pending(t0), 1u);
  EXPECT_FALSE(checks.take(test_key(2), t0));
  auto taken = checks.take(test_key(1), t0 + std::chrono::milliseconds(999));
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->meta.key, test_key(1));
  EXPECT_EQ(taken->producer[0], 1);
  EXPECT_FALSE(checks.take(test_key(1), t0));  // once
  EXPECT_EQ(checks.pending(t0), 0u);
  EXPECT_EQ(checks.expired(), 0u);
}

TEST(SpotChecksTest, ChecksExpireAtTheirDeadlineAndAreCounted) {
  SpotChecks checks({.max_pending = 4, .expiry = std::chrono::milliseconds(1000)});
  const auto t0 = Clock::now();
  checks.hold(check_of(1), t0);
  checks.hold(check_of(2), t0 + std::chrono::milliseconds(500));
  EXPECT_EQ(checks.pending(t0 + std::chrono::milliseconds(999)), 2u);
  EXPECT_EQ(checks.pending(t0 + std::chrono::milliseconds(1000)), 1u);  // the first, at its deadline
  EXPECT_EQ(checks.expired(), 1u);
  // Taking an expired check gives nothing and counts it.
  EXPECT_FALSE(checks.take(test_key(2), t0 + std::chrono::milliseconds(1600)));
  EXPECT_EQ(checks.expired(), 2u);
  EXPECT_EQ(checks.pending(t0 + std::chrono::milliseconds(1600)), 0u);
}

TEST(SpotChecksTest, AFullSetRefusesUntilChecksCompleteOrExpire) {
  SpotChecks checks({.max_pending = 2, .expiry = std::chrono::milliseconds(1000)});
  const auto t0 = Clock::now();
  EXPECT_EQ(checks.hold(check_of(1), t0), SpotChecks::Hold::kQueued);
  EXPECT_EQ(checks.hold(check_of(2), t0), SpotChecks::Hold::kQueued);
  EXPECT_TRUE(checks.full(t0));
  EXPECT_EQ(checks.hold(check_of(3), t0), SpotChecks::Hold::kFull);
  ASSERT_TRUE(checks.take(test_key(1), t0));  // one completes: room for one
  EXPECT_FALSE(checks.full(t0));
  EXPECT_EQ(checks.hold(check_of(3), t0), SpotChecks::Hold::kQueued);
  EXPECT_TRUE(checks.full(t0));
  // Past the deadline the set empties by itself: a full set is never full for good.
  EXPECT_FALSE(checks.full(t0 + std::chrono::milliseconds(1000)));
  EXPECT_EQ(checks.expired(), 2u);
  EXPECT_EQ(checks.hold(check_of(4), t0 + std::chrono::milliseconds(1000)), SpotChecks::Hold::kQueued);
}

// Issue 31: 300 checks that never complete (prompts that dodge their completion, KV that never comes)
// at the defaults (256 pending, 60 s). While the set is full nothing unknown is queued (the peers
// tier then drops unknown chunks rather than using them unchecked); at the deadline every abandoned
// check is counted as expired and the next check is taken and completed as usual.
TEST(SpotChecksTest, ThreeHundredAbandonedChecksAtTheDefaultsDoNotDisableChecking) {
  const SpotCheckOptions defaults;
  ASSERT_EQ(defaults.max_pending, 256u);
  SpotChecks checks(defaults);
  const auto t0 = Clock::now();
  int queued = 0, refused = 0;
  for (int k = 1; k <= 300; ++k) {
    const auto held = checks.hold(check_of(k), t0 + std::chrono::milliseconds(k));
    queued += held == SpotChecks::Hold::kQueued;
    refused += held == SpotChecks::Hold::kFull;
  }
  EXPECT_EQ(queued, 256);
  EXPECT_EQ(refused, 44);
  EXPECT_TRUE(checks.full(t0 + std::chrono::milliseconds(301)));
  // One expiry period after the last was queued, all 256 are gone and counted.
  const auto later = t0 + defaults.expiry + std::chrono::milliseconds(301);
  EXPECT_EQ(checks.pending(later), 0u);
  EXPECT_EQ(checks.expired(), 256u);
  EXPECT_FALSE(checks.full(later));
  EXPECT_EQ(checks.hold(check_of(1000), later), SpotChecks::Hold::kQueued);
  auto taken = checks.take(test_key(1000), later + std::chrono::milliseconds(5));
  ASSERT_TRUE(taken) << "a check queued after the flood is taken for comparison";
  EXPECT_EQ(taken->meta.key, test_key(1000));
}

TEST(SpotChecksTest, ARestoredCheckKeepsItsDeadline) {
  SpotChecks checks({.max_pending = 2, .expiry = std::chrono::milliseconds(1000)});
  const auto t0 = Clock::now();
  checks.hold(check_of(1), t0);
  auto c = checks.take(test_key(1), t0 + std::chrono::milliseconds(100));
  ASSERT_TRUE(c);
  checks.restore(std::move(*c), t0 + std::chrono::milliseconds(100));
  EXPECT_EQ(checks.pending(t0 + std::chrono::milliseconds(999)), 1u);
  EXPECT_EQ(checks.pending(t0 + std::chrono::milliseconds(1000)), 0u);
  EXPECT_EQ(checks.expired(), 1u);
  // Restored after its deadline: counted as expired, not queued.
  checks.hold(check_of(2), t0);
  auto late = checks.take(test_key(2), t0 + std::chrono::milliseconds(10));
  checks.restore(std::move(*late), t0 + std::chrono::milliseconds(2000));
  EXPECT_EQ(checks.expired(), 2u);
  EXPECT_EQ(checks.pending(t0 + std::chrono::milliseconds(10)), 0u);
}

TEST(SpotChecksTest, OwnChunksAreKeptOnlyWhenAnAliasMayNameThemForAWaitingCheck) {
  SpotChecks checks({.max_pending = 2, .expiry = std::chrono::milliseconds(1000)});
  const auto t0 = Clock::now();
  auto own = test_meta(test_key(9));
  own.token_count = 32;
  EXPECT_FALSE(checks.may_resolve(own, t0));  // nothing waits
  checks.hold(check_of(1, 16), t0);
  EXPECT_TRUE(checks.may_resolve(own, t0));   // longer, same position and shape
  auto shorter = own;
  shorter.token_count = 16;
  EXPECT_FALSE(checks.may_resolve(shorter, t0));
  auto elsewhere = own;
  elsewhere.first_position = 256;
  EXPECT_FALSE(checks.may_resolve(elsewhere, t0));
  auto other_model = own;
  other_model.model_fingerprint[0] ^= 1;
  EXPECT_FALSE(checks.may_resolve(other_model, t0));
  checks.keep_own(own, std::make_shared<const cache::Bytes>(f16_bytes(std::vector<float>(32, 1.0f))));
  ASSERT_TRUE(checks.own(test_key(9)));
  EXPECT_EQ(checks.own(test_key(9))->payload->size(), 64u);
  for (int k = 10; k < 20; ++k) {  // only the last few are kept
    auto m = own;
    m.key = test_key(k);
    checks.keep_own(m, std::make_shared<const cache::Bytes>());
  }
  EXPECT_FALSE(checks.own(test_key(9)));
  EXPECT_TRUE(checks.own(test_key(19)));
  // Once no check waits, none is kept.
  checks.pending(t0 + std::chrono::milliseconds(1000));
  EXPECT_FALSE(checks.own(test_key(19)));
}

TEST(SpotChecksTest, APrefixComparesTheLongerChunksFirstTokens) {
  auto theirs_meta = test_meta(test_key(1));
  theirs_meta.token_count = 2;
  auto ours_meta = test_meta(test_key(2));
  ours_meta.token_count = 3;
  const auto ours = f16_bytes({0.5f, -1.0f, 7.0f});
  EXPECT_TRUE(kv_prefix_close(ours_meta, ours, theirs_meta, f16_bytes({0.5f, -1.0f})).close);
  EXPECT_TRUE(kv_prefix_close(ours_meta, ours, theirs_meta, f16_bytes({0.501f, -1.0f})).close);
  EXPECT_FALSE(kv_prefix_close(ours_meta, ours, theirs_meta, f16_bytes({0.5f, 3.0f})).close);  // altered
  EXPECT_FALSE(kv_prefix_close(ours_meta, ours, theirs_meta, f16_bytes({0.5f})).close);        // size does not fit
  auto same_length = ours_meta;
  same_length.token_count = 2;
  EXPECT_FALSE(kv_prefix_close(same_length, f16_bytes({0.5f, -1.0f}), theirs_meta, f16_bytes({0.5f, -1.0f})).close);
  auto elsewhere = theirs_meta;
  elsewhere.first_position = 16;
  EXPECT_FALSE(kv_prefix_close(ours_meta, ours, elsewhere, f16_bytes({0.5f, -1.0f})).close);
}

}  // namespace
}  // namespace kvstash::share
