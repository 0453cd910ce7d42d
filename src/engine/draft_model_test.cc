// Speculative decoding with a draft model (engine/draft_model.h): the vocabulary check; the
// drafter alone (catch-up, greedy drafts, rollback, its pool given back); then through the engine
// on a generated tiny model (F16 target, the same model in Q8_0 as the draft: high acceptance) —
// greedy and seeded sampled output token for token the same with and without speculation on 50
// prompts, with preemption, prefix-cache hits and a draft pool too small for every sequence; the
// sampled next-token distribution unchanged (a chi-square bound); options refused by name;
// `kvstash bench-engine --draft model` end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "common/thread_pool.h"
#include "engine/chi_square_test_util.h"
#include "engine/cli_test_util.h"
#include "engine/draft_model.h"
#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

class DraftModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    target_ = std::move(m.value()).release();
    auto d = Model::load(testing::test_model_path("tiny", gguf::TensorType::kQ8_0));
    ASSERT_TRUE(d.has_value()) << d.status().to_string();
    draft_ = std::move(d.value()).release();
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
  }

  static EngineOptions options(bool speculate) {
    EngineOptions o;
    o.n_ctx = 512;
    o.n_threads = 2;
    o.max_running = 16;
    if (speculate) {
      o.speculative.draft = DraftKind::kModel;
      o.speculative.draft_model = draft_;
      o.speculative.max_draft = 6;
      o.speculative.max_decoders = 16;  // speculate in every batch here, to verify inside batches
    }
    return o;
  }

  // 50 prompts of 4..100 random tokens, every fifth sharing the first 40 tokens of the one
  // before it (prefix-cache hits); max_tokens 1..64.
  static std::vector<GenerationRequest> prompts() {
    std::mt19937_64 rng(3636);
    const int nv = target_->config().n_vocab;
    std::vector<GenerationRequest> out;
    for (int i = 0; i < 50; ++i) {
      GenerationRequest r;
      if (i % 5 == 4 && out.back().prompt.size() >= 40) r.prompt.assign(out.back().prompt.begin(), out.back().prompt.begin() + 40);
      for (std::uint64_t n = 4 + rng() % 60; n > 0; --n) r.prompt.push_back(static_cast<TokenId>(rng() % static_cast<std::uint64_t>(nv)));
      r.max_tokens = 1 + static_cast<int>(rng() % 64);
      r.stop_at_end_of_generation = false;
      out.push_back(std::move(r));
    }
    return out;
  }

  // Submits the requests, max_queued in flight, and returns each one's result. A request whose
  // prompt begins with a whole block of the one before it is submitted once that one has finished,
  // so that its prefix is in the pool. Submitted together, the two can be admitted in one step and
  // both prefilled: whether they are depends on the machine's speed (on a 2-vCPU Zen 1 VM every
  // such pair was, and no prefix was ever hit).
  static std::vector<GenerationResult> run_all(Engine& engine, const std::vector<GenerationRequest>& requests) {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<GenerationResult> out(requests.size());
    std::vector<bool> finished(requests.size(), false);
    std::size_t done = 0;
    const std::size_t in_flight = static_cast<std::size_t>(engine.options().max_queued);
    const std::size_t block = static_cast<std::size_t>(engine.options().block_size);
    auto shares_a_block_with_previous = [&](std::size_t i) {
      if (i == 0 || requests[i].prompt.size() < block || requests[i - 1].prompt.size() < block) return false;
      return std::equal(requests[i].prompt.begin(), requests[i].prompt.begin() + static_cast<std::ptrdiff_t>(block),
                        requests[i - 1].prompt.begin());
    };
    for (std::size_t i = 0; i < requests.size(); ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        const bool after_previous = shares_a_block_with_previous(i);
        cv.wait(lock, [&] { return i - done < in_flight && (!after_previous || finished[i - 1]); });
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
          finished[i] = true;
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

  // The same requests with and without the draft model: the same tokens, log-probabilities and
  // finish reasons. Returns the speculative engine's stats.
  static EngineStats expect_same_output(const std::vector<GenerationRequest>& requests, const EngineOptions& plain_options,
                                        const EngineOptions& spec_options) {
    auto plain = Engine::create(*target_, plain_options);
    auto spec = Engine::create(*target_, spec_options);
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
    // One more request, run alone, makes sure the step that ended the last of them has published.
    GenerationRequest last;
    last.prompt = {1};
    last.max_tokens = 1;
    EXPECT_TRUE(generate(**spec, last).has_value());
    EngineStats stats = (*spec)->stats();
    EXPECT_EQ(stats.kv_blocks_used, 0) << "blocks left referenced after every request ended";
    std::printf("%lld drafts, %lld of %lld drafted tokens accepted, %lld preemptions, %lld prompt tokens from the pool\n",
                static_cast<long long>(stats.drafts), static_cast<long long>(stats.draft_tokens_accepted),
                static_cast<long long>(stats.draft_tokens), static_cast<long long>(stats.preemptions),
                static_cast<long long>(stats.prompt_tokens_from_pool));
    return stats;
  }

  static Model* target_;
  static Model* draft_;
};
Model* DraftModelTest::target_ = nullptr;
Model* DraftModelTest::draft_ = nullptr;

TEST_F(DraftModelTest, AnotherVocabularyIsRefusedByName) {
  EXPECT_TRUE(check_same_vocabulary(*target_, *draft_).is_ok());
  auto llama = Model::load(testing::test_model_path("tiny-llama", gguf::TensorType::kF16));
  ASSERT_TRUE(llama.has_value()) << llama.status().to_string();
  const Status st = check_same_vocabulary(*target_, **llama);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("vocabulary"), std::string::npos) << st.to_string();
  EngineOptions o = options(true);
  o.speculative.draft_model = llama->get();
  auto e = Engine::create(*target_, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("draft model"), std::string::npos) << e.status().to_string();
}

TEST_F(DraftModelTest, OptionsOutOfPlaceAreRefusedByName) {
  EngineOptions o = options(true);
  o.speculative.draft_model = nullptr;
  auto e = Engine::create(*target_, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("draft_model"), std::string::npos) << e.status().to_string();
  o = options(true);
  o.speculative.draft = DraftKind::kNgram;  // a draft model given to another drafter
  e = Engine::create(*target_, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("draft_model"), std::string::npos) << e.status().to_string();
  o = options(true);
  o.speculative.draft_kv_tokens = -1;
  e = Engine::create(*target_, o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("draft_kv_tokens"), std::string::npos) << e.status().to_string();
}

// The drafter alone: its greedy drafts are the draft model's own greedy output; after a rollback
// to the accepted tokens it catches up and drafts on as if it had never drafted the rejected ones;
// a sequence whose KV is released gives every block back.
TEST_F(DraftModelTest, DraftsAreTheDraftModelsGreedyOutputAcrossRollbacks) {
  ThreadPool threads(2);
  std::vector<TokenId> prompt = prompts()[0].prompt;
  // The draft model's own greedy continuation (plain decoding on an engine of its own).
  EngineOptions plain;
  plain.n_ctx = 512;
  plain.n_threads = 2;
  auto engine = Engine::create(*draft_, plain);
  ASSERT_TRUE(engine.has_value());
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 24;
  r.stop_at_end_of_generation = false;
  auto greedy = generate(**engine, r);
  ASSERT_TRUE(greedy.has_value());
  const std::vector<TokenId>& g = greedy->tokens;

  DraftModelDrafter drafter(*draft_, 16, 1024, 32);  // catches up 32 tokens per step at most
  DraftKv kv;
  std::vector<TokenId> tokens = prompt;
  tokens.push_back(g[0]);
  std::vector<TokenId> out;
  std::vector<DraftModelDrafter::Job> jobs = {{tokens, &kv, 4, &out}};
  int catch_up_steps = 0;
  for (; out.empty() && catch_up_steps < 10; ++catch_up_steps) ASSERT_TRUE(drafter.draft(jobs, threads).is_ok());
  EXPECT_EQ(catch_up_steps, static_cast<int>(tokens.size() + 31) / 32) << "32 tokens per step, then the draft";
  ASSERT_EQ(out, std::vector<TokenId>(g.begin() + 1, g.begin() + 5));
  EXPECT_EQ(kv.n_computed(), static_cast<int>(tokens.size()) + 3) << "the last drafted token is never fed";
  // Say the target accepted 2 and its bonus token is g[3] (as the draft): keep the KV of the
  // accepted ones, catch up on the bonus token and draft on.
  tokens.insert(tokens.end(), g.begin() + 1, g.begin() + 4);
  drafter.rollback(kv, static_cast<int>(tokens.size()) - 1);
  EXPECT_EQ(kv.n_computed(), static_cast<int>(tokens.size()) - 1);
  out.clear();
  jobs = {{tokens, &kv, 3, &out}};
  ASSERT_TRUE(drafter.draft(jobs, threads).is_ok());
  EXPECT_EQ(out, std::vector<TokenId>(g.begin() + 4, g.begin() + 7));
  // A rejected run: a token the draft model would not pick, then the rollback drops its KV.
  tokens.push_back(static_cast<TokenId>((g[4] + 1) % target_->config().n_vocab));
  drafter.rollback(kv, static_cast<int>(tokens.size()) - 1);  // the drafted g[4..5] went; the new token is the bonus
  out.clear();
  jobs = {{tokens, &kv, 3, &out}};
  ASSERT_TRUE(drafter.draft(jobs, threads).is_ok());
  // The same as a fresh sequence's draft on the same tokens: nothing of the rejected run remains.
  DraftKv fresh;
  std::vector<TokenId> fresh_out;
  std::vector<DraftModelDrafter::Job> fresh_jobs = {{tokens, &fresh, 3, &fresh_out}};
  while (fresh_out.empty()) ASSERT_TRUE(drafter.draft(fresh_jobs, threads).is_ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out, fresh_out);
  EXPECT_GT(drafter.pool().n_used(), 0);
  kv.release();
  fresh.release();
  EXPECT_EQ(drafter.pool().n_used(), 0) << "draft KV blocks left behind";
}

TEST_F(DraftModelTest, GreedyOutputIsTheSameWithAndWithoutTheDraftModel) {
  const EngineStats stats = expect_same_output(prompts(), options(false), options(true));
  EXPECT_GT(stats.draft_tokens_accepted, stats.draft_tokens / 2) << "a Q8_0 copy of the target should mostly agree with it";
  EXPECT_LT(stats.draft_tokens_accepted, stats.draft_tokens) << "no draft rejected: rollback went unchecked";
  EXPECT_GT(stats.draft_prefix_tokens, 0) << "shared prefixes: the draft pool's prefix cache went unused";
}

// Without the engine's prefix cache the draft pool keeps none either, and the output is the same.
TEST_F(DraftModelTest, NoPrefixCacheMeansNoDraftPrefixCache) {
  EngineOptions plain = options(false), spec = options(true);
  plain.prefix_cache = spec.prefix_cache = false;
  std::vector<GenerationRequest> requests = prompts();
  requests.resize(20);
  for (std::size_t i = 0; i < 10; ++i) requests.push_back(requests[i]);
  const EngineStats stats = expect_same_output(requests, plain, spec);
  EXPECT_EQ(stats.draft_prefix_tokens, 0);
  EXPECT_GT(stats.draft_tokens_accepted, 0);
}

// A pool that holds few sequences preempts them, they come back through the prefix cache, and a
// draft pool of one context leaves most sequences without a draft at times.
TEST_F(DraftModelTest, GreedyOutputIsTheSameUnderPreemptionAndAFullDraftPool) {
  EngineOptions plain = options(false), spec = options(true);
  for (EngineOptions* o : {&plain, &spec}) {
    o->kv_pool_tokens = 640;
  }
  spec.speculative.draft_kv_tokens = 512;
  // Each prompt twice, the second copy admitted once the first is out: its blocks come from the pool.
  std::vector<GenerationRequest> requests = prompts();
  for (std::size_t i = 0; i < 50; ++i) requests.push_back(requests[(i * 7) % 50]);
  const EngineStats stats = expect_same_output(requests, plain, spec);
  EXPECT_GT(stats.preemptions, 0) << "no preemption: the test proved nothing about it";
  EXPECT_GT(stats.prompt_tokens_from_pool, 0);
  EXPECT_GT(stats.draft_tokens_accepted, 0);
  EXPECT_GT(stats.draft_prefix_tokens, 0) << "repeated prompts: the draft pool's prefix cache went unused";
}

TEST_F(DraftModelTest, SeededSampledOutputIsTheSameWithAndWithoutTheDraftModel) {
  auto requests = prompts();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    SamplingParams& s = requests[i].sampling;
    s.temperature = 0.3f + 0.02f * static_cast<float>(i);
    s.seed = 2000 + i;
    if (i % 3 == 0) s.top_k = 8;
    if (i % 3 == 1) s.top_p = 0.9f;
    if (i % 5 == 0) s.repetition_penalty = 1.1f;
  }
  const EngineStats stats = expect_same_output(requests, options(false), options(true));
  EXPECT_GT(stats.draft_tokens_accepted, 0);
}

// The sampled distribution of a token picked from a verification row is the target's: N seeds
// with the draft model and N other seeds without, the token's counts compared with a two-sample
// chi-square test (bins under 10 in all pooled; the bound the 99.9% quantile, Wilson–Hilferty).
TEST_F(DraftModelTest, SampledNextTokenDistributionIsUnchanged) {
  constexpr int kSamples = 1000;
  constexpr int kPosition = 5;  // the sixth generated token: most runs draft and verify it
  GenerationRequest base = prompts()[0];
  base.max_tokens = kPosition + 1;
  base.sampling.temperature = 0.7f;
  base.sampling.top_k = 8;
  auto count = [&](bool speculate, std::uint64_t first_seed, EngineStats* stats) {
    std::vector<GenerationRequest> requests(kSamples, base);
    for (int i = 0; i < kSamples; ++i) requests[static_cast<std::size_t>(i)].sampling.seed = first_seed + static_cast<std::uint64_t>(i);
    auto engine = Engine::create(*target_, options(speculate));
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
  EXPECT_GT(stats.draft_tokens_accepted, kSamples / 10) << "too few accepted drafts to test their distribution";
  const testing::ChiSquare c = testing::two_sample_chi_square(with_spec, without);
  ASSERT_GE(c.dof, 3) << "the distribution is too narrow to test";
  std::printf("chi-square %.2f over %d degrees of freedom (bound %.2f); %lld of %lld drafted tokens accepted\n", c.chi2, c.dof, c.bound,
              static_cast<long long>(stats.draft_tokens_accepted), static_cast<long long>(stats.draft_tokens));
  EXPECT_LT(c.chi2, c.bound);
}

using kvstash::testing::run_kvstash;

TEST(BenchEngineDraftModel, MeasuresTheDraftModelWithTheSameOutputAndRefusesBadFlags) {
  ASSERT_TRUE(std::filesystem::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
  const std::string model = testing::test_model_path("tiny", gguf::TensorType::kF16);
  const std::string draft = testing::test_model_path("tiny", gguf::TensorType::kQ8_0);
  std::string out;
  ASSERT_EQ(run_kvstash("bench-engine -m " + model + " -t 1 --json --draft model --model-draft " + draft +
                            " --decode-tokens 24 --repeats 1",
                        out),
            0)
      << out;
  EXPECT_NE(out.find("\"spec_k\": 6"), std::string::npos) << "--spec-k's default for a draft model: " << out;
  for (const char* key : {"\"drafter\": \"model\"", "\"speedup\"", "\"acceptance_rate\"", "\"draft_seconds\""}) {
    EXPECT_NE(out.find(key), std::string::npos) << key << " missing from " << out;
  }
  EXPECT_EQ(out.find("\"same_output\": false"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_kvstash("bench-engine -m " + model + " --draft model", out), 1) << out;
  EXPECT_NE(out.find("--model-draft"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_kvstash("bench-engine -m " + model + " --draft ngram --model-draft " + draft, out), 1) << out;
  EXPECT_NE(out.find("--model-draft"), std::string::npos) << out;
  out.clear();
  const std::string llama = testing::test_model_path("tiny-llama", gguf::TensorType::kF16);
  EXPECT_EQ(run_kvstash("run -m " + model + " -p hello -n 4 --model-draft " + llama, out), 1) << out;
  EXPECT_NE(out.find("vocabulary"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(run_kvstash("run -m " + model + " -p hello -n 8 --ignore-eos --model-draft " + draft, out), 0) << out;
  EXPECT_NE(out.find("speculative:"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvstash
