// Window layers' KV freed as sequences grow (engine/block_pool.h, split pools): greedy output on
// window models (gemma3-tiny: 6 of 7 layers with a window of 8; gpt-oss-tiny: 2 of 4; mistral-tiny:
// every layer, so no full-layer KV at all) is token for
// token a plain forward pass's over an unsplit pool (model.h), and the same with freeing off, through
// chunked prefill, preemption, prefix-cache hits (at the end of a conversation: used; behind freed
// window KV: refused and recomputed), forks, speculative decoding and a store round trip; and the
// window group's blocks held stay bounded by the window, not the sequence's length.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cache/memory_tier.h"
#include "cache/tiered_store.h"
#include "common/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

constexpr int kBlock = 4;   // small blocks: a window of 8 spans 2-3 of them, so many are freed
constexpr int kChunk = 16;  // prefill chunk: several steps per prompt, freeing between them

class WindowKvTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto m = Model::load(testing::test_model_path(GetParam(), gguf::TensorType::kF32));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    model_ = std::move(m.value());
  }

  std::unique_ptr<Engine> make_engine(EngineOptions o = {}) {
    o.n_ctx = 256;
    o.n_threads = 2;
    o.block_size = kBlock;
    o.prefill_chunk = kChunk;
    auto e = Engine::create(*model_, o);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return std::move(e.value());
  }
  GenerationRequest request(const std::vector<TokenId>& prompt, int max_tokens) const {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;  // greedy
    r.stop_at_end_of_generation = false;  // random weights: the full length every time
    return r;
  }
  std::vector<TokenId> prompt(int n, int salt) const {
    std::vector<TokenId> p;
    for (int i = 0; i < n; ++i) p.push_back(static_cast<TokenId>((i * 37 + salt * 101 + 1) % model_->config().n_vocab));
    return p;
  }
  // Greedy decoding by plain forward passes over an unsplit pool of every layer's KV (no engine,
  // no freeing): the prompt in chunks of kChunk, as the engine prefills it, then a token a pass.
  std::vector<TokenId> reference(const std::vector<TokenId>& prompt, int n_gen) const {
    const int total = static_cast<int>(prompt.size()) + n_gen;
    KvPoolView kv;
    kv.set_shape(model_->config());
    kv.block_size = kBlock;
    kv.n_blocks = (total + kBlock - 1) / kBlock;
    std::vector<std::uint16_t> storage(kv.block_elems() * static_cast<std::size_t>(kv.n_blocks));
    kv.base = storage.data();
    std::vector<std::int32_t> table(static_cast<std::size_t>(kv.n_blocks));
    for (std::size_t b = 0; b < table.size(); ++b) table[b] = static_cast<std::int32_t>(b);
    ThreadPool threads(2);
    const int nv = model_->config().n_vocab;
    std::vector<float> logits(static_cast<std::size_t>(nv));
    std::vector<TokenId> out;
    int pos = 0;
    while (static_cast<int>(out.size()) < n_gen) {
      const int n_prompt = static_cast<int>(prompt.size());
      std::vector<TokenId> next;
      if (pos < n_prompt) {
        next.assign(prompt.begin() + pos, prompt.begin() + std::min(n_prompt, pos + kChunk));
      } else {
        next = {out.back()};
      }
      ForwardBatch batch;
      batch.tokens = next;
      batch.sequences.push_back({table.data(), static_cast<int>(kv.n_blocks), pos, static_cast<int>(next.size()), true, false});
      EXPECT_TRUE(model_->forward(batch, kv, logits.data(), threads).is_ok());
      pos += static_cast<int>(next.size());
      if (pos < n_prompt) continue;
      out.push_back(static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    }
    return out;
  }
  static EngineStats idle_stats(Engine& engine) {
    for (int i = 0; i < 6000 && (engine.stats().running != 0 || engine.stats().kv_blocks_used != 0); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return engine.stats();
  }
  int window() const {
    int w = 0;
    for (const LayerSpec& l : model_->config().layers) {
      if (l.attention.kind == AttentionKind::kSlidingWindow) w = std::max(w, l.attention.window);
    }
    return w;
  }

  std::unique_ptr<Model> model_;
};

INSTANTIATE_TEST_SUITE_P(Presets, WindowKvTest, ::testing::Values("gemma3-tiny", "gpt-oss-tiny", "mistral-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST_P(WindowKvTest, FreeingMatchesTheReferenceAndHoldsOnlyTheWindow) {
  ASSERT_GT(window(), 0);
  const auto p = prompt(70, 1);
  const int n_gen = 90;  // 160 tokens: 40 blocks, of which the window needs 2-3 (+ a step's)
  const auto expected = reference(p, n_gen);
  auto engine = make_engine();
  EXPECT_EQ(engine->kv_format(), "f16-blk4-v3");
  auto r = generate(*engine, request(p, n_gen));
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->tokens, expected);
  const EngineStats st = idle_stats(*engine);
  // Held at once: the blocks from the window's start to the step's last new token.
  const int bound = (window() + kChunk) / kBlock + 2;
  EXPECT_LE(st.kv_window_blocks_peak, bound);
  EXPECT_GE(st.kv_blocks_used_peak, (70 + n_gen - 1) / kBlock);
  EXPECT_LT(st.kv_layer_blocks_peak, st.kv_blocks_used_peak * model_->config().n_layers);
  EXPECT_EQ(st.kv_window_blocks_used, 0);  // every window part back once it ended

  // Freeing off: every block keeps its window part (the all-global accounting), the same output.
  EngineOptions off;
  off.free_window_kv = false;
  auto all = make_engine(off);
  auto r_off = generate(*all, request(p, n_gen));
  ASSERT_TRUE(r_off.has_value());
  EXPECT_EQ(r_off->tokens, expected);
  const EngineStats st_off = idle_stats(*all);
  EXPECT_EQ(st_off.kv_window_blocks_peak, st_off.kv_blocks_used_peak);
  EXPECT_EQ(st_off.kv_layer_blocks_peak, st_off.kv_blocks_used_peak * model_->config().n_layers);
}

TEST_P(WindowKvTest, PrefixHitAtTheEndOfAConversationIsUsedBehindFreedKvIsNot) {
  const auto p = prompt(64, 2);
  auto engine = make_engine();
  auto first = generate(*engine, request(p, 20));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->tokens, reference(p, 20));
  // The next turn: the conversation so far plus a new message. Its last window is still cached.
  std::vector<TokenId> turn = p;
  turn.insert(turn.end(), first->tokens.begin(), first->tokens.end());
  const auto more = prompt(12, 3);
  turn.insert(turn.end(), more.begin(), more.end());
  auto second = generate(*engine, request(turn, 16));
  ASSERT_TRUE(second.has_value());
  EXPECT_GE(second->cached_tokens, 64) << "the conversation's prefix is reused";
  EXPECT_EQ(second->tokens, reference(turn, 16));
  // A prompt sharing only the conversation's first 32 tokens: their window KV is freed, and
  // resuming there would need it: no hit (recomputed), the same output.
  std::vector<TokenId> early(p.begin(), p.begin() + 32);
  const auto other = prompt(10, 4);
  early.insert(early.end(), other.begin(), other.end());
  auto third = generate(*engine, request(early, 16));
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->cached_tokens, 0);
  EXPECT_EQ(third->tokens, reference(early, 16));
}

TEST_P(WindowKvTest, PreemptionForksAndDraftsKeepTheOutput) {
  // A pool of n_ctx + a block for three 150-token sequences: preemptions.
  EngineOptions o;
  o.kv_pool_tokens = 1;  // raised to the minimum, n_ctx + a block
  o.speculative.draft = DraftKind::kNgram;
  auto engine = make_engine(o);
  std::vector<std::vector<TokenId>> prompts = {prompt(60, 5), prompt(50, 6), prompt(40, 7)};
  // A repetitive prompt so that drafts are accepted.
  for (int i = 0; i < 30; ++i) prompts[2].push_back(prompts[2][static_cast<std::size_t>(i % 6)]);
  std::vector<std::thread> clients;
  std::vector<std::vector<TokenId>> got(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      auto r = generate(*engine, request(prompts[i], 90));
      if (r.has_value()) got[i] = r->tokens;
    });
  }
  for (auto& c : clients) c.join();
  for (std::size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], reference(prompts[i], 90)) << "sequence " << i;
  EngineStats st = idle_stats(*engine);
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.kv_window_blocks_used, 0);

  // n = 3 greedy choices fork on a 42-token prompt (a partial block copied on write).
  GenerationRequest n3 = request(prompt(42, 8), 40);
  n3.n = 3;
  auto choices = generate_choices(*engine, n3);
  ASSERT_TRUE(choices.has_value());
  const auto expected = reference(n3.prompt, 40);
  for (const auto& c : *choices) EXPECT_EQ(c.tokens, expected);
  st = idle_stats(*engine);
  EXPECT_EQ(st.kv_window_blocks_used, 0);
}

TEST_P(WindowKvTest, StoredChunksCarryTheWindowLayersAndResume) {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(64 << 20));
  cache::TieredStoreOptions so;
  so.tier_timeout = std::chrono::minutes(10);
  cache::TieredStore store(std::move(tiers), so);
  EngineOptions o;
  o.kv_store = &store;
  o.chunk_tokens = 32;
  o.store_load_timeout = std::chrono::minutes(10);
  const auto p = prompt(100, 9);
  const auto expected = reference(p, 30);
  {
    auto a = make_engine(o);
    auto r = generate(*a, request(p, 30));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->tokens, expected);
    EXPECT_GE(a->stats().chunks_stored, 3);
    EXPECT_EQ(a->stats().chunks_not_stored_window, 0);
  }
  store.flush();
  auto b = make_engine(o);  // an empty pool: only the store can serve the prefix
  auto r = generate(*b, request(p, 30));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cached_tokens, 96);
  EXPECT_EQ(r->tokens, expected);
}

}  // namespace
}  // namespace kvstash
