// `kvstash bench-engine --draft ngram` (or `--draft model --model-draft F`): batch-1 decode tokens/s with speculative decoding against
// plain decoding, both in this process, on two workloads (engine/speculative.h):
//   - copying: the answer repeats a span of the prompt. A generated model has random weights and
//     copies nothing when asked to, but its greedy output soon loops; so the prompt is a passage P
//     and G, the model's own greedy continuation of P (2 x --decode-tokens tokens), and the timed
//     output is the next --decode-tokens tokens of that continuation, which repeat spans of G as
//     far as the loop goes. The acceptance rate says how far: it is reported, not assumed (the
//     run also checks the output is the same with and without speculation).
//   - greedy (--draft model only, besides the others): the passage alone as the prompt, greedy;
//     the acceptance is how often the draft model's greedy token is the target's before the
//     output loops (on copying, both models are in the target's loop).
//   - no acceptance: a prompt drawn from 48 tokens in random order and an output sampled among
//     them alone (every other token banned by logit_bias, temperature 1000, a fixed seed), so
//     every last token occurred before (a draft is always found) and a draft continues the output
//     about 1 time in 48: what failed drafts cost, and what the adaptive draft length saves of it.
// Prints a table, or one JSON object with --json.
//
// Thread safety: called once from bench_engine_main.
#pragma once

#include <string>

#include "engine/engine.h"
#include "model/model.h"

namespace kvstash::cli {

// The process exit code: 0, or 1 with the error on stderr (also when speculation changed an
// output, which would be a bug).
// `passage`: the passage's text (empty: the built-in one).
int bench_engine_spec(const Model& model, const SpeculativeOptions& spec, int decode_tokens, int repeats, int n_threads,
                      bool json, const std::string& passage = "");

}  // namespace kvstash::cli
