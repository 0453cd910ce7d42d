// End-to-end engine behaviour on generated tiny models: continuous batching, the prefix cache,
// seeded sampling, request validation and cancellation.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache/kv_events.h"
#include "model/model.h"
#include "model/swap_gate_for_test.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

class EngineTest : public ::testing::Test {
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
  static std::vector<TokenId> prompt(int n, int salt) {
    std::vector<TokenId> t;
    const int nv = model_->config().n_vocab;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<TokenId>((i * 31 + salt * 977 + 5) % nv));
    return t;
  }
  static GenerationRequest greedy(std::vector<TokenId> p, int n) {
    GenerationRequest r;
    r.prompt = std::move(p);
    r.max_tokens = n;
    r.stop_at_end_of_generation = false;  // random weights: run the full length every time
    return r;
  }
  static Model* model_;
};
Model* EngineTest::model_ = nullptr;

// A subscriber that holds the event log's lock at the engine's last step makes that step's
// try_publish fail; with no step after it, the engine publishes those key changes (waiting for the
// lock) before it idles, or a router would never see them. Ten idle transitions with the lock
// hammered by snapshots: before the fix, each left its last changes unpublished about half the time.
TEST_F(EngineTest, KeyChangesHeldBackByASubscriberArePublishedBeforeTheEngineIdles) {
  cache::KvEventLog log;
  EngineOptions o;
  o.kv_events = &log;
  auto engine = make_engine(o);
  for (int round = 0; round < 10; ++round) {
    std::atomic<bool> stop{false};
    std::thread subscriber([&] {
      while (!stop.load()) (void)log.snapshot();
    });
    auto r = generate(*engine, greedy(prompt(48, 100 + round), 3));
    stop = true;
    subscriber.join();
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    bool published = false;
    std::size_t in_log = 0;
    std::int64_t cached = 0;
    for (int i = 0; i < 200 && !published; ++i) {
      in_log = log.snapshot().keys[static_cast<int>(cache::KvSource::kPool)].size();
      cached = engine->stats().kv_blocks_cached;
      published = cached > 0 && static_cast<std::int64_t>(in_log) == cached;
      if (!published) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(published) << "round " << round << ": the log holds " << in_log << " pool keys, the pool caches " << cached << " blocks";
  }
}

TEST_F(EngineTest, GeneratesMaxTokensAndReportsUsage) {
  auto engine = make_engine();
  auto r = generate(*engine, greedy(prompt(20, 1), 12));
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->finish, FinishReason::kLength);
  EXPECT_EQ(r->tokens.size(), 12u);
  EXPECT_EQ(r->prompt_tokens, 20);
  EXPECT_EQ(r->cached_tokens, 0);
  for (float lp : r->logprobs) EXPECT_LE(lp, 0.0f);
}

TEST_F(EngineTest, ConcurrentSequencesGiveTheSameTokensAsAlone) {
  std::vector<std::vector<TokenId>> alone;
  {
    auto engine = make_engine({.prefix_cache = false});
    for (int i = 0; i < 6; ++i) alone.push_back(generate(*engine, greedy(prompt(10 + 13 * i, i), 16))->tokens);
  }
  EngineOptions o;
  o.prefix_cache = false;
  o.prefill_chunk = 24;  // long prompts prefill in chunks between other sequences' decode steps
  auto engine = make_engine(o);
  std::vector<std::vector<TokenId>> together(6);
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&, i] { together[static_cast<std::size_t>(i)] = generate(*engine, greedy(prompt(10 + 13 * i, i), 16))->tokens; });
  }
  for (auto& c : clients) c.join();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(together[static_cast<std::size_t>(i)], alone[static_cast<std::size_t>(i)]) << "sequence " << i;
}

TEST_F(EngineTest, SharedPrefixIsReusedAndGivesTheSameTokens) {
  auto base = prompt(70, 7);  // 4 full blocks + 6 tokens
  auto with_tail = base;
  for (TokenId t : prompt(9, 8)) with_tail.push_back(t);
  std::vector<TokenId> expected;
  {
    auto engine = make_engine({.prefix_cache = false});
    expected = generate(*engine, greedy(with_tail, 10))->tokens;
  }
  auto engine = make_engine();
  auto first = generate(*engine, greedy(base, 4));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->cached_tokens, 0);
  auto second = generate(*engine, greedy(with_tail, 10));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->cached_tokens, 64) << "the 4 full blocks of the shared 70-token prefix";
  EXPECT_EQ(second->tokens, expected);
  // The same prompt again: everything but the last token's block... is reused.
  auto third = generate(*engine, greedy(with_tail, 10));
  EXPECT_EQ(third->cached_tokens, 64);  // 79 tokens: 4 full blocks; block 5 needs token 80
  EXPECT_EQ(third->tokens, expected);
  EXPECT_GT(engine->stats().kv_blocks_cached, 0);
}

TEST_F(EngineTest, GeneratedTokensEnterThePrefixCache) {
  // A conversation's next turn starts with the previous prompt and answer: both must be cached.
  auto engine = make_engine();
  auto p = prompt(30, 9);
  auto r1 = generate(*engine, greedy(p, 40));
  auto next = p;
  next.insert(next.end(), r1->tokens.begin(), r1->tokens.end());
  for (TokenId t : prompt(5, 10)) next.push_back(t);
  auto r2 = generate(*engine, greedy(next, 4));
  EXPECT_EQ(r2->cached_tokens, 64) << "30 prompt + 40 generated tokens = 4 full blocks";
}

TEST_F(EngineTest, CacheSaltSeparatesTenants) {
  auto engine = make_engine();
  auto req = greedy(prompt(48, 11), 4);
  req.cache_salt = "tenant-a";
  generate(*engine, req);
  auto same = generate(*engine, req);
  EXPECT_EQ(same->cached_tokens, 32);
  req.cache_salt = "tenant-b";
  auto other = generate(*engine, req);
  EXPECT_EQ(other->cached_tokens, 0);
}

TEST_F(EngineTest, SameSeedSameOutputDifferentSeedDiffers) {
  auto engine = make_engine();
  auto req = greedy(prompt(12, 12), 24);
  req.sampling.temperature = 3.0f;
  req.sampling.top_k = 50;
  req.sampling.top_p = 0.95f;
  req.sampling.seed = 42;
  auto a = generate(*engine, req), b = generate(*engine, req);
  req.sampling.seed = 43;
  auto c = generate(*engine, req);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_NE(a->tokens, c->tokens);
}

TEST_F(EngineTest, RejectsBadRequests) {
  auto engine = make_engine();
  auto empty = engine->submit(greedy({}, 4), [](const TokenEvent&) {});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto out_of_range = engine->submit(greedy({0, model_->config().n_vocab}, 4), [](const TokenEvent&) {});
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kInvalidArgument);
  auto too_long = engine->submit(greedy(prompt(500, 1), 100), [](const TokenEvent&) {});
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("context"), std::string::npos);
  // The engine still serves.
  EXPECT_EQ(generate(*engine, greedy(prompt(5, 1), 3))->tokens.size(), 3u);
}

// The stream cannot run to its length before the cancel, however slow this thread is: the engine
// thread waits in the callback of the second token until the cancel has been sent (a callback may
// block the engine thread; the cancel only queues, under the engine's own lock).
TEST_F(EngineTest, CancelEndsTheRequestAndFreesItsBlocks) {
  auto engine = make_engine({.prefix_cache = false});
  std::mutex mu;
  std::condition_variable cv;
  FinishReason finish = FinishReason::kNone;
  int tokens = 0;
  bool cancel_sent = false;
  auto id = engine->submit(greedy(prompt(20, 3), 400), [&](const TokenEvent& ev) {
    std::unique_lock<std::mutex> lock(mu);
    if (ev.token >= 0) ++tokens;
    if (ev.finish != FinishReason::kNone) finish = ev.finish;
    cv.notify_all();
    if (ev.token >= 0 && tokens == 2) cv.wait(lock, [&] { return cancel_sent; });
  });
  ASSERT_TRUE(id.has_value());
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return tokens >= 2; });
  }
  engine->cancel(*id);
  std::unique_lock<std::mutex> lock(mu);
  cancel_sent = true;
  cv.notify_all();
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return finish != FinishReason::kNone; }));
  EXPECT_EQ(finish, FinishReason::kCancelled);
  EXPECT_LT(tokens, 400);
  lock.unlock();
  // Bounded (60 s) wait for the engine thread to release the blocks after the final event.
  for (int i = 0; i < 6000 && engine->stats().kv_blocks_used != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(engine->stats().running, 0);
}

TEST_F(EngineTest, SmallPoolPreemptsAndStillFinishesEverything) {
  // A pool of 40 blocks for 4 sequences of ~150 tokens each forces preemption and recompute.
  EngineOptions o;
  o.kv_pool_tokens = 640;
  o.prefix_cache = false;
  std::vector<std::vector<TokenId>> alone;
  {
    auto engine = make_engine(o);
    for (int i = 0; i < 4; ++i) alone.push_back(generate(*engine, greedy(prompt(100, 20 + i), 50))->tokens);
  }
  auto engine = make_engine(o);
  std::vector<std::vector<TokenId>> together(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) clients.emplace_back([&, i] { together[static_cast<std::size_t>(i)] = generate(*engine, greedy(prompt(100, 20 + i), 50))->tokens; });
  for (auto& c : clients) c.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(together[static_cast<std::size_t>(i)], alone[static_cast<std::size_t>(i)]);
}

// Issue 8's reproduction: a 2,000-token prompt (8 tokens) and, a moment later, a 200-token prompt
// (32 tokens) on a pool that holds one context and a block. Preempting a sequence that stood before
// the failing one in the step's plan left the failing one without its blocks: the forward pass
// wrote past its block table, the long answer changed, and sometimes the server crashed. The
// second request now arrives at every step from 0 to 7 (the "few milliseconds" of the report).
TEST_F(EngineTest, LongAndShortPromptOnATightPoolGiveTheirSoloOutput) {
  EngineOptions o;
  o.n_ctx = 2048;
  o.kv_pool_tokens = 2064;
  o.prefix_cache = false;
  o.n_threads = 2;
  auto long_req = greedy(prompt(2000, 41), 8), short_req = greedy(prompt(200, 42), 32);
  std::vector<TokenId> long_alone, short_alone;
  {
    auto e = Engine::create(*model_, o);
    ASSERT_TRUE(e.has_value());
    long_alone = generate(**e, long_req)->tokens;
    short_alone = generate(**e, short_req)->tokens;
  }
  for (int arrival = 0; arrival < 8; ++arrival) {  // the long request runs 11 steps (4 prefill, 7 decode)
    EngineOptions oo = o;
    Engine* engine = nullptr;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<TokenId> short_tokens;
    bool short_done = false;
    FinishReason short_finish = FinishReason::kNone;
    oo.on_step = [&](std::int64_t step) {
      if (step != arrival) return;
      auto id = engine->submit(short_req, [&](const TokenEvent& ev) {
        std::lock_guard<std::mutex> lock(mu);
        if (ev.token >= 0) short_tokens.push_back(ev.token);
        if (ev.finish != FinishReason::kNone) {
          short_finish = ev.finish;
          short_done = true;
          cv.notify_all();
        }
      });
      ASSERT_TRUE(id.has_value());
    };
    auto e = Engine::create(*model_, oo);
    ASSERT_TRUE(e.has_value());
    engine = e->get();
    auto long_result = generate(*engine, long_req);
    ASSERT_TRUE(long_result.has_value());
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return short_done; })) << "arrival step " << arrival;
    EXPECT_EQ(long_result->finish, FinishReason::kLength) << long_result->error;
    EXPECT_EQ(long_result->tokens, long_alone) << "arrival step " << arrival;
    EXPECT_EQ(short_finish, FinishReason::kLength);
    EXPECT_EQ(short_tokens, short_alone) << "arrival step " << arrival;
  }
}

// Issue 8: when pool pressure evicts part of a long cached prompt, what stays is its head, and a
// later request with that prompt reuses the longest prefix still cached (eviction used to take the
// first block first, which made every later block of the prefix unreachable).
TEST_F(EngineTest, EvictionKeepsTheLongestPrefixUsable) {
  EngineOptions o;
  o.kv_pool_tokens = 512 + 16;  // the floor: one context plus a block (33 blocks)
  auto engine = make_engine(o);
  auto long_prompt = prompt(320, 51);  // 20 full blocks, then cached
  auto expected = generate(*engine, greedy(long_prompt, 4))->tokens;
  // Another prompt needs 17 blocks: 12 of the 33 are free, so 5 cached ones are evicted.
  generate(*engine, greedy(prompt(250, 52), 8));
  auto again = generate(*engine, greedy(long_prompt, 4));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->tokens, expected);
  EXPECT_GE(again->cached_tokens, 14 * 16) << "the head of the prefix must survive the eviction";
  EXPECT_LT(again->cached_tokens, 20 * 16) << "the test must evict part of the prefix";
}

// A token's result must not depend on how many tokens its step held: the prompt prefilled in one
// step, in 16-token chunks, or as the tail of a prefix-cache hit gives bit-identical logprobs.
// Regression (issue 10's restart bench): matmuls of >= 128 tokens took OpenBLAS sgemm and smaller
// ones the row kernels, which round differently, so a cache hit could change greedy output.
TEST(BatchInvariance, OneStepChunksAndCacheHitGiveBitIdenticalLogprobs) {
  for (gguf::TensorType type : {gguf::TensorType::kF16, gguf::TensorType::kQ8_0}) {
    SCOPED_TRACE(gguf::tensor_type_name(type));
    auto model = Model::load(testing::test_model_path("tiny", type));
    ASSERT_TRUE(model.has_value()) << model.status().to_string();
    const int nv = (*model)->config().n_vocab;
    std::vector<TokenId> p;
    for (int i = 0; i < 300; ++i) p.push_back(static_cast<TokenId>((i * 37 + 11) % nv));
    GenerationRequest r;
    r.prompt = p;
    r.max_tokens = 8;
    r.stop_at_end_of_generation = false;
    auto run = [&](EngineOptions o, bool warm_prefix) {
      o.n_ctx = 512;
      o.n_threads = 2;
      auto engine = Engine::create(**model, o);
      EXPECT_TRUE(engine.has_value());
      if (warm_prefix) {
        GenerationRequest head = r;
        head.prompt.resize(256);
        head.max_tokens = 1;
        EXPECT_TRUE(generate(**engine, head).has_value());
      }
      auto out = generate(**engine, r);
      EXPECT_TRUE(out.has_value());
      if (warm_prefix) { EXPECT_EQ(out->cached_tokens, 256); }
      return *out;
    };
    EngineOptions one_step;
    one_step.prefix_cache = false;
    one_step.prefill_chunk = 512;  // the whole prompt in one 300-token step
    EngineOptions chunked = one_step;
    chunked.prefill_chunk = 16;
    const GenerationResult a = run(one_step, false), b = run(chunked, false), c = run(EngineOptions{}, true);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.tokens, c.tokens);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    ASSERT_EQ(a.logprobs.size(), c.logprobs.size());
    for (std::size_t i = 0; i < a.logprobs.size(); ++i) {
      EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << "token " << i << ": one step vs 16-token chunks";
      EXPECT_EQ(a.logprobs[i], c.logprobs[i]) << "token " << i << ": one step vs a 256-token cache hit";
    }
  }
}

// A model loaded with prepare_in_background (how the server's first start loads it) answers from
// the file mapping while its weights are copied, and the copy is swapped in while the engine
// decodes: four concurrent greedy requests, the swap let go at the engine's tenth step, give the
// tokens of a model prepared before serving, and so do the same prompts after the swap (their
// prefixes then hits on KV computed before it). F32 weights keep their layout on every SIMD path,
// so all of them go to the background copy. Under TSan: the engine thread's passes against the
// copy thread's swap.
TEST(EngineBackgroundWeights, SwapWhileDecodingChangesNoGreedyOutput) {
  const std::string path = testing::test_model_path("tiny", gguf::TensorType::kF32);
  auto prompt = [](int i) {
    std::vector<TokenId> t;
    for (int k = 0; k < 20 + 9 * i; ++k) t.push_back(static_cast<TokenId>((k * 37 + i * 101 + 3) % 200));
    return t;
  };
  auto request = [&](int i) {
    GenerationRequest r;
    r.prompt = prompt(i);
    r.max_tokens = 24;
    r.stop_at_end_of_generation = false;
    return r;
  };
  EngineOptions eo;
  eo.n_ctx = 512;
  eo.n_threads = 2;
  std::vector<std::vector<TokenId>> expected;
  {
    auto prepared = Model::load(path);
    ASSERT_TRUE(prepared.has_value()) << prepared.status().to_string();
    auto engine = Engine::create(**prepared, eo);
    ASSERT_TRUE(engine.has_value());
    for (int i = 0; i < 4; ++i) expected.push_back(generate(**engine, request(i))->tokens);
  }
  auto gate = std::make_shared<testing::SwapGate>();
  ModelLoadOptions o;
  o.prepare_in_background = true;
  o.before_weights_swap = [gate] { gate->wait(); };
  auto loaded = Model::load(path, o);
  ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
  const std::unique_ptr<Model> model = std::move(*loaded);
  testing::SwapGate::LetGoOnExit let_go_on_exit{gate};
  ASSERT_GT(model->load_report().background_bytes, 0u);
  ASSERT_FALSE(model->weights_prepared());
  auto created = Engine::create(*model, eo);
  ASSERT_TRUE(created.has_value());
  Engine& engine = **created;

  std::atomic<bool> clients_done{false};
  std::int64_t steps_at_swap = -1;
  std::thread releaser([&] {
    while (engine.stats().steps < 10 && !clients_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    gate->let_go();
    model->wait_weights_prepared();
    steps_at_swap = engine.stats().steps;
  });
  std::vector<std::vector<TokenId>> got(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      auto r = generate(engine, request(i));
      if (r) got[static_cast<std::size_t>(i)] = r->tokens;
    });
  }
  for (auto& c : clients) c.join();
  const std::int64_t steps_at_end = engine.stats().steps;
  clients_done = true;
  releaser.join();
  EXPECT_TRUE(model->weights_prepared());
  EXPECT_GE(steps_at_swap, 10);
  EXPECT_LT(steps_at_swap, steps_at_end) << "the swap came after the last step: nothing decoded across it";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], expected[static_cast<std::size_t>(i)]) << "request " << i;
  for (int i = 0; i < 4; ++i) {
    auto again = generate(engine, request(i));
    ASSERT_TRUE(again.has_value());
    EXPECT_GT(again->cached_tokens, 0) << "request " << i;
    EXPECT_EQ(again->tokens, expected[static_cast<std::size_t>(i)]) << "request " << i << " after the swap";
  }
}

}  // namespace
}  // namespace kvstash
