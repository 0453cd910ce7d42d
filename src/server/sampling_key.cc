#include "server/sampling_key.h"

#include <bit>

#include "grammar/token_matcher.h"

namespace kvstash::server {
namespace {

constexpr std::string_view kKnobsDomain = "kvstash-sampling-knobs-v1";

void update_float(Sha256& h, float v) { h.update_u32(std::bit_cast<std::uint32_t>(v)); }

}  // namespace

bool has_sampling_knobs(const SamplingParams& s) {
  const SamplingParams off;
  return !s.logit_bias.empty() || s.presence_penalty != off.presence_penalty ||
         s.frequency_penalty != off.frequency_penalty || s.repetition_penalty != off.repetition_penalty ||
         s.repeat_last_n != off.repeat_last_n || s.min_p != off.min_p || s.typical_p != off.typical_p ||
         s.top_n_sigma != off.top_n_sigma || s.grammar;
}

void hash_sampling_knobs(Sha256& h, const SamplingParams& s) {
  if (!has_sampling_knobs(s)) return;
  h.update(kKnobsDomain);
  h.update_u32(static_cast<std::uint32_t>(s.logit_bias.size()));
  for (const auto& [token, bias] : s.logit_bias) {  // sorted and unique (the request parser)
    h.update_u32(static_cast<std::uint32_t>(token));
    update_float(h, bias);
  }
  update_float(h, s.presence_penalty);
  update_float(h, s.frequency_penalty);
  update_float(h, s.repetition_penalty);
  h.update_u32(static_cast<std::uint32_t>(s.repeat_last_n));
  update_float(h, s.min_p);
  update_float(h, s.typical_p);
  update_float(h, s.top_n_sigma);
  const std::string& grammar = s.grammar ? s.grammar->key() : std::string();
  h.update_u32(s.grammar ? 1 : 0);
  h.update_u32(static_cast<std::uint32_t>(grammar.size()));
  h.update(grammar);
}

}  // namespace kvstash::server
