// Speculative decoding: a decoding sequence's step verifies a few drafted tokens besides its own,
// so one read of the weights can give several tokens.
//
// The drafter here is prompt lookup (n-gram): the sequence's last n tokens (n from max_ngram down
// to min_ngram) are looked for earlier in its own prompt and output, most recent occurrence first,
// and the tokens that followed them there are the draft. No second model; strong where the output
// copies spans of the prompt (summaries, quotes, code edits) or repeats itself.
//
// Verification (engine.cc, verify_draft): the step computes logits for the sequence's next token
// and for each drafted token; the sampler picks the token after each row exactly as it would
// without a draft (same knobs, same grammar state, same seeded generator), and the run continues
// while the picked token equals the draft's. Every emitted token is thus the token plain decoding
// emits: greedy and seeded sampling give the same output with and without speculation. (With a
// deterministic drafter the draft's distribution is a point mass; the textbook rule — accept t with
// probability p(t), else draw from p without t, renormalised — gives each token the law p, as this
// does; this one also keeps the seed's output.) The KV of rejected drafted tokens is dropped
// (num_computed_tokens and num_slots only cover accepted tokens, blocks that held only rejected
// ones go back to the pool), so the prefix cache and the store only ever see accepted tokens.
//
// Adaptive length (SpecState): each sequence starts at kFirstDraft tokens (a failed draft costs
// its rows: start small); a fully accepted draft doubles the length up to max_draft, a partly
// accepted one sets it to what was accepted plus one, a rejected one halves it; at 0 the sequence
// stops drafting for a back-off that doubles with each failed retry (up to kMaxBackoff steps),
// then retries with one token. A drafter whose drafts cost more than a lookup (a draft model must
// catch up on every token it did not see, so each retry after a long back-off costs a prefill of
// the tokens between) gives `give_up_after` consecutive failed retries a chance: after them the
// sequence stops drafting for good, and its draft KV is released (the issue's "speculation
// switched off for a sequence"; near-zero acceptance then costs the few failed drafts only).
//
// Thread safety: plain functions and values, owned by the engine thread.
#pragma once

#include <span>
#include <vector>

#include "engine/engine.h"
#include "kvstash/status.h"

namespace kvstash {

// kInvalidArgument naming the field when the options are out of range (only checked when a
// drafter is chosen).
Status validate_speculative(const SpeculativeOptions& o);

// Appends to `draft` up to max_tokens tokens that followed the most recent earlier occurrence of
// the last n tokens of `tokens` (n = max_ngram down to min_ngram; the first n that occurs wins).
// The continuation may run into the draft itself (a loop of period p drafts the loop on). Returns
// how many were appended (0: no n-gram occurs earlier, or max_tokens <= 0).
int ngram_draft(std::span<const TokenId> tokens, int min_ngram, int max_ngram, int max_tokens, std::vector<TokenId>& draft);

// One sequence's draft length, adapted to how much of its drafts it accepts.
struct SpecState {
  static constexpr int kFirstDraft = 2;   // the first draft's length at most
  static constexpr int kMaxBackoff = 64;  // steps without a draft at most after repeated rejections
  // A draft model's give_up_after (one fewer for a sequence none of whose drafted tokens was ever
  // accepted: 0.93x -> 0.97x of plain decoding with a Q4_0 0.5B draft of other weights, whose
  // drafts the target never took, while the target's own Q4_0 copy kept its 65 % acceptance on
  // the copying workload): its first retries come after 4 and 8 steps, so a sequence it
  // cannot draft for stops within about its first 20 tokens (bench-engine --draft model,
  // no-acceptance workload: 0.86-0.94x of plain decoding with retries to the end, the catch-ups of
  // the back-offs' tokens being most of the loss).
  static constexpr int kModelGiveUpAfter = 3;
  int k = kFirstDraft;  // the next draft's length at most (capped by max_draft)
  int backoff = 0;   // steps left without drafting
  int next_backoff = 4;
  int failed_retries = 0;  // consecutive retries (one-token drafts after a back-off) rejected
  bool ever_accepted = false;  // some drafted token of this sequence was accepted
  bool off = false;        // given up: no more drafts for this sequence
  // The target's recent top probability (an average over about the last 4 tokens; < 0 before
  // the first): a one-token draft is accepted with at most that probability, whoever drafts it,
  // so while it stays under kMinTopProbability (sampling from a flat distribution: a high
  // temperature) the sequence does not draft. Greedy picks count 1.
  double top_probability = -1;
  static constexpr double kMinTopProbability = 0.3;
  void observe(double top_p) { top_probability = top_probability < 0 ? top_p : 0.75 * top_probability + 0.25 * top_p; }
  bool flat() const { return top_probability >= 0 && top_probability < kMinTopProbability; }
  // The draft length to try this step (0 = skip it); counts the back-off down.
  int length(int max_draft);
  // After a verified draft of `drafted` tokens of which `accepted` were kept. give_up_after > 0:
  // that many consecutive failed retries switch drafting off for good (0: never).
  void update(int drafted, int accepted, int max_draft, int give_up_after = 0);
};

}  // namespace kvstash
