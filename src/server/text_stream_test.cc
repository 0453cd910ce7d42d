#include "server/text_stream.h"

#include <gtest/gtest.h>

#include "server/utf8.h"

namespace kvstash::server {
namespace {

TEST(Utf8, ValidatesAndReplaces) {
  EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  std::string raw = "a\xFF" "b\xE2\x82";
  EXPECT_EQ(take_utf8(raw, false), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(raw, "\xE2\x82");
  EXPECT_EQ(take_utf8(raw, true), "\xEF\xBF\xBD");
  EXPECT_TRUE(raw.empty());
}

TEST(TextStream, MultiByteCharacterSplitAcrossTokensIsNeverBroken) {
  TextStream s;
  // "€" = E2 82 AC arrives one byte per token.
  EXPECT_EQ(s.push("x\xE2"), "x");
  EXPECT_EQ(s.push("\x82"), "");
  EXPECT_EQ(s.push("\xAC!"), "\xE2\x82\xAC!");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.emitted_bytes(), 5u);
}

TEST(TextStream, IncompleteTailAtEndBecomesReplacementCharacter) {
  TextStream s;
  EXPECT_EQ(s.push("ok\xF0\x9F"), "ok");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
}

TEST(TextStream, StopStringIsCutAndHeldBackAcrossTokens) {
  TextStream s({"END"});
  EXPECT_EQ(s.push("abc E"), "abc ");  // "E" may start "END"
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("N"), "");
  EXPECT_EQ(s.push("Dtrailing"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("more"), "");
  EXPECT_EQ(s.finish(), "");
}

TEST(TextStream, HeldTextIsReleasedWhenItStopsMatching) {
  TextStream s({"END"});
  EXPECT_EQ(s.push("E"), "");
  EXPECT_EQ(s.push("N"), "");
  EXPECT_EQ(s.push("x"), "ENx");
  EXPECT_EQ(s.push("EN"), "");
  EXPECT_EQ(s.finish(), "EN");  // generation ended without the stop string
}

TEST(TextStream, EarliestOfSeveralStopStringsWins) {
  TextStream s({"world", "lo w"});
  EXPECT_EQ(s.push("hello world"), "hel");
  EXPECT_TRUE(s.stopped());
}

TEST(TextStream, StopStringInsideOneToken) {
  TextStream s({"\n\n"});
  EXPECT_EQ(s.push("line\n\nnext"), "line");
  EXPECT_TRUE(s.stopped());
}

TEST(TextStream, EmptyStopStringsAreIgnored) {
  TextStream s({""});
  EXPECT_EQ(s.push("abc"), "abc");
  EXPECT_FALSE(s.stopped());
}

}  // namespace
}  // namespace kvstash::server
