// The Embedder against an embedding computed independently: the double-precision reference model's
// final hidden states (model/reference_model_for_test.h, no code shared with the kernels),
// mean-pooled and L2-normalised here.
#include "engine/embedder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "model/model.h"
#include "model/reference_model_for_test.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

std::vector<double> reference_embedding(const Model& model, const std::vector<int>& tokens) {
  const std::vector<std::vector<double>> hidden = testing::ReferenceModel(model.file()).final_hidden(tokens);
  std::vector<double> mean(hidden[0].size(), 0.0);
  for (const auto& row : hidden) {
    for (std::size_t i = 0; i < row.size(); ++i) mean[i] += row[i] / static_cast<double>(hidden.size());
  }
  double norm = 0;
  for (double v : mean) norm += v * v;
  for (double& v : mean) v /= std::sqrt(norm);
  return mean;
}

TEST(Embedder, EqualsTheReferenceMeanPoolOfFinalNormHiddenStates) {
  auto model = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF32));
  ASSERT_TRUE(model) << model.status().to_string();
  Embedder embedder(**model, {.max_tokens = 64, .n_threads = 2});
  for (const std::vector<int>& tokens : {std::vector<int>{5}, std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
                                         std::vector<int>{100, 7, 42, 42, 3}}) {
    Expected<std::vector<float>> got = embedder.embed(std::vector<TokenId>(tokens.begin(), tokens.end()));
    ASSERT_TRUE(got) << got.status().to_string();
    const std::vector<double> want = reference_embedding(**model, tokens);
    ASSERT_EQ(got->size(), want.size());
    double dot = 0, norm = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR((*got)[i], want[i], 2e-3) << "dimension " << i;  // f16 KV and float kernels vs double
      dot += (*got)[i] * want[i];
      norm += double((*got)[i]) * (*got)[i];
    }
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
    EXPECT_GT(dot, 0.9999);
  }
}

TEST(Embedder, RefusesEmptyTooLongAndOutOfRangeInputs) {
  auto model = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
  ASSERT_TRUE(model);
  Embedder embedder(**model, {.max_tokens = 8, .n_threads = 1});
  EXPECT_EQ(embedder.embed({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(embedder.embed(std::vector<TokenId>(9, 1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(embedder.embed(std::vector<TokenId>{(*model)->config().n_vocab}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(embedder.embed(std::vector<TokenId>(8, 1)));
}

// Calls from several threads are serialised and give the same bytes as one thread.
TEST(Embedder, ConcurrentCallsGiveTheSameEmbedding) {
  auto model = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
  ASSERT_TRUE(model);
  Embedder embedder(**model);
  const std::vector<TokenId> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::vector<float> want = *embedder.embed(tokens);
  std::vector<std::thread> threads;
  std::atomic<int> same{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) same += *embedder.embed(tokens) == want ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(same.load(), 20);
}

}  // namespace
}  // namespace kvstash
