// The merge half of byte-level BPE: a vocabulary of token texts (in GPT-2's byte-mapped form,
// see byte_unicode.h) and ranked merges, turning one pre-tokenized piece into token ids.
//
// A piece starts as one token per byte; then, repeatedly, the adjacent pair whose merge has the
// lowest rank (leftmost on ties) is replaced by the merged token, until no adjacent pair has a
// merge. This runs over a linked list of symbols with a min-heap of candidate pairs, so a piece
// of n bytes costs O(n log n) however long it is (a 100 KB piece without spaces included).
// Merges are precomputed as (left id, right id) -> (rank, result id), so merging never touches
// strings.
//
// SentencePiece-style BPE (Gemma 4, utf8_units): the vocabulary holds plain UTF-8 text (spaces as
// U+2581), a piece starts as one symbol per UTF-8 character, and a character without a token is
// emitted as its bytes' fallback tokens "<0xXX>" (a byte without one encodes to nothing).
//
// With ignore_merges (Llama 3's tokenizer), a piece that is itself a vocabulary token is emitted
// as that token without merging, as Hugging Face's `ignore_merges` does.
//
// Tokens marked not producible (control and user-defined tokens) are never the result of a
// merge or of the whole-piece lookup, so they come only from literal special-token matching.
//
// Thread safety: immutable after build(); encode_piece may run on many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"
#include "tokenizer/flat_tables.h"

namespace kvstash::tokenizer {

using TokenId = std::int32_t;

class BpeModel {
 public:
  // Move-only (a copy would duplicate a whole vocabulary by accident).
  BpeModel(BpeModel&&) = default;
  BpeModel& operator=(BpeModel&&) = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // tokens[id]: the token's text as the vocabulary stores it. merges: "left right", rank = index.
  // producible[id] (same size as tokens): whether BPE may emit id. Merges naming a token that
  // does not exist are skipped (counted in skipped_merges()). A byte without a token encodes to
  // nothing (vocabularies drop bytes that never occur in UTF-8). kCorrupt when the sizes disagree.
  static Expected<BpeModel> build(std::vector<std::string> tokens,
                                  const std::vector<std::string>& merges,
                                  std::vector<bool> producible, bool ignore_merges, bool utf8_units = false);

  // Appends the ids of one piece of raw bytes (any bytes; not necessarily valid UTF-8).
  void encode_piece(std::string_view bytes, std::vector<TokenId>* out) const;

  // The id whose stored text is exactly `text`, if any (any token type).
  std::optional<TokenId> find(std::string_view text) const;
  const std::string& token_text(TokenId id) const { return tokens_[static_cast<std::size_t>(id)]; }
  std::size_t size() const { return tokens_.size(); }
  std::size_t merge_count() const { return merges_.size(); }
  std::size_t skipped_merges() const { return skipped_merges_; }

 private:
  struct Merge {
    std::uint32_t rank;
    TokenId result;
  };
  static std::uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  static constexpr TokenId kMissingByte = -2;  // a byte without a token (never merged, not emitted)
  static constexpr TokenId kMissingChar = -3;  // utf8_units: a character without a token (its bytes' fallbacks)
  BpeModel() = default;
  const Merge* find_merge(TokenId left, TokenId right) const;

  std::vector<std::string> tokens_;
  std::vector<bool> producible_;
  TokenIndex index_;  // over tokens_
  PairTable<Merge> merges_;
  std::array<TokenId, 256> byte_token_{};
  bool ignore_merges_ = false;
  bool utf8_units_ = false;  // byte_token_ then holds the "<0xXX>" fallback tokens
  std::size_t skipped_merges_ = 0;
};

}  // namespace kvstash::tokenizer
