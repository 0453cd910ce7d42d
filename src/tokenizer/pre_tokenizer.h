// Pre-tokenizers: the regex splits that byte-level BPE tokenizers apply before merging, so that
// merges never cross a word, number or punctuation boundary.
//
// Each kind reproduces its regexes exactly (leftmost match, alternatives in order, greedy with
// backtracking), hand-written over classified code points because std::regex has no \p{...}.
// Single-regex kinds:
//
//   kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//            | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2:  as kLlama3 but \p{N} (one digit per piece)
//   kQwen35: as kQwen2 but letters are [\p{L}\p{M}] (marks join words) and the punctuation run
//            excludes \p{M}
//   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Multi-stage kinds apply a sequence of regexes as GGUF writers define them for those
// tokenizers: each stage splits every piece of the previous one into its matches and the text
// between matches (which stays a piece of its own), and a stage sees only its piece:
//
//   kDigitsGpt2 (starcoder, refact, command-r, smollm, ...): \p{N} | the GPT-2 regex
//   kFalcon:        [\p{P}\$\+<=>\^~\|`]+ | the GPT-2 regex | [0-9][0-9][0-9]
//   kDeepseekCoder: [\r\n] | \s?\p{L}+ | \s?\p{P}+ | [一-龥ࠀ-一가-퟿]+ | \p{N}
//   kDeepseekLlm:   [\r\n] | \s?CASED+ | \s?[!-/:-~！-／：-～‘-‟　-。]+ | \s+$ | [一-龥ࠀ-一가-퟿]+ | \p{N}+
//                   where CASED is DeepSeek's list of cased-letter ranges, taken here as the
//                   general categories Lu, Ll, Lt (no reference vectors check this one).
//
// Every alternative is matched in time linear in what it scans, and whitespace runs are scanned
// at most twice, so splitting is linear in the text's length.
//
// Thread safety: stateless; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::tokenizer {

enum class PreTokenizerKind {
  kLlama3, kQwen2, kQwen35, kGpt2, kDigitsGpt2, kFalcon, kDeepseekCoder, kDeepseekLlm,
  // Gemma 4 (SentencePiece-style BPE): runs of newlines and runs of anything else, nothing more;
  // the text's spaces are U+2581 by then (bpe_tokenizer.cc).
  kGemma4,
};

// Maps tokenizer.ggml.pre (as GGUF writers spell it, aliases included) to a kind. An unknown
// name is kUnsupported, with a message that lists every known name.
Expected<PreTokenizerKind> pre_tokenizer_kind(std::string_view name);
// Every name pre_tokenizer_kind accepts, in the order it lists them.
std::vector<std::string> known_pre_tokenizer_names();

// Splits `text` into pieces that cover it exactly, in order, and appends them (views into
// `text`) to `pieces`. Invalid UTF-8 bytes are kept, each as its own punctuation-like char.
void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::string_view>* pieces);

}  // namespace kvstash::tokenizer
