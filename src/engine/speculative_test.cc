// Speculative decoding (engine/speculative.h): the n-gram drafter and the adaptive draft length
// alone, then through the engine on a generated tiny model — greedy output (and seeded sampled
// output) token for token the same with and without speculation on 50 prompts whose spans repeat
// (with acceptance checked above zero, so the comparison is not vacuous), under a KV budget and a
// grammar too; the sampled next-token distribution unchanged (a chi-square bound); no block left
// behind by rolled-back drafts; options out of range refused by name; `kvstash bench-engine
// --draft ngram` end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "engine/chi_square_test_util.h"
#include "engine/cli_test_util.h"
#include "engine/engine.h"
#include "engine/speculative.h"
#include "grammar/gbnf.h"
#include "grammar/token_matcher.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

std::vector<TokenId> draft_of(const std::vector<TokenId>& tokens, int min_n, int max_n, int k) {
  std::vector<TokenId> d;
  const int n = ngram_draft(tokens, min_n, max_n, k, d);
  EXPECT_EQ(n, static_cast<int>(d.size()));
  return d;
}

TEST(NgramDraft, ContinuesTheMostRecentEarlierOccurrenceOfTheLongestNgram) {
  // "1 2 3" occurs at 0 (followed by 4 5) and at 5 (followed by 9 9); the last tokens are "2 3".
  const std::vector<TokenId> t = {1, 2, 3, 4, 5, 1, 2, 3, 9, 9, 7, 2, 3};
  EXPECT_EQ(draft_of(t, 1, 3, 2), (std::vector<TokenId>{9, 9}));  // "7 2 3" is new; "2 3" at 6 is the latest
  EXPECT_EQ(draft_of(t, 3, 3, 2), std::vector<TokenId>{});        // only 3-grams: none occurs before
  // A longer n-gram wins over a more recent shorter one.
  const std::vector<TokenId> u = {5, 6, 7, 8, 1, 7, 2, 5, 6, 7};
  EXPECT_EQ(draft_of(u, 1, 3, 3), (std::vector<TokenId>{8, 1, 7}));
  EXPECT_EQ(draft_of(u, 1, 1, 3), (std::vector<TokenId>{2, 5, 6}));
}

TEST(NgramDraft, ALoopDraftsItselfOnAndNothingIsDraftedWithoutAMatch) {
  // Period 2: the continuation runs past the end into the draft itself.
  EXPECT_EQ(draft_of({4, 8, 4, 8, 4}, 1, 2, 5), (std::vector<TokenId>{8, 4, 8, 4, 8}));
  EXPECT_EQ(draft_of({3, 3}, 1, 3, 4), (std::vector<TokenId>{3, 3, 3, 3}));
  EXPECT_EQ(draft_of({1, 2, 3, 4}, 1, 3, 4), std::vector<TokenId>{});
  EXPECT_EQ(draft_of({7}, 1, 3, 4), std::vector<TokenId>{});
  EXPECT_EQ(draft_of({3, 3}, 1, 3, 0), std::vector<TokenId>{});
}

TEST(SpecState, ShrinksOnRejectionBacksOffAndRetriesWithOneToken) {
  SpecState s;
  EXPECT_EQ(s.length(8), SpecState::kFirstDraft);
  EXPECT_EQ(s.length(1), 1);
  s.update(2, 2, 8);  // fully accepted: doubles, up to max_draft
  EXPECT_EQ(s.length(8), 4);
  s.update(4, 4, 8);
  s.update(8, 8, 8);
  EXPECT_EQ(s.length(8), 8);
  s.update(8, 2, 8);  // partly accepted: what was accepted plus one
  EXPECT_EQ(s.length(8), 3);
  s.update(3, 3, 8);  // fully accepted: doubles back up
  EXPECT_EQ(s.length(8), 6);
  for (int k : {6, 3, 1}) {
    EXPECT_EQ(s.length(8), k);
    s.update(k, 0, 8);  // rejected: halves, down to 0
  }
  int skipped = 0;
  while (s.length(8) == 0) ++skipped;
  EXPECT_EQ(skipped, 4) << "the first back-off";
  s.update(1, 0, 8);
  skipped = 0;
  while (s.length(8) == 0) ++skipped;
  EXPECT_EQ(skipped, 8) << "a failed retry doubles the back-off";
  for (int i = 0; i < 10; ++i) {
    s.update(1, 0, 8);
    skipped = 0;
    while (s.length(8) == 0) ++skipped;
  }
  EXPECT_EQ(skipped, SpecState::kMaxBackoff);
}

TEST(SpecState, AFlatTargetDistributionStopsDraftingAndAPeakedOneResumesIt) {
  SpecState s;
  EXPECT_FALSE(s.flat()) << "nothing observed yet";
  s.observe(0.02);  // the first observation counts whole
  EXPECT_TRUE(s.flat());
  s.observe(1.0);   // 0.75 * 0.02 + 0.25: 0.265, still under 0.3
  EXPECT_TRUE(s.flat());
  s.observe(1.0);   // 0.449
  EXPECT_FALSE(s.flat());
  SpecState greedy;
  for (int i = 0; i < 100; ++i) greedy.observe(1.0);  // greedy picks: never flat
  EXPECT_FALSE(greedy.flat());
}

TEST(SpecState, GivesUpAfterConsecutiveFailedRetriesWhenAsked) {
  auto fail_until_backoff = [](SpecState& s) {
    for (int k = s.length(8); k > 0; k = s.length(8)) s.update(k, 0, 8, 2);
  };
  auto retries_until_off = [](SpecState& s) {
    int retries = 0;
    for (int step = 0; step < 200 && !s.off; ++step) {
      const int k = s.length(8);
      if (k == 0) continue;
      EXPECT_EQ(k, 1) << "a retry drafts one token";
      ++retries;
      s.update(k, 0, 8, 2);
    }
    return retries;
  };
  SpecState never;  // give_up_after 0: retries forever
  SpecState s;      // some draft accepted once: give_up_after retries
  s.update(2, 1, 8, 2);
  fail_until_backoff(s);
  EXPECT_EQ(retries_until_off(s), 2);
  EXPECT_TRUE(s.off);
  for (int step = 0; step < 100; ++step) EXPECT_EQ(s.length(8), 0) << "off for good";
  // A draft never accepted gets one retry fewer (each retry first catches the draft up).
  SpecState unaccepted;
  fail_until_backoff(unaccepted);
  EXPECT_EQ(retries_until_off(unaccepted), 1);
  EXPECT_TRUE(unaccepted.off);

  // A retry that is accepted resets the count: failures must be consecutive.
  SpecState t;
  t.update(2, 1, 8, 2);
  fail_until_backoff(t);
  int seen = 0;
  for (int step = 0; step < 400 && !t.off; ++step) {
    const int k = t.length(8);
    if (k == 0) continue;
    ++seen;
    t.update(k, seen == 2 ? k : 0, 8, 2);  // the second retry is accepted
    if (seen == 2) fail_until_backoff(t);
  }
  EXPECT_TRUE(t.off);
  EXPECT_EQ(seen, 4) << "retry 1 failed, 2 accepted, then 3 and 4 failed";

  fail_until_backoff(never);
  for (int i = 0; i < 20; ++i) {
    while (never.length(8) == 0) {
    }
    never.update(1, 0, 8, 0);
  }
  EXPECT_FALSE(never.off);
}

class SpeculativeEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() { delete model_; }

  static EngineOptions options(bool speculate) {
    EngineOptions o;
    o.n_ctx = 512;
    o.n_threads = 2;
    o.max_running = 16;
    if (speculate) {
      o.speculative.draft = DraftKind::kNgram;
      o.speculative.max_draft = 6;
      o.speculative.max_decoders = 16;  // speculate in every batch here, to verify inside batches
    }
    return o;
  }

  // 50 prompts of random tokens in which one span occurs three times ("repeat the following
  // text" in token form), so drafts from the prompt get accepted; max_tokens 1..64.
  static std::vector<GenerationRequest> prompts() {
    std::mt19937_64 rng(36);
    const int nv = model_->config().n_vocab;
    auto token = [&] { return static_cast<TokenId>(rng() % static_cast<std::uint64_t>(nv)); };
    std::vector<GenerationRequest> out;
    for (int i = 0; i < 50; ++i) {
      GenerationRequest r;
      std::vector<TokenId> span(8 + rng() % 24);
      for (auto& t : span) t = token();
      for (int j = 0; j < 3; ++j) {
        for (std::uint64_t n = rng() % 6; n > 0; --n) r.prompt.push_back(token());
        r.prompt.insert(r.prompt.end(), span.begin(), span.end());
      }
      r.max_tokens = 1 + static_cast<int>(rng() % 64);
      r.stop_at_end_of_generation = false;
      out.push_back(std::move(r));
    }
    return out;
  }

  // Submits the requests as fast as the queue takes them (16 run together) and returns each
  // one's result.
  static std::vector<GenerationResult> run_all(Engine& engine, const std::vector<GenerationRequest>& requests) {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<GenerationResult> out(requests.size());
    std::size_t done = 0;
    const std::size_t in_flight = static_cast<std::size_t>(engine.options().max_queued);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return i - done < in_flight; });
      }
      auto id = engine.submit(requests[i], [&, i](const TokenEvent& ev) {
        std::lock_guard<std::mutex> lock(mu);
        if (ev.token >= 0) {
          out[i].tokens.push_back(ev.token);
          out[i].logprobs.push_back(ev.logprob);
        }
        if (ev.finish != FinishReason::kNone) {
          out[i].finish = ev.finish;
          out[i].error = ev.error;
          ++done;
          cv.notify_all();
        }
      });
      EXPECT_TRUE(id.has_value()) << id.status().to_string();
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == requests.size(); });
    return out;
  }

  // The same requests with and without speculation: the same tokens, log-probabilities and finish
  // reasons. Returns the speculative engine's stats.
  static EngineStats expect_same_output(const std::vector<GenerationRequest>& requests, EngineOptions plain_options,
                                        EngineOptions spec_options, const Model* model = nullptr) {
    if (model == nullptr) model = model_;
    auto plain = Engine::create(*model, plain_options);
    auto spec = Engine::create(*model, spec_options);
    EXPECT_TRUE(plain.has_value() && spec.has_value());
    if (!plain || !spec) return {};
    const auto expected = run_all(**plain, requests);
    const auto got = run_all(**spec, requests);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "request " << i << ", max_tokens " << requests[i].max_tokens);
      EXPECT_EQ(got[i].finish, expected[i].finish) << got[i].error;
      EXPECT_EQ(got[i].tokens, expected[i].tokens);
      EXPECT_EQ(got[i].logprobs, expected[i].logprobs);
    }
    // The stats of a step are published after its callbacks: one more request, run alone, makes
    // sure the step that ended the last of them has published.
    GenerationRequest last;
    last.prompt = {1};
    last.max_tokens = 1;
    EXPECT_TRUE(generate(**spec, last).has_value());
    EngineStats stats = (*spec)->stats();
    EXPECT_EQ(stats.kv_blocks_used, 0) << "blocks left referenced after every request ended";
    return stats;
  }

  static Model* model_;
};
Model* SpeculativeEngineTest::model_ = nullptr;

TEST_F(SpeculativeEngineTest, GreedyOutputIsTheSameWithAndWithoutSpeculation) {
  const auto requests = prompts();
  const EngineStats stats = expect_same_output(requests, options(false), options(true));
  std::printf("greedy: %lld drafts, %lld of %lld drafted tokens accepted\n", static_cast<long long>(stats.drafts),
              static_cast<long long>(stats.draft_tokens_accepted), static_cast<long long>(stats.draft_tokens));
  EXPECT_GT(stats.draft_tokens_accepted, 0) << "no draft accepted: the comparison proved nothing";
  EXPECT_LT(stats.draft_tokens_accepted, stats.draft_tokens) << "no draft rejected: rollback went unchecked";
}

// Q8_0 weights take the quantized row kernels (activations quantized per token): a token's
// result must not depend on its step's row count there either.
TEST_F(SpeculativeEngineTest, GreedyOutputOfAQuantizedModelIsTheSame) {
  auto q8 = Model::load(testing::test_model_path("tiny", gguf::TensorType::kQ8_0));
  ASSERT_TRUE(q8.has_value()) << q8.status().to_string();
  const EngineStats stats = expect_same_output(prompts(), options(false), options(true), q8->get());
  EXPECT_GT(stats.draft_tokens_accepted, 0);
}

TEST_F(SpeculativeEngineTest, StopTokensInsideAnAcceptedRunEndTheOutputThere) {
  // Each request stops at a token its greedy output holds in its middle.
  auto requests = prompts();
  auto plain = Engine::create(*model_, options(false));
  ASSERT_TRUE(plain.has_value());
  const auto full = run_all(**plain, requests);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (full[i].tokens.size() >= 4) requests[i].stop_tokens = {full[i].tokens[full[i].tokens.size() / 2]};
  }
  const EngineStats stats = expect_same_output(requests, options(false), options(true));
  EXPECT_GT(stats.draft_tokens_accepted, 0);
}

TEST_F(SpeculativeEngineTest, SeededSampledOutputIsTheSameWithAndWithoutSpeculation) {
  auto requests = prompts();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    SamplingParams& s = requests[i].sampling;
    s.temperature = 0.3f + 0.02f * static_cast<float>(i);
    s.seed = 1000 + i;
    if (i % 3 == 0) s.top_k = 8;
    if (i % 3 == 1) s.top_p = 0.9f;
    if (i % 5 == 0) s.repetition_penalty = 1.1f;
    if (i % 7 == 0) s.frequency_penalty = 0.5f;
  }
  const EngineStats stats = expect_same_output(requests, options(false), options(true));
  EXPECT_GT(stats.draft_tokens_accepted, 0);
}

TEST_F(SpeculativeEngineTest, GreedyOutputUnderAKvBudgetIsTheSame) {
  auto requests = prompts();
  for (auto& r : requests) r.max_tokens = 120;  // past the budget: every request compacts
  EngineOptions plain = options(false), spec = options(true);
  for (EngineOptions* o : {&plain, &spec}) {
    o->kv_budget.budget = 96;
    o->kv_budget.compact_every = 16;
    o->kv_budget.sinks = 4;
    o->kv_budget.recent = 32;
  }
  const EngineStats stats = expect_same_output(requests, plain, spec);
  EXPECT_GT(stats.compactions, 0);
  EXPECT_GT(stats.draft_tokens_accepted, 0);
}

TEST_F(SpeculativeEngineTest, GreedyOutputUnderAGrammarIsTheSame) {
  const Tokenizer& tok = model_->tokenizer();
  std::vector<std::string> bytes;
  for (std::size_t i = 0; i < tok.vocab_size(); ++i) bytes.push_back(tok.token_to_piece(static_cast<TokenId>(i)));
  auto g = grammar::parse_gbnf(R"(root ::= ("{" [a-z ]* "}" "\n"?)+)");
  ASSERT_TRUE(g) << g.status().to_string();
  auto compiled = grammar::CompiledGrammar::create(std::move(*g), grammar::TokenVocabulary::create(bytes, {}), "spec");
  ASSERT_TRUE(compiled) << compiled.status().to_string();
  auto requests = prompts();
  requests.resize(12);
  for (auto& r : requests) r.sampling.grammar = *compiled;
  const EngineStats stats = expect_same_output(requests, options(false), options(true));
  EXPECT_GT(stats.draft_tokens, 0);
}

// Regression (the stress harness, seed 12): a prompt whose only token left to compute is its last
// (here after a prefix-cache hit of every block before it) looked like a decoding sequence and got
// a draft, so an n > 1 request emitted a token before its fork and a choice came up one short.
TEST_F(SpeculativeEngineTest, ChoicesForkBeforeAnyDraftWhenOnlyThePromptsLastTokenIsLeft) {
  GenerationRequest r = prompts()[1];
  // 4 full blocks and one token (a second run reuses the 4), ending in a run of one token, so the
  // last token has a draft.
  r.prompt.resize(16 * 4 - 4);
  r.prompt.insert(r.prompt.end(), 5, 7);
  r.max_tokens = 40;
  auto plain = Engine::create(*model_, options(false));
  auto spec = Engine::create(*model_, options(true));
  ASSERT_TRUE(plain.has_value() && spec.has_value());
  auto expected = generate(**plain, r);
  ASSERT_TRUE(expected.has_value());
  ASSERT_TRUE(generate(**spec, r).has_value());  // fills the prefix cache
  r.n = 3;
  auto choices = generate_choices(**spec, r);
  ASSERT_TRUE(choices.has_value());
  ASSERT_EQ(choices->size(), 3u);
  for (const auto& c : *choices) EXPECT_EQ(c.tokens, expected->tokens);
  const EngineStats stats = (*spec)->stats();
  EXPECT_EQ(stats.prompt_tokens_from_pool, 64);
  EXPECT_GT(stats.draft_tokens_accepted, 0);
}

// The sampled distribution of a token picked from a verification row is the target's: N seeds
// with speculation and N other seeds without, the token's counts compared with a two-sample
// chi-square test. Bins under 5 expected counts are pooled; the bound is the 99.9% quantile of
// chi-square for the bins' degrees of freedom (Wilson–Hilferty), so a correct engine fails once
// in a thousand seeds sets — and these seeds are fixed.
TEST_F(SpeculativeEngineTest, SampledNextTokenDistributionIsUnchanged) {
  constexpr int kSamples = 1000;
  constexpr int kPosition = 5;  // the sixth generated token: some runs draft and verify it
  GenerationRequest base = prompts()[0];
  base.max_tokens = kPosition + 1;
  base.sampling.temperature = 0.7f;  // drafts accepted often, and still several likely tokens
  base.sampling.top_k = 8;
  auto count = [&](bool speculate, std::uint64_t first_seed, EngineStats* stats) {
    std::vector<GenerationRequest> requests(kSamples, base);
    for (int i = 0; i < kSamples; ++i) requests[static_cast<std::size_t>(i)].sampling.seed = first_seed + static_cast<std::uint64_t>(i);
    auto engine = Engine::create(*model_, options(speculate));
    EXPECT_TRUE(engine.has_value());
    std::map<TokenId, int> counts;
    for (const auto& r : run_all(**engine, requests)) {
      EXPECT_EQ(r.tokens.size(), static_cast<std::size_t>(kPosition + 1));
      if (r.tokens.size() > kPosition) ++counts[r.tokens[kPosition]];
    }
    if (stats) *stats = (*engine)->stats();
    return counts;
  };
  EngineStats stats;
  const auto with_spec = count(true, 1, &stats);
  const auto without = count(false, 1'000'000, nullptr);
  // 1000 runs of 6 tokens: about 150 drafted tokens accepted (these seeds: 156).
  EXPECT_GT(stats.draft_tokens_accepted, kSamples / 10) << "too few accepted drafts to test their distribution";
  const testing::ChiSquare c = testing::two_sample_chi_square(with_spec, without);
  ASSERT_GE(c.dof, 3) << "the distribution is too narrow to test";
  std::printf("chi-square %.2f over %d degrees of freedom (bound %.2f); %lld drafted tokens accepted\n", c.chi2, c.dof, c.bound,
              static_cast<long long>(stats.draft_tokens_accepted));
  EXPECT_LT(c.chi2, c.bound);
}

// The batch switch: 8 sequences that decode side by side draft nothing while max_decoders is below
// 8, and do at 8.
TEST_F(SpeculativeEngineTest, NoDraftsInStepsWithMoreDecodersThanMaxDecoders) {
  for (int max_decoders : {7, 8}) {
    SCOPED_TRACE(::testing::Message() << "max_decoders " << max_decoders);
    std::vector<GenerationRequest> requests(8, prompts()[2]);
    for (auto& r : requests) r.max_tokens = 48;
    EngineOptions o = options(true);
    o.speculative.max_decoders = max_decoders;
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    Engine* engine = nullptr;
    // All 8 arrive at the first step, so they prefill in one step and decode side by side to the end.
    o.on_step = [&](std::int64_t step) {
      if (step != 0) return;
      for (const auto& r : requests) {
        auto id = engine->submit(r, [&](const TokenEvent& ev) {
          if (ev.finish == FinishReason::kNone) return;
          std::lock_guard<std::mutex> lock(mu);
          ++done;
          cv.notify_all();
        });
        EXPECT_TRUE(id.has_value());
      }
    };
    auto e = Engine::create(*model_, o);
    ASSERT_TRUE(e.has_value());
    engine = e->get();
    GenerationRequest wake = requests[0];  // the engine steps only with work: this one starts it
    wake.max_tokens = 1;
    ASSERT_TRUE(generate(*engine, wake).has_value());
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done == 8; });
    }
    const EngineStats stats = engine->stats();
    if (max_decoders < 8) {
      EXPECT_EQ(stats.draft_tokens, 0);
    } else {
      EXPECT_GT(stats.draft_tokens_accepted, 0);
    }
  }
}

// Sampling from a flat distribution (a very high temperature over 48 allowed tokens): a one-token
// draft would be accepted about 1 time in 48, so no sequence drafts at all (SpecState::flat),
// and the output is the same token for token.
TEST_F(SpeculativeEngineTest, NothingIsDraftedWhileTheTargetSamplesFromAFlatDistribution) {
  auto requests = prompts();
  const int n_vocab = model_->config().n_vocab;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    SamplingParams& s = requests[i].sampling;
    s.temperature = 1000.0f;
    s.seed = 36 + i;
    for (TokenId t = 48; t < n_vocab; ++t) s.logit_bias.emplace_back(t, -100.0f);
  }
  const EngineStats flat = expect_same_output(requests, options(false), options(true));
  EXPECT_EQ(flat.draft_tokens, 0);
  // The same prompts greedy do draft: the rule is the distribution's, not the prompts'.
  const EngineStats greedy = expect_same_output(prompts(), options(false), options(true));
  EXPECT_GT(greedy.draft_tokens, 0);
}

TEST_F(SpeculativeEngineTest, OptionsOutOfRangeAreRefusedByName) {
  EngineOptions o = options(true);
  o.speculative.max_draft = 0;
  auto e = Engine::create(*model_, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("max_draft"), std::string::npos) << e.status().to_string();
  o = options(true);
  o.speculative.min_ngram = 4;
  e = Engine::create(*model_, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("min_ngram"), std::string::npos) << e.status().to_string();
  o = options(true);
  o.speculative.max_decoders = 0;
  e = Engine::create(*model_, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("max_decoders"), std::string::npos) << e.status().to_string();
}

using kvstash::testing::run_kvstash;

TEST(BenchEngineDraft, ComparesBothWorkloadsWithTheSameOutputAndRefusesBadFlags) {
  ASSERT_TRUE(std::filesystem::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
  const std::string model = testing::test_model_path("tiny", gguf::TensorType::kF16);
  std::string out;
  ASSERT_EQ(run_kvstash("bench-engine -m " + model + " -t 1 --json --draft ngram --decode-tokens 24 --repeats 1", out), 0)
      << out;
  EXPECT_NE(out.find("\"spec_k\": 8"), std::string::npos) << "--spec-k's default for prompt lookup: " << out;
  for (const char* key : {"\"copying\"", "\"no-acceptance\"", "\"speedup\"", "\"acceptance_rate\"", "\"mean_accepted_length\"",
                          "\"tokens_from_drafts\"", "\"plain_decode_tokens_per_s\"", "\"spec_decode_tokens_per_s\""}) {
    EXPECT_NE(out.find(key), std::string::npos) << key << " missing from " << out;
  }
  EXPECT_EQ(out.find("\"same_output\": false"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_kvstash("bench-engine -m " + model + " --draft ngram --kv-budget 256", out), 1) << out;
  EXPECT_NE(out.find("--draft and --kv-budget"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_kvstash("bench-engine -m " + model + " --draft ngram --spec-ngram-min 3 --spec-ngram-max 2", out), 1) << out;
  EXPECT_NE(out.find("min_ngram"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run_kvstash("bench-engine -m " + model + " --draft eagle", out), 0) << out;
  EXPECT_NE(out.find("--draft"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvstash
