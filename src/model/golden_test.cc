// The forward pass against llama.cpp: golden outputs recorded by scripts/record-golden.sh (llama-
// server on the same generated F32 files, F32 KV, no flash attention) for 5 fixed prompts and 32
// greedy tokens each. Every step's greedy token must be llama.cpp's, and the log-probabilities of
// its top 5 within 0.08 nats of ours. Decoding feeds llama.cpp's tokens, so a step is compared on
// exactly the context llama.cpp had. The fixture's "banned" ids (single bytes that are not UTF-8 on
// their own, for which llama-server reports no probabilities) were never sampled there: the greedy
// token is the best of the other ids, the log-probabilities those of the unbiased distribution.
//
// One exception, proved per step rather than assumed: the engine keeps K and V in f16, llama.cpp
// here in F32. Where a token's routing is a near-tie (gpt-oss-tiny: router logits 4e-5 apart), that
// rounding alone may pick another expert and move later steps by 0.1-0.2 nats. A step that misses
// llama.cpp passes only if (1) the double-precision reference (model/reference_model_for_test.h)
// gives llama.cpp's numbers at that step (within 1e-3: llama.cpp computed exactly what it should)
// and (2) the same reference with only K and V rounded to f16 gives the engine's numbers (within
// 1e-2, the same greedy token): the difference is the KV rounding and nothing else. At most 8 of
// a preset's 160 steps may be such steps.
//
// ExactReference: the double reference itself against llama.cpp, every step (1e-4 nats; gemma3's
// GELU is llama.cpp's f16 table there, the exact function here: 5e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "model/model.h"
#include "model/llama_cpp_golden.h"
#include "model/reference_model_for_test.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

namespace fs = std::filesystem;
const fs::path kGoldenDir = fs::path(__FILE__).parent_path() / "testdata" / "golden";
constexpr double kLogprobTolerance = 0.08;  // nats (issue 32)
constexpr int kBlockSize = 16;

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return to_hex(sha256(bytes.data(), bytes.size()));
}

std::vector<double> log_softmax(const float* logits, int n) {
  const double mx = *std::max_element(logits, logits + n);
  double z = 0;
  for (int i = 0; i < n; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = static_cast<double>(logits[i]) - mx - std::log(z);
  return out;
}

constexpr double kExplainedByReference = 1e-3;  // nats: the exact reference vs llama.cpp at a missed step
constexpr double kExplainedByKvRounding = 1e-2;  // nats: the f16-KV reference vs the engine there
constexpr int kMostKvRoundingSteps = 8;

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// The id with the largest value of `row` that is not banned.
template <typename Row>
TokenId best_allowed(const Row& row, const std::vector<bool>& banned) {
  TokenId best = -1;
  for (std::size_t i = 0; i < banned.size(); ++i) {
    if (!banned[i] && (best < 0 || row[i] > row[static_cast<std::size_t>(best)])) best = static_cast<TokenId>(i);
  }
  return best;
}

std::vector<double> log_softmax(const std::vector<double>& logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (double v : logits) z += std::exp(v - mx);
  std::vector<double> out(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - mx - std::log(z);
  return out;
}

struct Fixture {
  nlohmann::json doc;
  std::string path;  // the generated model it was recorded on
};

Fixture read_fixture(const std::string& preset) {
  std::ifstream in(kGoldenDir / (preset + ".json"));
  EXPECT_TRUE(in) << "no fixture for " << preset << " in " << kGoldenDir << " (scripts/record-golden.sh)";
  Fixture f{in ? nlohmann::json::parse(in) : nlohmann::json(), testing::test_model_path(preset, gguf::TensorType::kF32)};
  // The fixture was recorded on this very file: same generator, preset and seed.
  if (in) {
    EXPECT_EQ(file_sha256(f.path), f.doc["model_sha256"].get<std::string>()) << f.path;
  }
  return f;
}

// The ids llama-server never sampled: the fixture's banned ones and (ignore_eos) the end of generation.
std::vector<bool> banned_ids(const nlohmann::json& golden, const gguf::File& file, int nv) {
  std::vector<bool> banned(static_cast<std::size_t>(nv));
  for (const auto& id : golden["banned"]) banned.at(id.get<std::size_t>()) = true;
  for (std::int32_t id : testing::llama_cpp_end_of_generation_ids(file)) {
    if (id >= 0 && id < nv) banned[static_cast<std::size_t>(id)] = true;
  }
  return banned;
}

// The largest difference between llama.cpp's top-5 log-probabilities at `step` and `lp`'s.
double worst_top5(const nlohmann::json& record, std::size_t step, const std::vector<double>& lp) {
  double worst = 0;
  for (const auto& entry : record["top_logprobs"][step]) {
    const auto id = entry[0].get<std::size_t>();
    if (id >= lp.size()) return 1e9;
    worst = std::max(worst, std::abs(lp[id] - entry[1].get<double>()));
  }
  return worst;
}

// The double-precision reference's log-probabilities at every step of a prompt's record: position
// prompt_len - 1 + step of the prompt followed by llama.cpp's tokens.
std::vector<std::vector<double>> reference_steps(const gguf::File& file, const nlohmann::json& record, bool kv_f16) {
  testing::ReferenceModel ref(file);
  ref.set_kv_f16(kv_f16);
  auto seq = record["prompt"].get<std::vector<int>>();
  const std::size_t np = seq.size();
  const auto tokens = record["tokens"].get<std::vector<int>>();
  seq.insert(seq.end(), tokens.begin(), tokens.end() - 1);
  const auto logits = ref.forward(seq);
  std::vector<std::vector<double>> out;
  for (std::size_t step = 0; step < tokens.size(); ++step) out.push_back(log_softmax(logits[np - 1 + step]));
  return out;
}

class Golden : public ::testing::TestWithParam<const char*> {};

INSTANTIATE_TEST_SUITE_P(LlamaCpp, Golden,
                         ::testing::Values("qwen3-tiny", "qwen3moe-tiny", "gemma3-tiny", "tiny", "phi3-tiny", "gpt-oss-tiny",
                                           "mistral3-tiny"),
                         test_name);

TEST_P(Golden, GreedyTokensAndTop5LogprobsMatchLlamaCpp) {
  const std::string preset = GetParam();
  const Fixture fixture = read_fixture(preset);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const nlohmann::json& golden = fixture.doc;
  auto model = Model::load(fixture.path);
  ASSERT_TRUE(model) << model.status().to_string();
  const int nv = (*model)->config().n_vocab;
  ThreadPool threads(2);
  const std::vector<bool> banned = banned_ids(golden, (*model)->file(), nv);
  ASSERT_EQ(golden["prompts"].size(), 5u);
  double worst_overall = 0;
  int kv_rounding_steps = 0;
  for (const auto& record : golden["prompts"]) {
    const auto prompt = record["prompt"].get<std::vector<TokenId>>();
    const auto expected = record["tokens"].get<std::vector<TokenId>>();
    ASSERT_EQ(expected.size(), 32u);
    SCOPED_TRACE("prompt of " + std::to_string(prompt.size()) + " tokens");
    const int total = static_cast<int>(prompt.size() + expected.size());
    KvPoolView kv;
    kv.set_shape((*model)->config());
    kv.block_size = kBlockSize;
    kv.n_blocks = (total + kBlockSize - 1) / kBlockSize;
    std::vector<std::uint16_t> storage(kv.block_elems() * static_cast<std::size_t>(kv.n_blocks));
    kv.base = storage.data();
    std::vector<std::int32_t> table(static_cast<std::size_t>(kv.n_blocks));
    for (std::size_t b = 0; b < table.size(); ++b) table[b] = static_cast<std::int32_t>(b);
    std::vector<float> logits(static_cast<std::size_t>(nv));
    std::vector<std::vector<double>> exact, kv_f16;  // the references' steps, computed at the first miss
    int pos = 0;
    std::vector<TokenId> next = prompt;
    for (std::size_t step = 0; step < expected.size(); ++step) {
      ForwardBatch batch;
      batch.tokens = next;
      batch.sequences.push_back({table.data(), static_cast<int>(kv.n_blocks), pos, static_cast<int>(next.size()), true, false});
      ASSERT_TRUE((*model)->forward(batch, kv, logits.data(), threads).is_ok());
      pos += static_cast<int>(next.size());
      const auto lp = log_softmax(logits.data(), nv);
      const TokenId best = best_allowed(logits, banned);
      const double worst = worst_top5(record, step, lp);
      next = {expected[step]};  // llama.cpp's token: the next step sees llama.cpp's context
      if (best == expected[step] && worst < kLogprobTolerance) {
        worst_overall = std::max(worst_overall, worst);
        continue;
      }
      // A miss: explained only by the f16 KV rounding (the header), or a failure.
      if (exact.empty()) {
        exact = reference_steps((*model)->file(), record, false);
        kv_f16 = reference_steps((*model)->file(), record, true);
      }
      const double exact_vs_llama = worst_top5(record, step, exact[step]);
      double engine_vs_f16 = 0;
      for (const auto& entry : record["top_logprobs"][step]) {
        const auto id = entry[0].get<std::size_t>();
        engine_vs_f16 = std::max(engine_vs_f16, std::abs(lp[id] - kv_f16[step][id]));
      }
      const bool explained = exact_vs_llama < kExplainedByReference && best_allowed(exact[step], banned) == expected[step] &&
                             engine_vs_f16 < kExplainedByKvRounding && best_allowed(kv_f16[step], banned) == best;
      EXPECT_TRUE(explained) << "step " << step << ": greedy " << best << " (llama.cpp " << expected[step] << "), top-5 off by "
                             << worst << " nats; the exact reference is off llama.cpp by " << exact_vs_llama
                             << ", the f16-KV reference off the engine by " << engine_vs_f16;
      if (explained) {
        ++kv_rounding_steps;
        std::printf("%s: step %zu of the %zu-token prompt differs from llama.cpp by %.3f nats (greedy %s), as the reference "
                    "does with f16 KV (%.1e nats from the engine); exactly computed it is llama.cpp's (%.1e)\n",
                    preset.c_str(), step, prompt.size(), worst, best == expected[step] ? "same" : "flips", engine_vs_f16,
                    exact_vs_llama);
      }
    }
  }
  EXPECT_LE(kv_rounding_steps, kMostKvRoundingSteps);
  std::printf("%s: 5 prompts x 32 steps, largest top-5 log-probability difference from llama.cpp %.2e nats (%d steps "
              "explained by the f16 KV rounding)\n",
              preset.c_str(), worst_overall, kv_rounding_steps);
}

// The double-precision reference itself against llama.cpp: what the engine is tested against in
// model_test is what llama.cpp computes.
class ExactReference : public ::testing::TestWithParam<const char*> {};

INSTANTIATE_TEST_SUITE_P(LlamaCpp, ExactReference,
                         ::testing::Values("qwen3-tiny", "qwen3moe-tiny", "gemma3-tiny", "tiny", "phi3-tiny", "gpt-oss-tiny",
                                           "mistral3-tiny"),
                         test_name);

TEST_P(ExactReference, MatchesLlamaCppAtEveryStep) {
  const std::string preset = GetParam();
  const Fixture fixture = read_fixture(preset);
  ASSERT_FALSE(::testing::Test::HasFailure());
  auto file = gguf::File::open(fixture.path);
  ASSERT_TRUE(file) << file.status().to_string();
  const int nv = static_cast<int>(testing::ReferenceModel(**file).n_vocab());
  const std::vector<bool> banned = banned_ids(fixture.doc, **file, nv);
  const double tolerance = preset == "gemma3-tiny" ? 5e-3 : 1e-4;
  double worst_overall = 0;
  for (const auto& record : fixture.doc["prompts"]) {
    const auto expected = record["tokens"].get<std::vector<TokenId>>();
    const auto steps = reference_steps(**file, record, false);
    for (std::size_t step = 0; step < expected.size(); ++step) {
      EXPECT_EQ(best_allowed(steps[step], banned), expected[step]) << "step " << step;
      const double worst = worst_top5(record, step, steps[step]);
      EXPECT_LT(worst, tolerance) << "step " << step;
      worst_overall = std::max(worst_overall, worst);
    }
  }
  std::printf("%s: the double reference is %.2e nats from llama.cpp at most\n", preset.c_str(), worst_overall);
}

}  // namespace
}  // namespace kvstash
