// The part of the response cache's keys (exact and semantic) that the sampling knobs of issue 33
// contribute: logit_bias, the penalties and their window, min_p, typical_p, top_n_sigma and the grammar's key
// (the canonical schema text). A request that sets none of them adds nothing, so the keys of
// requests without them are those of before (records stored then still hit). Otherwise the key
// gets a domain tag and every field, in a fixed order, floats as their bit patterns.
//
// Thread safety: pure functions.
#pragma once

#include "common/sha256.h"
#include "engine/engine.h"

namespace kvstash::server {

// Whether any knob above differs from its default (off).
bool has_sampling_knobs(const SamplingParams& s);
// Hashes the knobs into `h` (nothing when has_sampling_knobs(s) is false).
void hash_sampling_knobs(Sha256& h, const SamplingParams& s);

}  // namespace kvstash::server
