// Tokenizers read from GGUF metadata (tokenizer.ggml.*): byte-level BPE (Llama 3, Qwen2, GPT-2,
// DeepSeek, Falcon, StarCoder, Command R, MPT, ...) and SentencePiece (Llama 2, Mistral 7B,
// TinyLlama, Phi-3).
//
// Reads: tokenizer.ggml.model ("gpt2" = byte-level BPE, "llama" = SentencePiece; anything else
// is kUnsupported), tokenizer.ggml.pre (BPE pre-tokenizer by name, see pre_tokenizer.h; an
// unknown name is kUnsupported with the list of known ones), tokenizer.ggml.tokens,
// tokenizer.ggml.token_type, tokenizer.ggml.merges (BPE), tokenizer.ggml.scores (SentencePiece),
// tokenizer.ggml.{bos,eos,eot,eom}_token_id, tokenizer.ggml.add_bos_token,
// tokenizer.ggml.add_space_prefix (SentencePiece), tokenizer.chat_template.
//
// Thread safety: immutable after construction; encode/decode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "kvstash/status.h"
#include "tokenizer/special_tokens.h"

namespace kvstash {

using TokenId = std::int32_t;
using tokenizer::TextSpan;

class Tokenizer {
 public:
  // Builds the tokenizer from a GGUF file's metadata (a model or a vocabulary-only file).
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);
  virtual ~Tokenizer() = default;

  // Text to token ids, never adding BOS. With parse_special, special/control tokens written
  // literally in the text (e.g. "<|im_start|>") become their ids; without, they are plain text.
  virtual std::vector<TokenId> encode(std::string_view text, bool parse_special) const = 0;
  // encode(text, true), except that inside the `plain` spans (sorted, not overlapping) special
  // tokens are not matched: they are encoded as encode(.., false) would. The text is cut only at
  // the special tokens outside the spans, so where the spans hold none the ids are encode(text,
  // true)'s. Chat prompts use it: the template's markup becomes control tokens, a user's
  // "<|im_end|>" in a message stays text. This default encodes the pieces separately (exact for
  // the tokenizers here, which override it, up to merges across a span's edge).
  virtual std::vector<TokenId> encode_with_plain_spans(std::string_view text, const std::vector<TextSpan>& plain) const;
  // Whether encode(text, true) would match a special token that encode(text, false) does not: when
  // no plain span holds one, encode_with_plain_spans(text, spans) is encode(text, true) (callers
  // with a cache of the latter use it). The default compares the two encodings.
  virtual bool contains_special(std::string_view text) const { return encode(text, true) != encode(text, false); }
  // Token ids to UTF-8 bytes (control tokens such as BOS render as nothing; invalid ids too).
  virtual std::string decode(std::span<const TokenId> tokens) const = 0;
  // One token's bytes (may be part of a UTF-8 character). Control tokens give "".
  virtual std::string token_to_piece(TokenId token) const = 0;

  virtual std::size_t vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;    // -1 when the vocabulary has none
  virtual TokenId eos_id() const = 0;    // -1 when none
  virtual bool add_bos() const = 0;      // whether prompts should start with BOS
  // End of generation: eos, eot (<|eot_id|>, <|im_end|>, <|endoftext|>, ...).
  virtual bool is_end_of_generation(TokenId token) const = 0;
  // A token's text as the vocabulary stores it (control tokens too: "<s>", "<|im_start|>"), for
  // chat templates' bos_token / eos_token; "" for an invalid id.
  virtual std::string token_text(TokenId token) const = 0;
  // The exact id of a token's text (e.g. "<|im_start|>"), if present.
  virtual std::optional<TokenId> find_token(std::string_view text) const = 0;
  virtual const std::string& pre_tokenizer() const = 0;
  virtual const std::string& chat_template() const = 0;  // "" when the file has none
};

// Text to ids the way prompts and `kvstash tokenize` / the server's POST /tokenize do it: BOS
// first when add_special and the vocabulary asks for one, then encode(text, parse_special).
std::vector<TokenId> tokenize(const Tokenizer& tokenizer, std::string_view text, bool add_special, bool parse_special);

}  // namespace kvstash
