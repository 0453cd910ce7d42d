#include "tokenizer/bpe_model.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_unicode.h"

namespace kvstash::tokenizer {
namespace {

// A vocabulary of all 256 byte tokens (ids 0..255, in byte order) plus extra tokens.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(bytes_to_mapped(std::string(1, static_cast<char>(b))));
  return tokens;
}

BpeModel make(std::vector<std::string> extra, std::vector<std::string> merges, bool ignore_merges = false,
              std::vector<bool> producible_extra = {}) {
  std::vector<std::string> tokens = byte_tokens();
  std::vector<bool> producible(256, true);
  for (std::size_t i = 0; i < extra.size(); ++i) {
    tokens.push_back(extra[i]);
    producible.push_back(i < producible_extra.size() ? producible_extra[i] : true);
  }
  Expected<BpeModel> model = BpeModel::build(std::move(tokens), merges, std::move(producible), ignore_merges);
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  return std::move(*model);
}

std::vector<TokenId> encode(const BpeModel& m, std::string_view piece) {
  std::vector<TokenId> out;
  m.encode_piece(piece, &out);
  return out;
}

TEST(BpeModel, BytesWithoutMerges) {
  const BpeModel m = make({}, {});
  EXPECT_EQ(encode(m, "ab"), (std::vector<TokenId>{'a', 'b'}));
  EXPECT_EQ(encode(m, std::string("\xFF\x00", 2)), (std::vector<TokenId>{255, 0}));
  EXPECT_TRUE(encode(m, "").empty());
}

TEST(BpeModel, MergesApplyByRankNotPosition) {
  // ids: 256 "ab", 257 "bc", 258 "abc". "b c" outranks "a b", so "abc" -> a + bc, and no
  // merge "a bc" exists.
  const BpeModel m = make({"ab", "bc", "abc"}, {"b c", "a b", "ab c"});
  EXPECT_EQ(encode(m, "abc"), (std::vector<TokenId>{'a', 257}));
  EXPECT_EQ(encode(m, "abab"), (std::vector<TokenId>{256, 256}));
  const BpeModel m2 = make({"ab", "bc", "abc"}, {"a b", "b c", "ab c"});
  EXPECT_EQ(encode(m2, "abc"), (std::vector<TokenId>{258}));
}

TEST(BpeModel, TiesGoLeftmost) {
  const BpeModel m = make({"aa"}, {"a a"});
  EXPECT_EQ(encode(m, "aaa"), (std::vector<TokenId>{256, 'a'}));
}

TEST(BpeModel, MappedSpaceMerges) {
  const BpeModel m = make({"\xC4\xA0w"}, {"\xC4\xA0 w"});  // "Ġ w"
  EXPECT_EQ(encode(m, " w"), (std::vector<TokenId>{256}));
}

TEST(BpeModel, IgnoreMergesTakesWholeTokens) {
  // "abc" is a token but no merge chain reaches it.
  const BpeModel plain = make({"abc"}, {});
  EXPECT_EQ(encode(plain, "abc").size(), 3u);
  const BpeModel whole = make({"abc"}, {}, /*ignore_merges=*/true);
  EXPECT_EQ(encode(whole, "abc"), (std::vector<TokenId>{256}));
}

TEST(BpeModel, UnproducibleTokensNeverComeOut) {
  const BpeModel m = make({"<s>", "<s"}, {"< s", "<s >"}, /*ignore_merges=*/true, {false, true});
  EXPECT_EQ(encode(m, "<s>"), (std::vector<TokenId>{257, '>'}));
  EXPECT_EQ(m.find("<s>"), 256);
  EXPECT_EQ(m.skipped_merges(), 1u);
}

TEST(BpeModel, LongPieceIsFast) {
  const BpeModel m = make({"aa", "aaaa"}, {"a a", "aa aa"});
  const std::vector<TokenId> ids = encode(m, std::string(100001, 'a'));
  ASSERT_EQ(ids.size(), 25001u);
  EXPECT_EQ(ids.back(), 'a');
}

TEST(BpeModel, MissingByteTokenEncodesToNothing) {
  // Falcon's and StarCoder's vocabularies lack bytes that never occur in UTF-8.
  std::vector<std::string> tokens = byte_tokens();
  tokens.pop_back();  // byte 0xFF
  Expected<BpeModel> m = BpeModel::build(tokens, {}, std::vector<bool>(tokens.size(), true), false);
  ASSERT_TRUE(m.has_value());
  std::vector<TokenId> ids;
  m->encode_piece(std::string("a\xFF" "b"), &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{'a', 'b'}));
  ids.clear();
  m->encode_piece(std::string("\xFF"), &ids);
  EXPECT_TRUE(ids.empty());
}

TEST(BpeModel, SizeMismatchIsCorrupt) {
  Expected<BpeModel> m = BpeModel::build(byte_tokens(), {}, std::vector<bool>(3, true), false);
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace kvstash::tokenizer
