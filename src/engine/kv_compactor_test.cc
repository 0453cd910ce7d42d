// KV budgets and compaction (issue 16): settings, exactness without eviction, blocks freed, the
// prefix cache and the store left untouched, and eviction quality against full attention.
#include "engine/kv_compactor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "cache/chunk_key.h"
#include "cache/memory_tier.h"
#include "cache/tiered_store.h"
#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

class KvCompactorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() { delete model_; }

  static KvBudgetOptions budget(int tokens) {
    KvBudgetOptions b;
    b.budget = tokens;
    b.compact_every = 64;
    b.sinks = 4;
    b.recent = 64;
    return b;
  }
  static std::unique_ptr<Engine> make_engine(KvBudgetOptions b, cache::TieredStore* store = nullptr) {
    EngineOptions o;
    o.n_ctx = 2048;
    o.n_threads = 2;
    o.kv_budget = b;
    o.kv_store = store;
    o.chunk_tokens = 64;
    auto e = Engine::create(*model_, o);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return e ? std::move(e.value()) : nullptr;
  }
  static GenerationRequest request(int n_prompt, int n_new, int salt) {
    GenerationRequest r;
    for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(static_cast<TokenId>((i * 53 + salt * 211 + 3) % model_->config().n_vocab));
    r.max_tokens = n_new;
    r.stop_at_end_of_generation = false;
    return r;
  }
  static Model* model_;
};
Model* KvCompactorTest::model_ = nullptr;

TEST_F(KvCompactorTest, BadBudgetsAreRefusedNamingTheNumbers) {
  Status st = validate_budget(budget(100), 16);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("at least 148"), std::string::npos) << st.message();  // 4 + 64 + 16 + 64
  EXPECT_TRUE(validate_budget(budget(0), 16).is_ok());
  EngineOptions o;
  o.kv_budget = budget(100);
  EXPECT_EQ(Engine::create(*model_, o).status().code(), StatusCode::kInvalidArgument);
  auto engine = make_engine(budget(0));
  auto r = request(10, 4, 1);
  r.kv_budget = 20;
  EXPECT_EQ(engine->submit(r, [](const TokenEvent&) {}).status().code(), StatusCode::kInvalidArgument);
  r.kv_budget = -2;
  EXPECT_EQ(engine->submit(r, [](const TokenEvent&) {}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(KvCompactorTest, BudgetAtLeastTheSequenceGivesTheFullAttentionOutput) {
  auto full = make_engine(budget(0));
  auto with_budget = make_engine(budget(1024));
  auto req = request(100, 300, 2);  // 400 tokens < 1024
  auto a = generate(*full, req), b = generate(*with_budget, req);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(with_budget->stats().compactions, 0);
}

// Every compaction frees whole blocks: evicting compact_every tokens returns compact_every / block
// size blocks, and the sequence's KV never exceeds its budget (plus the partly filled block).
TEST_F(KvCompactorTest, CompactionFreesWholeBlocksAndStaysWithinBudget) {
  auto engine = make_engine(budget(256));
  std::int64_t max_used = 0;
  auto req = request(50, 1200, 3);
  auto r = generate(*engine, req, [&](TokenId) { max_used = std::max(max_used, engine->stats().kv_blocks_used); });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->tokens.size(), 1200u);
  const EngineStats st = engine->stats();
  EXPECT_GE(st.compactions, 10);
  EXPECT_EQ(st.kv_tokens_evicted, st.compactions * 64);
  EXPECT_GE(static_cast<double>(st.kv_blocks_freed) / (static_cast<double>(st.kv_tokens_evicted) / 16), 0.9);
  EXPECT_LE(max_used, 256 / 16 + 2);
}

// Another sequence's compaction never changes a shared prefix block: a budgeted request that
// reuses a cached prompt compacts (copy-on-write), and the prompt's own output stays the same.
TEST_F(KvCompactorTest, SharedPrefixBlocksAreNeverChangedByCompaction) {
  auto engine = make_engine(budget(0));
  auto base = request(300, 16, 4);
  const auto expected = generate(*engine, base)->tokens;
  auto budgeted = base;
  budgeted.max_tokens = 600;
  budgeted.kv_budget = 256;
  std::thread other([&] { EXPECT_EQ(generate(*engine, budgeted)->cached_tokens, 288); });
  other.join();
  EXPECT_GT(engine->stats().compactions, 0);
  auto again = generate(*engine, base);
  EXPECT_EQ(again->cached_tokens, 288) << "the prompt's blocks must still be cached";
  EXPECT_EQ(again->tokens, expected) << "a compaction changed a shared prefix block";
}

// Compacted KV is not the KV of its prefix: never registered in the pool, never stored.
TEST_F(KvCompactorTest, CompactedSequencesNeverEnterThePrefixCacheOrTheStore) {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(256 << 20));
  cache::TieredStore store(std::move(tiers));
  auto engine = make_engine(budget(256), &store);
  auto req = request(40, 700, 5);
  auto r = generate(*engine, req);
  ASSERT_TRUE(r.has_value());
  store.flush();
  // Before its first compaction the sequence held 256 tokens: 4 chunks of 64 at most were stored,
  // each with the 3 prefix aliases of its leading blocks, + a prompt tail of 2 blocks (and its alias).
  EXPECT_LE(store.tier_stats()[0].stats.entries, 4u * 4u + 2u);
  auto next = req;
  next.prompt.insert(next.prompt.end(), r->tokens.begin(), r->tokens.end());
  next.max_tokens = 2;
  next.kv_budget = 0;
  const auto keys = cache::chunk_keys(model_->fingerprint(), engine->kv_format(), "", next.prompt, 64);
  EXPECT_LE(store.lookup(keys), 4u) << "chunks past the first compaction were stored";
  EXPECT_LE(generate(*engine, next)->cached_tokens, 256) << "KV past the first compaction was reused";
}

// --- Eviction quality: TriAttention scoring against a sinks + recent window and random eviction,
// on a model whose pre-RoPE Q/K sit around non-zero centres (gen-model --qk-concentration), over
// 512 decoded tokens at a budget of 25% of the context, teacher-forced on the full-attention tokens.
struct Quality {
  double top1 = 0;   // fraction of steps whose argmax equals full attention's
  double mean_kl = 0;  // mean KL(full || budgeted) of the next-token distribution
};

std::vector<double> softmax(const float* logits, int n) {
  std::vector<double> p(static_cast<std::size_t>(n));
  const double mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += p[static_cast<std::size_t>(i)] = std::exp(static_cast<double>(logits[i]) - mx);
  for (double& v : p) v /= sum;
  return p;
}

// Runs the prompt, then n_steps - 1 single-token steps: the forced tokens when given, else the
// greedy ones. Every step's logits go to `out` (n_steps rows), the tokens fed after the prompt to
// `tokens`. Compacts at o.budget slots (0 = never) with o.policy.
void run_steps(const Model& model, const std::vector<TokenId>& prompt, int n_steps, const KvBudgetOptions& o,
               const std::vector<TokenId>* forced, std::vector<std::vector<float>>& out, std::vector<TokenId>& tokens) {
  const int bs = 16, nv = model.config().n_vocab;
  BlockPool pool(model.config(), bs, (static_cast<int>(prompt.size()) + n_steps) / bs + 4);
  std::vector<std::int32_t> table;
  KvCompactionState state;
  state.rng.seed(o.seed);
  auto calibrated = calibrate_queries(model, 256);  // as the engine does
  ASSERT_TRUE(calibrated.has_value());
  state.queries = std::make_shared<const QueryStats>(std::move(*calibrated));
  ThreadPool threads(1);
  int pos = 0;
  auto step = [&](std::span<const TokenId> toks) {
    const int n = static_cast<int>(toks.size());
    const int slots = static_cast<int>(state.slot_positions.size());
    while (static_cast<int>(table.size()) * bs < slots + n) table.push_back(*pool.allocate());
    ForwardBatch batch;
    batch.tokens.assign(toks.begin(), toks.end());
    BatchSequence s;
    s.block_table = table.data();
    s.n_blocks = static_cast<int>(table.size());
    s.pos_start = pos;
    s.slot_start = slots;
    s.n_new = n;
    batch.sequences.push_back(s);
    std::vector<float> logits(static_cast<std::size_t>(nv));
    ASSERT_TRUE(model.forward(batch, pool.view(), logits.data(), threads).is_ok());
    for (int i = 0; i < n; ++i) state.slot_positions.push_back(pos + i);
    pos += n;
    out.push_back(std::move(logits));
    if (o.budget > 0 && static_cast<int>(state.slot_positions.size()) >= o.budget) {
      auto kept = choose_survivors(o, model, pool.view(), table, state, o.budget - o.compact_every);
      ASSERT_TRUE(compact_slots(pool, table, state, kept).done);
    }
  };
  step(prompt);
  for (int t = 0; t + 1 < n_steps; ++t) {
    const auto& last = out.back();
    const TokenId next = forced ? (*forced)[static_cast<std::size_t>(t)]
                                : static_cast<TokenId>(std::max_element(last.begin(), last.end()) - last.begin());
    tokens.push_back(next);
    step(std::span<const TokenId>(&next, 1));
  }
}

TEST(KvCompactionQuality, TriAttentionBeatsWindowAndRandomEvictionOnConcentratedQK) {
  const std::string path = std::string(KVSTASH_BINARY_DIR) + "/test-models/tiny-concentrated-qk-f16.gguf";
  if (!std::filesystem::exists(path)) {
    modelgen::GenerateOptions g;
    g.preset = "tiny";
    g.type = gguf::TensorType::kF16;
    g.qk_concentration = 1.0f;
    g.out_path = path;
    ASSERT_TRUE(modelgen::generate_model(g).is_ok());
  }
  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
  const Model& model = **loaded;
  const int nv = model.config().n_vocab, n_decode = 512, n_prompt = 128;
  std::vector<TokenId> prompt;
  for (int i = 0; i < n_prompt; ++i) prompt.push_back(static_cast<TokenId>((i * 97 + 11) % nv));
  // Full attention, greedy: the reference tokens and distributions.
  std::vector<TokenId> forced;
  std::vector<std::vector<float>> full;
  run_steps(model, prompt, n_decode, KvBudgetOptions{}, nullptr, full, forced);
  ASSERT_EQ(static_cast<int>(full.size()), n_decode);
  const int budget_tokens = (n_prompt + n_decode) / 4;  // 25% of the context
  auto measure = [&](EvictionPolicy policy) {
    KvBudgetOptions o;
    o.budget = budget_tokens;
    o.compact_every = 32;
    o.sinks = 4;
    o.recent = 32;
    o.policy = policy;
    o.seed = 7;
    std::vector<std::vector<float>> got;
    std::vector<TokenId> fed;
    run_steps(model, prompt, n_decode, o, &forced, got, fed);
    Quality q;
    for (int t = 0; t < n_decode; ++t) {
      const auto& f = full[static_cast<std::size_t>(t)];
      const auto& g = got[static_cast<std::size_t>(t)];
      q.top1 += (std::max_element(f.begin(), f.end()) - f.begin()) == (std::max_element(g.begin(), g.end()) - g.begin());
      const auto p = softmax(f.data(), nv), r = softmax(g.data(), nv);
      double kl = 0;
      for (int i = 0; i < nv; ++i) kl += p[static_cast<std::size_t>(i)] * std::log(p[static_cast<std::size_t>(i)] / std::max(r[static_cast<std::size_t>(i)], 1e-300));
      q.mean_kl += kl;
    }
    q.top1 /= n_decode;
    q.mean_kl /= n_decode;
    return q;
  };
  const Quality tri = measure(EvictionPolicy::kTriAttention), window = measure(EvictionPolicy::kWindow),
                random = measure(EvictionPolicy::kRandom);
  std::printf("budget %d of %d tokens: top-1 agreement / mean KL: triattention %.3f / %.4f, window %.3f / %.4f, random %.3f / %.4f\n",
              budget_tokens, n_prompt + n_decode, tri.top1, tri.mean_kl, window.top1, window.mean_kl, random.top1, random.mean_kl);
  EXPECT_LT(tri.mean_kl, window.mean_kl);
  EXPECT_LT(tri.mean_kl, random.mean_kl);
  EXPECT_GE(tri.top1, window.top1);
  EXPECT_GE(tri.top1, random.top1);
}

}  // namespace
}  // namespace kvstash
