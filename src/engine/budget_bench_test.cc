// The budget-vs-full decode comparison (engine/budget_bench.h) and `kvstash bench-engine
// --kv-budget`: refused settings, the KV each side holds, the compactions' counts, and exact
// agreement of the two sides while nothing is evicted. No timing is asserted.
#include "engine/budget_bench.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/cli_test_util.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

class BudgetBenchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::test_model_path("tiny", gguf::TensorType::kF16));
    ASSERT_TRUE(m.has_value()) << m.status().to_string();
    model_ = std::move(m.value()).release();
  }
  static void TearDownTestSuite() { delete model_; }

  static BudgetBenchOptions options(int context, int budget, int steps) {
    BudgetBenchOptions o;
    o.context = context;
    o.decode_steps = steps;
    o.budget.budget = budget;
    o.budget.compact_every = 64;
    o.budget.sinks = 4;
    o.budget.recent = 64;
    return o;
  }
  static Model* model_;
};
Model* BudgetBenchTest::model_ = nullptr;

TEST_F(BudgetBenchTest, RefusesABudgetTheEngineWouldRefuseNamingTheNumbers) {
  ThreadPool threads(1);
  auto o = options(300, 100, 4);  // needs 4 sinks + 64 recent + a 16-token block + 64 evicted = 148
  auto r = measure_budget_decode(*model_, o, threads);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("148"), std::string::npos) << r.status().to_string();
  o.budget.budget = 0;
  EXPECT_FALSE(measure_budget_decode(*model_, o, threads).has_value());
  o = options(0, 256, 4);
  EXPECT_FALSE(measure_budget_decode(*model_, o, threads).has_value());
}

TEST_F(BudgetBenchTest, BudgetedSideStaysWithinItsBudgetAndFreesTheBlocksItEvicts) {
  ThreadPool threads(2);
  // 600 tokens of context, a 256-slot budget: compacted to 192 slots before the timed steps,
  // again at step 64 (192 + 64 = 256), and once more after the fill to 256.
  auto r = measure_budget_decode(*model_, options(600, 256, 80), threads);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->full.kv_slots, 680);
  EXPECT_EQ(r->full.kv_blocks_max, 43);  // ceil(680 / 16): every token kept
  EXPECT_EQ(r->budget.kv_slots, 192 + 16);
  EXPECT_LE(r->budget.kv_blocks_max, 256 / 16);  // the budget exactly: 256 slots are 16 blocks
  EXPECT_EQ(r->compactions, 3);
  EXPECT_EQ(r->tokens_evicted, (600 - 192) + 64 + 64);
  EXPECT_GE(r->blocks_freed * 16, 0.9 * r->tokens_evicted);
  EXPECT_GT(r->first_compaction_s, 0);
  EXPECT_GT(r->steady_compaction_s, 0);
  EXPECT_GT(r->full.median_step_s, 0);
  EXPECT_GT(r->budget.median_step_s, 0);
  EXPECT_GE(r->top1_agreement, 0.0);
  EXPECT_LE(r->top1_agreement, 1.0);
}

TEST_F(BudgetBenchTest, WhileNothingIsEvictedBothSidesComputeTheSameLogits) {
  // The budgeted side shares the full side's blocks, copies its tail block and writes at its own
  // slots: with nothing evicted, its logits must be the full side's, bit for bit.
  ThreadPool threads(2);
  auto r = measure_budget_decode(*model_, options(100, 512, 8), threads);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->max_abs_logit_diff, 0.0f);
  EXPECT_EQ(r->top1_agreement, 1.0);
  EXPECT_EQ(r->first_compaction_s, 0.0);
  EXPECT_EQ(r->compactions, 1);  // only the steady one, after the fill to the budget
  EXPECT_EQ(r->budget.kv_slots, 108);
  EXPECT_EQ(r->full.kv_slots, 108);
}

using kvstash::testing::run_kvstash;

TEST_F(BudgetBenchTest, BenchEnginePrintsBothFiguresAndRefusesASmallBudget) {
  ASSERT_TRUE(std::filesystem::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
  const std::string model = testing::test_model_path("tiny", gguf::TensorType::kF16);
  std::string out;
  ASSERT_EQ(run_kvstash("bench-engine -m " + model +
                            " -t 1 --json --decode-context 300 --decode-tokens 4 --kv-budget 256 --kv-compact-every 64 --kv-recent 64",
                        out),
            0)
      << out;
  for (const char* key : {"\"full_decode_tokens_per_s\"", "\"budget_decode_tokens_per_s\"", "\"budget_vs_full\"",
                          "\"budget_decode_tokens_per_s_with_compaction\""}) {
    EXPECT_NE(out.find(key), std::string::npos) << key << " missing from " << out;
  }
  EXPECT_NE(out.find("\"full_kv_blocks\": 19"), std::string::npos) << out;       // ceil(304 / 16)
  EXPECT_NE(out.find("\"budget_kv_slots\": 196"), std::string::npos) << out;     // 192 + 4 steps
  EXPECT_NE(out.find("\"budget_kv_blocks_max\": 16"), std::string::npos) << out;  // 256 / 16

  // The default protected sets: 4 sinks + 128 recent + one 16-token block + 128 evicted = 276.
  out.clear();
  EXPECT_EQ(run_kvstash("bench-engine -m " + model + " -t 1 --decode-context 300 --kv-budget 200", out), 1) << out;
  EXPECT_NE(out.find("at least 276"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvstash
