// n > 1 (engine/fork.cc): one prefill, choices forked on the prompt's KV with copy-on-write of the
// last partial block, per-choice seeds; preemption and cancellation of choices keep the others'
// KV intact and every block returns to the pool.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

class ForkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() { delete model_; }

  static std::unique_ptr<Engine> make_engine(EngineOptions o = {}) {
    o.n_ctx = 512;
    o.n_threads = 2;
    auto e = Engine::create(*model_, o);
    EXPECT_TRUE(e.has_value());
    return std::move(e.value());
  }
  static GenerationRequest request(int n_prompt, int max_tokens, int n, float temperature = 0.0f, std::uint64_t seed = 0) {
    GenerationRequest r;
    const int nv = model_->config().n_vocab;
    for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(static_cast<TokenId>((i * 37 + 11) % nv));
    r.max_tokens = max_tokens;
    r.n = n;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.stop_at_end_of_generation = false;  // random weights: run the full length every time
    return r;
  }
  // The engine thread publishes its stats after the step that sent the final events: a bounded
  // (60 s) wait for it to go idle.
  static EngineStats idle_stats(Engine& engine) {
    for (int i = 0; i < 6000 && (engine.stats().running != 0 || engine.stats().kv_blocks_used != 0); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return engine.stats();
  }
  static Model* model_;
};
Model* ForkTest::model_ = nullptr;

TEST_F(ForkTest, GreedyChoicesEqualTheSingleOutputAndThePromptIsPrefilledOnce) {
  // 21 tokens: a full block and a partial one (block_size 16), so the fork copies on write; 32:
  // only full blocks, nothing to copy.
  for (int n_prompt : {21, 32}) {
    std::vector<TokenId> single;
    {
      auto engine = make_engine();
      auto r = generate(*engine, request(n_prompt, 12, 1));
      ASSERT_TRUE(r.has_value()) << r.status().to_string();
      single = r->tokens;
    }
    auto engine = make_engine();
    auto choices = generate_choices(*engine, request(n_prompt, 12, 3));
    ASSERT_TRUE(choices.has_value()) << choices.status().to_string();
    ASSERT_EQ(choices->size(), 3u);
    for (const GenerationResult& c : *choices) {
      EXPECT_EQ(c.finish, FinishReason::kLength);
      EXPECT_EQ(c.tokens, single) << "prompt " << n_prompt;
      EXPECT_EQ(c.prompt_tokens, n_prompt);
    }
    const EngineStats st = idle_stats(*engine);
    EXPECT_EQ(st.prompt_tokens_computed, n_prompt) << "the prompt is prefilled once";
    EXPECT_EQ(st.forks, 2);
    EXPECT_EQ(st.requests_finished, 1);
    EXPECT_EQ(st.prompt_tokens, n_prompt);  // usage counts the prompt once
    EXPECT_EQ(st.generated_tokens, 3 * 12);
    // Two of the three writers of the shared partial block copy it; the last writes the original.
    EXPECT_EQ(st.blocks_copied_on_write, n_prompt % 16 == 0 ? 0 : 2);
    EXPECT_EQ(st.kv_blocks_used, 0) << "every block returns to the pool";
  }
}

TEST_F(ForkTest, SeededChoicesAreReproducibleAndDiffer) {
  auto engine = make_engine();
  auto a = generate_choices(*engine, request(21, 16, 3, 1.0f, 42));
  auto b = generate_choices(*engine, request(21, 16, 3, 1.0f, 42));
  ASSERT_TRUE(a.has_value() && b.has_value());
  std::set<std::vector<TokenId>> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*a)[static_cast<std::size_t>(i)].tokens, (*b)[static_cast<std::size_t>(i)].tokens) << "choice " << i;
    distinct.insert((*a)[static_cast<std::size_t>(i)].tokens);
  }
  EXPECT_EQ(distinct.size(), 3u) << "each choice has its own seed";
  // Choice 0 keeps the request's seed: it is the n = 1 output; choice i the n = 1 output seeded
  // choice_seed(42, i).
  auto single0 = generate(*engine, request(21, 16, 1, 1.0f, 42));
  auto single2 = generate(*engine, request(21, 16, 1, 1.0f, choice_seed(42, 2)));
  ASSERT_TRUE(single0.has_value() && single2.has_value());
  EXPECT_EQ(single0->tokens, (*a)[0].tokens);
  EXPECT_EQ(single2->tokens, (*a)[2].tokens);
  EXPECT_EQ(idle_stats(*engine).kv_blocks_used, 0);
}

TEST_F(ForkTest, PreemptedChoicesKeepTheOthersKvIntact) {
  std::vector<TokenId> single;
  {
    auto engine = make_engine();
    single = generate(*engine, request(200, 150, 1))->tokens;
  }
  // 528 tokens of pool (the minimum for n_ctx 512): the 200-token prompt plus three choices of 150
  // tokens do not fit, so choices are preempted, recompute and must still give the same tokens.
  EngineOptions o;
  o.kv_pool_tokens = 1;
  auto engine = make_engine(o);
  auto choices = generate_choices(*engine, request(200, 150, 3));
  ASSERT_TRUE(choices.has_value()) << choices.status().to_string();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*choices)[static_cast<std::size_t>(i)].finish, FinishReason::kLength);
    EXPECT_EQ((*choices)[static_cast<std::size_t>(i)].tokens, single) << "choice " << i;
  }
  const EngineStats st = idle_stats(*engine);
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

TEST_F(ForkTest, CancelEndsEveryChoiceAndFreesTheirBlocks) {
  auto engine = make_engine();
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t id = 0;
  bool submitted = false;
  std::vector<FinishReason> finish(3, FinishReason::kNone);
  int finals = 0;
  auto got = engine->submit(request(21, 400, 3), [&](const TokenEvent& ev) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return submitted; });
    if (ev.token >= 0 && ev.choice == 1 && ev.finish == FinishReason::kNone) engine->cancel(id);
    if (ev.finish != FinishReason::kNone) {
      finish[static_cast<std::size_t>(ev.choice)] = ev.finish;
      ++finals;
      cv.notify_all();
    }
  });
  ASSERT_TRUE(got.has_value());
  {
    std::lock_guard<std::mutex> lock(mu);
    id = *got;
    submitted = true;
  }
  cv.notify_all();
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return finals == 3; }));
  for (FinishReason f : finish) EXPECT_EQ(f, FinishReason::kCancelled);
  lock.unlock();
  EXPECT_EQ(idle_stats(*engine).kv_blocks_used, 0);
}

TEST_F(ForkTest, RefusesNOutsideTheBatch) {
  auto engine = make_engine({.max_running = 4});
  EXPECT_FALSE(engine->submit(request(8, 4, 0), [](const TokenEvent&) {}).has_value());
  EXPECT_FALSE(engine->submit(request(8, 4, 5), [](const TokenEvent&) {}).has_value());
  EXPECT_FALSE(generate(*engine, request(8, 4, 2)).has_value()) << "generate() takes one choice";
  auto four = generate_choices(*engine, request(8, 4, 4));
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(four->size(), 4u);
}

TEST(ChoiceSeedTest, FirstChoiceKeepsTheSeedOthersDiffer) {
  EXPECT_EQ(choice_seed(7, 0), 7u);
  std::set<std::uint64_t> seeds;
  for (int i = 0; i < 8; ++i) seeds.insert(choice_seed(7, i));
  EXPECT_EQ(seeds.size(), 8u);
  EXPECT_NE(choice_seed(7, 1), choice_seed(8, 1));
}

}  // namespace
}  // namespace kvstash
