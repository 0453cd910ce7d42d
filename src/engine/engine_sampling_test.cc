// The sampling knobs and constrained decoding through the engine on a generated tiny model:
// logit_bias -100 keeps a token out of every output, greedy and sampled; penalties change the
// greedy output; under a grammar the output is a sentence of it and ends with an end token only
// where the grammar accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "model/model.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

class EngineSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    EngineOptions o;
    o.n_ctx = 512;
    o.n_threads = 2;
    auto e = Engine::create(*model_, o);
    ASSERT_TRUE(e.has_value());
    engine_ = std::move(*e);
  }
  static GenerationRequest request(int n, bool stop_at_eog = false) {
    GenerationRequest r;
    for (int i = 0; i < 12; ++i) r.prompt.push_back(static_cast<TokenId>((i * 37 + 11) % model_->config().n_vocab));
    r.max_tokens = n;
    r.stop_at_end_of_generation = stop_at_eog;
    return r;
  }
  std::vector<TokenId> run(GenerationRequest r) {
    auto out = generate(*engine_, std::move(r));
    EXPECT_TRUE(out.has_value());
    return out ? out->tokens : std::vector<TokenId>{};
  }
  static Model* model_;
  std::unique_ptr<Engine> engine_;
};
Model* EngineSamplingTest::model_ = nullptr;

TEST_F(EngineSamplingTest, BannedTokensNeverAppear) {
  const std::vector<TokenId> greedy = run(request(16));
  ASSERT_EQ(greedy.size(), 16u);
  std::set<TokenId> banned(greedy.begin(), greedy.end());
  GenerationRequest r = request(16);
  for (TokenId t : banned) r.sampling.logit_bias.emplace_back(t, -100.0f);
  for (TokenId t : run(r)) EXPECT_FALSE(banned.count(t)) << t;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    GenerationRequest s = r;
    s.sampling.temperature = 1.0f;
    s.sampling.seed = seed;
    for (TokenId t : run(s)) ASSERT_FALSE(banned.count(t)) << "seed " << seed << " token " << t;
  }
}

TEST_F(EngineSamplingTest, PenalisedGreedyOutputRepeatsLess) {
  const std::vector<TokenId> plain = run(request(40));
  GenerationRequest r = request(40);
  r.sampling.presence_penalty = 2.0f;
  r.sampling.frequency_penalty = 2.0f;
  const std::vector<TokenId> penalised = run(r);
  auto distinct = [](const std::vector<TokenId>& v) { return std::set<TokenId>(v.begin(), v.end()).size(); };
  EXPECT_NE(plain, penalised);
  EXPECT_GE(distinct(penalised), distinct(plain));
}

TEST_F(EngineSamplingTest, UnderAGrammarTheOutputIsASentenceAndEndsWithAnEndToken) {
  const Tokenizer& tok = model_->tokenizer();
  std::vector<std::string> bytes;
  std::vector<grammar::TokenIndex> eog;
  for (std::size_t i = 0; i < tok.vocab_size(); ++i) {
    bytes.push_back(tok.token_to_piece(static_cast<TokenId>(i)));
    if (tok.is_end_of_generation(static_cast<TokenId>(i))) eog.push_back(static_cast<TokenId>(i));
  }
  ASSERT_FALSE(eog.empty());
  grammar::GrammarCache cache(grammar::TokenVocabulary::create(bytes, eog));
  auto g = cache.json_schema(R"({"enum": ["yes", "no", 12, true]})");
  ASSERT_TRUE(g) << g.status().to_string();
  for (std::uint64_t seed = 0; seed <= 10; ++seed) {
    GenerationRequest r = request(40, /*stop_at_eog=*/true);
    r.sampling.grammar = *g;
    r.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
    r.sampling.seed = seed;
    auto out = generate(*engine_, r);
    ASSERT_TRUE(out.has_value());
    ASSERT_EQ(out->finish, FinishReason::kStop) << out->error;
    ASSERT_FALSE(out->tokens.empty());
    EXPECT_TRUE(tok.is_end_of_generation(out->tokens.back()));
    std::vector<TokenId> text(out->tokens.begin(), out->tokens.end() - 1);
    std::string s = tok.decode(text);
    s.erase(0, s.find_first_not_of(" \n"));
    s.erase(s.find_last_not_of(" \n") + 1);
    EXPECT_TRUE(s == "\"yes\"" || s == "\"no\"" || s == "12" || s == "true") << "seed " << seed << ": '" << s << "'";
  }
}

}  // namespace
}  // namespace kvstash
