// The Tokenizer implementation for SentencePiece vocabularies (tokenizer.ggml.model "llama":
// Llama 2, Mistral 7B, TinyLlama, Phi-3), as GGUF files carry them: token texts with "▁"
// (U+2581) standing for a space, a score per token, token types, and byte tokens "<0x00>" ..
// "<0xFF>" for bytes no token covers (byte fallback).
//
// encode: special tokens are cut out first (control tokens with parse_special, user-defined
// tokens always, as SentencePiece treats them as part of the vocabulary's text); each piece of
// text between them gets a leading space when add_space_prefix and it starts the text or follows
// a special token, has its spaces replaced by "▁", and is split into UTF-8 characters; then the
// adjacent pair whose concatenation is the highest-scoring token (leftmost on ties) is merged,
// repeatedly. A merged symbol is a token by construction; a single char that is none is emitted
// byte by byte as byte tokens.
//
// decode: "▁" becomes a space, byte tokens their byte, control tokens nothing; with
// add_space_prefix the one space that encode put in front of the text is dropped again.
//
// Thread safety: immutable after construction; every const method may run concurrently.
#pragma once

#include <array>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::tokenizer {

struct SpmVocabulary {
  std::vector<std::string> tokens;  // texts with "▁" for spaces; byte tokens as "<0xAB>"
  std::vector<float> scores;        // same size as tokens; higher merges first
  std::vector<TokenType> types;     // same size as tokens; empty means all kNormal
  TokenId bos_id = -1;
  TokenId eos_id = -1;
  std::vector<TokenId> end_of_generation_ids;  // besides eos
  bool add_bos = true;               // tokenizer.ggml.add_bos_token (SentencePiece default: true)
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix
  std::string chat_template;
};

class SpmTokenizer final : public Tokenizer {
 public:
  // kCorrupt when sizes disagree or a special id is out of range.
  static Expected<std::unique_ptr<SpmTokenizer>> create(SpmVocabulary vocab);

  std::vector<TokenId> encode(std::string_view text, bool parse_special) const override;
  std::vector<TokenId> encode_with_plain_spans(std::string_view text, const std::vector<TextSpan>& plain) const override;
  // Control tokens only: user-defined ones are matched in plain text too.
  bool contains_special(std::string_view text) const override { return control_.find(text, 0).length != 0; }
  std::string decode(std::span<const TokenId> tokens) const override;
  std::string token_to_piece(TokenId token) const override;
  std::size_t vocab_size() const override { return tokens_.size(); }
  TokenId bos_id() const override { return bos_id_; }
  TokenId eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  bool is_end_of_generation(TokenId token) const override { return end_of_generation_.count(token) != 0; }
  std::optional<TokenId> find_token(std::string_view text) const override;
  std::string token_text(TokenId token) const override {
    return token >= 0 && static_cast<std::size_t>(token) < tokens_.size() ? tokens_[static_cast<std::size_t>(token)] : std::string();
  }
  const std::string& pre_tokenizer() const override { return pre_; }
  const std::string& chat_template() const override { return chat_template_; }

 private:
  SpmTokenizer() = default;
  // Appends the ids of one piece of text (spaces already "▁"), word by word when that is exact.
  void encode_piece(std::string_view text, std::vector<TokenId>* out) const;
  // Encodes `text` cut at `specials` (in text order).
  std::vector<TokenId> encode_split(std::string_view text, const std::vector<SpecialTokenMatcher::Match>& specials) const;
  // The merge loop over one piece.
  void merge_chunk(std::string_view text, std::vector<TokenId>* out) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, TokenId> index_;     // all tokens, views into tokens_
  std::unordered_map<std::string_view, TokenId> mergeable_;  // tokens a merge may produce
  std::array<TokenId, 256> byte_token_{};                    // -1 where the vocabulary has none
  SpecialTokenMatcher control_;       // control tokens (matched with parse_special)
  SpecialTokenMatcher user_defined_;  // user-defined tokens (always matched)
  SpecialTokenMatcher all_specials_;  // both
  std::vector<std::string> pieces_;   // decoded bytes per id
  std::unordered_set<TokenId> end_of_generation_;
  std::string pre_ = "default";
  std::string chat_template_;
  TokenId bos_id_ = -1;
  TokenId eos_id_ = -1;
  TokenId unknown_id_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
  // No mergeable token holds "▁" after another char, so merges never cross a word's start.
  bool words_are_independent_ = true;
};

}  // namespace kvstash::tokenizer
