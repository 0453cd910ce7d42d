#include "engine/speculative.h"

#include <algorithm>
#include <string>

namespace kvstash {

namespace {
constexpr int kMaxDraftLimit = 64;  // verification rows per sequence; past this a draft is a prefill
}  // namespace

Status validate_speculative(const SpeculativeOptions& o) {
  if (o.draft != DraftKind::kModel && o.draft_model != nullptr) {
    return invalid_argument("a draft_model is given (--model-draft) but the speculative drafter is not the draft model");
  }
  if (o.draft == DraftKind::kNone) return Status::ok();
  if (o.max_draft < 1 || o.max_draft > kMaxDraftLimit) {
    return invalid_argument("speculative max_draft is " + std::to_string(o.max_draft) + "; it must be 1.." +
                            std::to_string(kMaxDraftLimit));
  }
  if (o.min_ngram < 1 || o.max_ngram < o.min_ngram) {
    return invalid_argument("speculative n-gram lengths must satisfy 1 <= min_ngram (" + std::to_string(o.min_ngram) +
                            ") <= max_ngram (" + std::to_string(o.max_ngram) + ")");
  }
  if (o.draft == DraftKind::kModel && o.draft_model == nullptr) {
    return invalid_argument("speculative drafter is the draft model, but no draft_model is given (--model-draft)");
  }
  if (o.draft_kv_tokens < 0) {
    return invalid_argument("speculative draft_kv_tokens is " + std::to_string(o.draft_kv_tokens) + "; it must be 0 (default) or more");
  }
  if (o.max_decoders < 1) {
    return invalid_argument("speculative max_decoders is " + std::to_string(o.max_decoders) + "; it must be at least 1");
  }
  return Status::ok();
}

int ngram_draft(std::span<const TokenId> tokens, int min_ngram, int max_ngram, int max_tokens, std::vector<TokenId>& draft) {
  const int size = static_cast<int>(tokens.size());
  if (max_tokens <= 0) return 0;
  for (int n = std::min(max_ngram, size - 1); n >= min_ngram; --n) {
    const TokenId* pattern = tokens.data() + (size - n);
    // Most recent occurrence first: it is the likeliest to continue the same way.
    for (int start = size - n - 1; start >= 0; --start) {
      if (!std::equal(pattern, pattern + n, tokens.data() + start)) continue;
      const std::size_t first = draft.size();
      for (int j = 0; j < max_tokens; ++j) {
        const int from = start + n + j;  // may run past the tokens into what this draft appended
        draft.push_back(from < size ? tokens[static_cast<std::size_t>(from)] : draft[first + static_cast<std::size_t>(from - size)]);
      }
      return max_tokens;
    }
  }
  return 0;
}

int SpecState::length(int max_draft) {
  if (off) return 0;
  if (backoff > 0) {
    --backoff;
    if (backoff == 0) k = 1;  // a retry with one token
    return 0;
  }
  return std::min(k, max_draft);
}

void SpecState::update(int drafted, int accepted, int max_draft, int give_up_after) {
  if (drafted <= 0) return;
  // A retry is the one-token draft after a back-off (next_backoff has grown past its start).
  const bool retry = next_backoff > 4 && drafted == 1;
  ever_accepted = ever_accepted || accepted > 0;
  if (accepted == drafted) {
    k = std::min(max_draft, std::max(1, k) * 2);
    next_backoff = 4;
    failed_retries = 0;
  } else if (accepted > 0) {
    k = accepted + 1;
    next_backoff = 4;
    failed_retries = 0;
  } else {
    k /= 2;
    // A draft never accepted gets one retry fewer: each retry first catches the draft up on the
    // back-off's tokens, the last one on the most.
    if (retry && give_up_after > 0 && ++failed_retries >= give_up_after - (ever_accepted ? 0 : 1)) {
      off = true;
      return;
    }
    if (k == 0) {
      backoff = next_backoff;
      next_backoff = std::min(kMaxBackoff, next_backoff * 2);
    }
  }
}

}  // namespace kvstash
