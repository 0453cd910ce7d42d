// Every sampling knob that changes the output changes the response-cache key contribution; a
// request without knobs contributes nothing (its key is the one from before issue 33).
#include "server/sampling_key.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "grammar/grammar_cache.h"

namespace kvstash::server {
namespace {

std::array<std::uint8_t, 32> digest(const SamplingParams& s) {
  Sha256 h;
  h.update("prefix");
  hash_sampling_knobs(h, s);
  return h.finish();
}

TEST(SamplingKey, EveryKnobChangesTheKeyAndDefaultsAddNothing) {
  const SamplingParams off;
  Sha256 plain;
  plain.update("prefix");
  EXPECT_EQ(digest(off), plain.finish());
  EXPECT_FALSE(has_sampling_knobs(off));
  const std::vector<std::function<void(SamplingParams&)>> changes = {
      [](SamplingParams& s) { s.logit_bias = {{5, 1.0f}}; },
      [](SamplingParams& s) { s.logit_bias = {{5, 2.0f}}; },
      [](SamplingParams& s) { s.logit_bias = {{6, 1.0f}}; },
      [](SamplingParams& s) { s.presence_penalty = 0.5f; },
      [](SamplingParams& s) { s.frequency_penalty = 0.5f; },
      [](SamplingParams& s) { s.repetition_penalty = 1.1f; },
      [](SamplingParams& s) { s.repeat_last_n = 32; },
      [](SamplingParams& s) { s.min_p = 0.1f; },
      [](SamplingParams& s) { s.typical_p = 0.9f; },
      [](SamplingParams& s) { s.top_n_sigma = 1.0f; },
  };
  std::set<std::array<std::uint8_t, 32>> keys{digest(off)};
  for (const auto& change : changes) {
    SamplingParams s;
    change(s);
    EXPECT_TRUE(has_sampling_knobs(s));
    EXPECT_TRUE(keys.insert(digest(s)).second) << "two settings share a key";
    EXPECT_EQ(digest(s), digest(s));
  }
}

TEST(SamplingKey, TheGrammarsKeyIsPartOfIt) {
  grammar::GrammarCache cache(grammar::TokenVocabulary::create({"true", "null", "{", "}", "\""}, {}));
  SamplingParams a, b, c;
  a.grammar = *cache.json_schema(R"({"type":"boolean"})");
  b.grammar = *cache.json_schema(R"({"type":"null"})");
  c.grammar = *cache.json_object();
  EXPECT_TRUE(has_sampling_knobs(a));
  EXPECT_NE(digest(a), digest(b));
  EXPECT_NE(digest(a), digest(c));
  EXPECT_NE(digest(a), digest(SamplingParams{}));
  SamplingParams a2;
  a2.grammar = *cache.json_schema(R"({"type":"boolean"})");
  EXPECT_EQ(digest(a), digest(a2));
}

}  // namespace
}  // namespace kvstash::server
