// Pre-tokenizers: the regex splits that byte-level BPE tokenizers apply before merging, so that
// merges never cross a word, number or punctuation boundary.
//
// Each kind reproduces one regex exactly (leftmost match, alternatives in order, greedy with
// backtracking), hand-written over classified code points because std::regex has no \p{...}:
//
//   kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//            | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2:  as kLlama3 but \p{N} (one digit per piece)
//   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Every alternative is matched in time linear in what it scans, and whitespace runs are scanned
// at most twice, so splitting is linear in the text's length.
//
// Thread safety: stateless; safe from any thread.
#pragma once

#include <string_view>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::tokenizer {

enum class PreTokenizerKind { kLlama3, kQwen2, kGpt2 };

// Maps tokenizer.ggml.pre to a kind: "llama-bpe", "llama3", "llama-v3" -> kLlama3; "qwen2" ->
// kQwen2; "gpt2", "default" and "" -> kGpt2. Anything else is kUnsupported.
Expected<PreTokenizerKind> pre_tokenizer_kind(std::string_view name);

// Splits `text` into pieces that cover it exactly, in order, and appends them (views into
// `text`) to `pieces`. Invalid UTF-8 bytes are kept, each as its own punctuation-like char.
void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>* pieces);

}  // namespace kvstash::tokenizer
