// `kvstash bench-engine --step-profile --json` on a tiny generated model, as a user runs it: the
// phase table covers the step (the phases' shares add up to the profiled steps' time) and every
// weight byte a step reads, in the phases that read weights; on a MoE model, the bytes are the
// active ones (the experts the token picked), and the report says so.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "modelgen/test_models.h"

namespace kvstash {
namespace {

std::string kvstash_binary() {
  if (const char* bin = std::getenv("KVSTASH_BIN")) return bin;
  return std::string(KVSTASH_BINARY_DIR) + "/kvstash";
}

// Runs `command`, returning its stdout and, in `exit_code`, how it ended.
std::string run(const std::string& command, int& exit_code) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    exit_code = -1;
    return out;
  }
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = ::pclose(pipe);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// `bench-engine --step-profile --json` on a small preset: its report, or a discarded value (the
// failure recorded) when it did not run or did not print JSON.
nlohmann::json step_profile_report(const std::string& preset) {
  EXPECT_TRUE(std::filesystem::exists(kvstash_binary())) << "build the kvstash target first";
  const std::string model = testing::test_model_path(preset, gguf::TensorType::kF16);
  int exit_code = 0;
  const std::string out = run(kvstash_binary() + " bench-engine -m " + model +
                                  " --prompt-tokens 16 --repeats 1 --decode-tokens 3 --batch 2 -t 2 --step-profile --json",
                              exit_code);
  EXPECT_EQ(exit_code, 0) << out;
  auto report = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(report.is_discarded()) << out;
  return exit_code == 0 ? report : nlohmann::json(nlohmann::json::value_t::discarded);
}

TEST(BenchEngine, StepProfileCoversTheStepAndEveryWeightByte) {
  const auto report = step_profile_report("tiny-llama");
  ASSERT_FALSE(report.is_discarded());
  ASSERT_TRUE(report.contains("step_profile")) << report.dump();
  const auto& profile = report["step_profile"];
  EXPECT_EQ(profile["steps"].get<int>(), 3);
  EXPECT_GT(profile["ms_per_step"].get<double>(), 0.0);
  double share = 0, bytes = 0;
  std::set<std::string> with_weights;
  for (const auto& phase : profile["phases"]) {
    share += phase["share_of_step"].get<double>();
    if (phase.contains("weight_bytes_per_step")) {
      bytes += phase["weight_bytes_per_step"].get<double>();
      with_weights.insert(phase["phase"].get<std::string>());
      EXPECT_GT(phase["read_gbs"].get<double>(), 0.0) << phase.dump();
    }
  }
  // The phases are closed back to back inside forward(); the step's own timer also holds the
  // batch's set-up, so the shares add up to a little less than 1, never more.
  EXPECT_GT(share, 0.5);
  EXPECT_LE(share, 1.0 + 1e-9);
  EXPECT_EQ(bytes, report["weight_bytes_per_token"].get<double>());
  EXPECT_EQ(with_weights, (std::set<std::string>{"qkv", "attn output", "gate+up", "down", "output"}));
}

// qwen3moe-tiny: 16 experts, 4 used. A decode step reads the routers and 4 experts per layer: the
// active bytes, which the "moe" object reports beside the file's, and the decode's share of the
// streaming read is of those bytes; every one of them is read in a phase of the step profile.
TEST(BenchEngine, MoeModelReportsTheActiveBytesADecodeStepReads) {
  const auto report = step_profile_report("qwen3moe-tiny");
  ASSERT_FALSE(report.is_discarded());
  ASSERT_TRUE(report.contains("moe")) << report.dump();
  const auto& moe = report["moe"];
  EXPECT_EQ(moe["experts"].get<int>(), 16);
  EXPECT_EQ(moe["experts_used"].get<int>(), 4);
  const double active = moe["active_weight_bytes_per_token"].get<double>();
  EXPECT_EQ(active, report["weight_bytes_per_token"].get<double>());
  EXPECT_LT(active, 0.75 * moe["file_weight_bytes"].get<double>()) << "4 of 16 experts read";
  double bytes = 0;
  std::set<std::string> with_weights;
  for (const auto& phase : report["step_profile"]["phases"]) {
    if (!phase.contains("weight_bytes_per_step")) continue;
    bytes += phase["weight_bytes_per_step"].get<double>();
    with_weights.insert(phase["phase"].get<std::string>());
  }
  EXPECT_EQ(bytes, active);
  EXPECT_EQ(with_weights, (std::set<std::string>{"qkv", "attn output", "experts", "output"}));
  EXPECT_NEAR(report["decode_vs_stream_read"].get<double>(),
              report["decode_weight_read_gbs"].get<double>() / report["stream_read_gbs"].get<double>(), 1e-9);
}

}  // namespace
}  // namespace kvstash
