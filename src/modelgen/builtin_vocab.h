// A small byte-level BPE vocabulary, in the standard GGUF "gpt2" tokenizer form, for synthetic
// models that are not given a real vocabulary file.
//
// Tokens: the 256 byte tokens (token id = byte value) spelled with GPT-2's bytes-to-unicode map,
// then the merged tokens learnt by BPE training on an English text embedded in builtin_vocab.cc
// (deterministic: the most frequent pair wins, ties go to the lexicographically smallest pair),
// then the architecture's special tokens, then `<|unused_N|>` padding up to a requested size.
//
// Thread safety: the trained merges are computed once (function-local static) and immutable.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "kvstash/status.h"

namespace kvstash::modelgen {

inline constexpr int kBuiltinMerges = 250;  // enough for common English words to become one token

// GPT-2's bytes-to-unicode spelling of one byte, as UTF-8 (' ' -> "Ġ", 'a' -> "a").
std::string byte_token(std::uint8_t byte);

// The merge rules, in rank order, as "left right" strings of byte-token spellings.
const std::vector<std::string>& builtin_merges();

// The vocabulary's size for `arch` ("qwen2" or "llama"; "qwen3" and "qwen3moe" take qwen2's) before padding.
std::uint64_t builtin_vocab_size(const std::string& arch);

// The tokenizer.* metadata for `arch`, padded with unused tokens to `n_vocab` tokens
// (n_vocab 0 or below the natural size: no padding). kUnsupported for another arch.
Expected<std::vector<std::pair<std::string, gguf::Value>>> builtin_tokenizer_metadata(const std::string& arch,
                                                                                    std::uint64_t n_vocab);

}  // namespace kvstash::modelgen
