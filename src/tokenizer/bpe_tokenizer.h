// The Tokenizer implementation for byte-level BPE vocabularies (tokenizer.ggml.model "gpt2"):
// special-token split -> pre-tokenizer -> per-piece BPE for encode, and precomputed byte
// pieces for decode. Built by Tokenizer::from_gguf (tokenizer.cc), which reads the metadata.
//
// Token types follow llama.cpp's numbering (tokenizer.ggml.token_type): CONTROL tokens decode
// to "" and, like USER_DEFINED tokens, are matched literally only with parse_special and are
// never produced by BPE.
//
// Thread safety: immutable after construction; every const method may run concurrently.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::tokenizer {

enum class TokenType : std::int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Everything a BpeTokenizer is made of, as read from a file (or written by a test).
struct BpeVocabulary {
  std::vector<std::string> tokens;   // stored text per id (byte-mapped, except special tokens)
  std::vector<TokenType> types;      // same size as tokens; empty means all kNormal
  std::vector<std::string> merges;   // "left right", rank = index
  std::string pre = "default";       // tokenizer.ggml.pre
  TokenId bos_id = -1;
  TokenId eos_id = -1;
  std::vector<TokenId> end_of_generation_ids;  // besides eos (eot, eom, ...)
  std::optional<bool> add_bos;       // unset: true for Llama 3's pre-tokenizer, else false
  std::string chat_template;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // kUnsupported for an unknown pre-tokenizer, kCorrupt for inconsistent vocabulary data.
  static Expected<std::unique_ptr<BpeTokenizer>> create(BpeVocabulary vocab);

  std::vector<TokenId> encode(std::string_view text, bool parse_special) const override;
  std::vector<TokenId> encode_with_plain_spans(std::string_view text, const std::vector<TextSpan>& plain) const override;
  bool contains_special(std::string_view text) const override { return specials_.find(text, 0).length != 0; }
  std::string decode(std::span<const TokenId> tokens) const override;
  std::string token_to_piece(TokenId token) const override;
  std::size_t vocab_size() const override { return model_.size(); }
  TokenId bos_id() const override { return bos_id_; }
  TokenId eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  bool is_end_of_generation(TokenId token) const override { return end_of_generation_.count(token) != 0; }
  std::optional<TokenId> find_token(std::string_view text) const override { return model_.find(text); }
  std::string token_text(TokenId token) const override {
    return token >= 0 && static_cast<std::size_t>(token) < model_.size() ? model_.token_text(token) : std::string();
  }
  const std::string& pre_tokenizer() const override { return pre_; }
  const std::string& chat_template() const override { return chat_template_; }

 private:
  BpeTokenizer(BpeModel model) : model_(std::move(model)) {}
  // Encodes text that holds no special token to be matched.
  void encode_plain(std::string_view text, std::vector<TokenId>* out) const;

  BpeModel model_;
  PreTokenizerKind pre_kind_ = PreTokenizerKind::kGpt2;
  SpecialTokenMatcher specials_;
  std::vector<std::string> pieces_;  // decoded bytes per id
  std::unordered_set<TokenId> end_of_generation_;
  std::string pre_;
  std::string chat_template_;
  TokenId bos_id_ = -1;
  TokenId eos_id_ = -1;
  bool add_bos_ = false;
};

}  // namespace kvstash::tokenizer
