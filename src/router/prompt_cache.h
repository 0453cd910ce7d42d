// A cache of tokenized conversation prefixes, so that the router does not re-tokenize a whole
// conversation on each turn. Turn N+1 of a chat renders to turn N's text (up to its last
// end-of-turn token) followed by the new messages: the cache maps the hash (XXH3-128) of a
// rendered prefix that ends right after an end-of-turn token ("<|im_end|>", "<|eot_id|>", ...: the
// tokenizer's end-of-generation tokens) to that prefix's tokens, and encode() tokenizes only what
// follows the longest cached prefix.
//
// Exact, not approximate: a byte-level BPE tokenizer with parse_special cuts the text at special
// tokens and encodes the pieces between them independently (tokenizer/bpe_tokenizer.cc), so the
// tokens of a text cut right after a special token are the tokens of the prefix followed by those
// of the rest. SentencePiece adds a space in front of the text's first piece only, so for it (and
// for a vocabulary without end-of-generation token texts) the cache is off and encode() is the
// tokenizer's. The constructor also checks the rule on a sample text and turns the cache off if
// it does not hold.
//
// CachingTokenizer is a Tokenizer whose encode(text, parse_special = true) goes through the cache:
// the server's prompt builder (server/prompt_builder.h) takes it as it is.
//
// Thread safety: encode() from any thread (one mutex around the map, never held while
// tokenizing); the counters are atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvstash::router {

class PrefixTokenCache {
 public:
  // max_tokens: tokens kept over all entries (least recently used dropped first); 0 = off.
  PrefixTokenCache(const Tokenizer& tokenizer, std::size_t max_tokens);

  bool enabled() const { return enabled_; }
  // tokenizer.encode(text, /*parse_special=*/true), reusing the longest cached prefix.
  std::vector<TokenId> encode(std::string_view text);

  struct Stats {
    std::uint64_t lookups = 0, hits = 0;
    std::uint64_t tokens_reused = 0;  // tokens taken from the cache instead of tokenized
    std::size_t entries = 0, tokens_held = 0;
  };
  Stats stats() const;

 private:
  struct Hash128 {
    std::uint64_t lo = 0, hi = 0;
    bool operator==(const Hash128&) const = default;
  };
  struct Hash128Hasher {
    std::size_t operator()(const Hash128& h) const { return static_cast<std::size_t>(h.lo); }
  };
  struct Entry {
    Hash128 key;
    std::size_t text_bytes = 0;
    std::shared_ptr<const std::vector<TokenId>> tokens;
  };
  std::vector<TokenId> encode_uncached(std::string_view text) const;
  void insert(const Hash128& key, std::size_t text_bytes, std::shared_ptr<const std::vector<TokenId>> tokens);

  const Tokenizer& tokenizer_;
  const std::size_t max_tokens_;
  std::vector<std::string> delimiters_;  // end-of-generation token texts
  bool enabled_ = false;

  mutable std::mutex mu_;
  std::list<Entry> lru_;  // guarded by mu_; most recently used first
  std::unordered_map<Hash128, std::list<Entry>::iterator, Hash128Hasher> map_;  // guarded by mu_
  std::size_t tokens_held_ = 0;  // guarded by mu_
  std::atomic<std::uint64_t> lookups_{0}, hits_{0}, tokens_reused_{0};
};

// A Tokenizer that is `inner` except that encode(text, true) goes through `cache`. Both must
// outlive it.
class CachingTokenizer final : public Tokenizer {
 public:
  CachingTokenizer(const Tokenizer& inner, PrefixTokenCache& cache) : inner_(inner), cache_(cache) {}
  std::vector<TokenId> encode(std::string_view text, bool parse_special) const override {
    return parse_special && cache_.enabled() ? cache_.encode(text) : inner_.encode(text, parse_special);
  }
  // A chat prompt whose content holds no special-token text is encode(text, true): through the
  // cache. Content that does goes to the tokenizer as it is (rare, and never cached). The router
  // tokenizes for routing only (the worker tokenizes what it runs), so a special token that
  // would straddle a span's edge costs at most affinity, never an answer.
  std::vector<TokenId> encode_with_plain_spans(std::string_view text, const std::vector<TextSpan>& plain) const override {
    for (const TextSpan& span : plain) {
      if (span.offset <= text.size() && inner_.contains_special(text.substr(span.offset, span.length))) {
        return inner_.encode_with_plain_spans(text, plain);
      }
    }
    return encode(text, /*parse_special=*/true);
  }
  bool contains_special(std::string_view text) const override { return inner_.contains_special(text); }
  std::string decode(std::span<const TokenId> tokens) const override { return inner_.decode(tokens); }
  std::string token_to_piece(TokenId token) const override { return inner_.token_to_piece(token); }
  std::size_t vocab_size() const override { return inner_.vocab_size(); }
  TokenId bos_id() const override { return inner_.bos_id(); }
  TokenId eos_id() const override { return inner_.eos_id(); }
  bool add_bos() const override { return inner_.add_bos(); }
  bool is_end_of_generation(TokenId token) const override { return inner_.is_end_of_generation(token); }
  std::string token_text(TokenId token) const override { return inner_.token_text(token); }
  std::optional<TokenId> find_token(std::string_view text) const override { return inner_.find_token(text); }
  const std::string& pre_tokenizer() const override { return inner_.pre_tokenizer(); }
  const std::string& chat_template() const override { return inner_.chat_template(); }

 private:
  const Tokenizer& inner_;
  PrefixTokenCache& cache_;
};

}  // namespace kvstash::router
