// Pseudo-English text for benchmark prompts, generated locally from a built-in word list.
//
// The words are common short English words, nearly all of which a Llama or Qwen2 BPE vocabulary
// holds as one token with its leading space, so a text of n words and punctuation marks is about
// n tokens. That approximation is what --input-len means: kvstash bench never needs the server's
// tokenizer, and reads the exact counts back from the server's `usage`.
//
// Thread safety: pure functions; the Rng passed in is the caller's.
#pragma once

#include <string>

#include "bench/rng.h"

namespace kvstash::bench {

// About `approx_tokens` tokens of sentences ("The river holds a small light. ..."), no leading or
// trailing space. 0 gives "".
std::string pseudo_english(Rng& rng, int approx_tokens);

// A question of about `approx_tokens` tokens (at least a handful), ending in "?".
std::string pseudo_question(Rng& rng, int approx_tokens);

// The approximate token count of a text: words plus punctuation marks, the inverse of
// pseudo_english for its output; for other text a rough estimate (never below chars / 6).
int approx_token_count(const std::string& text);

}  // namespace kvstash::bench
