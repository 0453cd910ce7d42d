// Constrained decoding over a tokenizer's vocabulary: which tokens may come next so that the
// output stays a prefix of a sentence of a grammar, fast enough to run before every sampled token
// of a 150k–260k-token vocabulary.
//
// How (our own design, in the spirit of GBNF's stack-based matchers and of lazily built DFAs):
//   - A matcher position is a stack of frames (rule, alternative, position, parent), interned so
//     that a stack is one 32-bit id. A call in tail position reuses its caller's parent, so the
//     right recursion that GrammarBuilder::repeat writes never deepens the stack.
//   - A state is the set of stacks the bytes so far may be in, also interned. Its transition on a
//     byte is computed once and kept (a DFA built lazily, one 256-entry row per state).
//   - The vocabulary is a byte trie of every token, built once per model (TokenVocabulary). A
//     state's mask is one walk of the trie that follows the DFA and prunes every subtree whose
//     prefix is dead; it is kept per state, so a state seen again (every string character, every
//     repeated key) costs a copy of the bitmask.
// The DFA and the masks live in the CompiledGrammar, shared by every request of the same schema
// (grammar_cache.h), so later requests start warm. A request's own state is one int.
//
// Bounds: a compiled grammar holds at most Options::max_states states (a grammar whose states
// grow with the depth of its input, such as nested arrays, can reach it on adversarial output):
// past it, allowed_tokens and advance fail with kResourceExhausted, and the request ends with
// that error rather than an unchecked token. Masks are dropped, all at once, when they pass
// Options::max_mask_bytes (they are recomputed on demand).
//
// Thread safety: TokenVocabulary is immutable. CompiledGrammar's methods are safe from any thread
// (one mutex inside; the engine thread is the only caller in the server).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "kvstash/status.h"

namespace kvstash::grammar {

using TokenIndex = std::int32_t;  // a token id (the tokenizer's TokenId)
using MatcherState = std::int32_t;

class TokenVocabulary {
 public:
  // token_bytes[i]: the bytes token i stands for ("" for control tokens, which no grammar
  // allows). end_of_generation: the tokens that end a generation (EOS, EOT, ...).
  static std::shared_ptr<const TokenVocabulary> create(std::vector<std::string> token_bytes,
                                                       std::vector<TokenIndex> end_of_generation);
  std::size_t size() const { return token_bytes_.size(); }
  const std::string& bytes(TokenIndex t) const { return token_bytes_[static_cast<std::size_t>(t)]; }
  const std::vector<TokenIndex>& end_of_generation() const { return end_of_generation_; }
  std::size_t trie_nodes() const { return first_child_.size(); }

 private:
  friend class CompiledGrammar;
  std::vector<std::string> token_bytes_;
  std::vector<TokenIndex> end_of_generation_;
  // The trie, node 0 the root; the children of node n are child_[first_child_[n], first_child_[n+1])
  // with their bytes in child_byte_; the tokens that end at n are tokens_[first_token_[n], first_token_[n+1]).
  std::vector<std::uint32_t> first_child_;
  std::vector<std::uint32_t> child_;
  std::vector<std::uint8_t> child_byte_;
  std::vector<std::uint32_t> first_token_;
  std::vector<TokenIndex> tokens_;
};

struct CompiledGrammarOptions {
  std::size_t max_states = std::size_t{1} << 15;        // DFA states (about 1 KiB each); default 32,768
  std::size_t max_mask_bytes = std::size_t{32} << 20;  // cached masks (19 KiB each at 151,936 tokens); default 32 MiB
};

struct CompiledGrammarStats {
  std::size_t states = 0;
  std::size_t frames = 0;
  std::size_t cached_masks = 0;
  std::size_t mask_walks = 0;  // masks computed by a trie walk (the rest were cached)
};

class CompiledGrammar {
 public:
  // Errors: kInvalidArgument when grammar.check() fails.
  static Expected<std::shared_ptr<CompiledGrammar>> create(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                                                           std::string key, const CompiledGrammarOptions& options = {});

  // What identifies the constraint (the canonical schema text): the response cache hashes it.
  const std::string& key() const { return key_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  const Grammar& grammar() const { return grammar_; }
  MatcherState initial_state() const { return initial_; }

  // Fills `mask` (bit t of word t / 64, one bit per vocabulary token) with the tokens whose bytes
  // keep the output a prefix of a sentence. End tokens are never in it (see accepts()).
  // Errors: kResourceExhausted (state table full), kInvalidArgument (not a live state).
  Status allowed_tokens(MatcherState state, std::vector<std::uint64_t>& mask) const;
  // The output so far is a whole sentence (an end token may come now).
  bool accepts(MatcherState state) const;
  // The state after `token`'s bytes. Errors: kInvalidArgument (the token leaves the grammar),
  // kResourceExhausted (state table full).
  Expected<MatcherState> advance(MatcherState state, TokenIndex token) const;
  // The same over raw bytes (tests, benchmarks).
  Expected<MatcherState> advance_bytes(MatcherState state, std::string_view bytes) const;

  CompiledGrammarStats stats() const;

 private:
  CompiledGrammar() = default;
  struct Frame {
    std::uint32_t parent, rule, alt, pos;
    bool operator==(const Frame&) const = default;
  };
  struct FrameHash {
    std::size_t operator()(const Frame& f) const;
  };
  struct VecHash {
    std::size_t operator()(const std::vector<std::uint32_t>& v) const;
  };
  struct State {
    std::vector<std::uint32_t> stacks;  // top frame ids, sorted; 0 = the empty stack (accepted)
    bool accepts = false;
    std::unique_ptr<std::int32_t[]> next;  // 256 entries once the first is needed; kUnknown until computed
    std::shared_ptr<const std::vector<std::uint64_t>> mask;
  };
  static constexpr std::int32_t kUnknown = -2;
  static constexpr std::int32_t kDead = -1;

  std::uint32_t frame(std::uint32_t parent, std::uint32_t rule, std::uint32_t alt, std::uint32_t pos) const;
  void expand(std::uint32_t frame_id, std::vector<std::uint32_t>& out) const;
  void continue_after(std::uint32_t top, std::vector<std::uint32_t>& out) const;
  std::int32_t intern_state(std::vector<std::uint32_t> stacks) const;
  std::int32_t step(std::int32_t state, std::uint8_t byte) const;  // kDead, or a state; throws nothing
  Status walk_mask(std::int32_t state, std::vector<std::uint64_t>& mask) const;
  Status check_state(MatcherState state) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::string key_;
  CompiledGrammarOptions options_;
  MatcherState initial_ = 0;

  mutable std::mutex mu_;  // guards everything below
  mutable std::vector<Frame> frames_;  // frames_[0] is the bottom (no frame)
  mutable std::unordered_map<Frame, std::uint32_t, FrameHash> frame_ids_;
  mutable std::vector<std::vector<std::uint32_t>> expansions_;  // per frame, once computed
  mutable std::vector<bool> expanded_;
  mutable std::vector<State> states_;
  mutable std::unordered_map<std::vector<std::uint32_t>, std::int32_t, VecHash> state_ids_;
  mutable bool full_ = false;  // the state table reached max_states
  mutable std::size_t mask_bytes_ = 0;
  mutable std::size_t mask_walks_ = 0;
};

}  // namespace kvstash::grammar
