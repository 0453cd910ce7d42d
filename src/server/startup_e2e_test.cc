// `kvstash serve` starting from the prepared-weights cache (issue 37), as a real process: the first
// start writes the file after it listens, the next reads it and answers the same greedy tokens, a
// damaged file is named in the log and rebuilt; the start-up phases are in /metrics.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/serve_process.h"

namespace kvstash::server::testing {
namespace {

namespace fs = std::filesystem;

class StartupE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A copy under a new path: its first start is a first start (no fingerprint remembered).
    const std::string shared = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    ASSERT_FALSE(shared.empty());
    model_ = dir_.path() + "/model.gguf";
    fs::copy_file(shared, model_);
  }
  std::unique_ptr<ServeProcess> serve(const std::string& name) {
    auto p = std::make_unique<ServeProcess>(
        model_, std::vector<std::string>{"--no-kv-store", "--weights-cache", cache_dir()},
        dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << "kvstash serve did not start: " << p->log();
    return p;
  }
  std::string cache_dir() const { return dir_.path() + "/weights"; }
  // The cache's files named *`ext` (".kvw": prepared weights; ".stepcost": the step budget's
  // measured coefficients).
  std::vector<fs::path> cache_files(const std::string& ext = ".kvw") const {
    std::vector<fs::path> out;
    if (!fs::exists(cache_dir())) return out;
    for (const auto& e : fs::directory_iterator(cache_dir())) {
      if (e.path().extension() == ext) out.push_back(e.path());
    }
    return out;
  }
  // Bounded poll (~30 s) for a log line; never a timing assertion.
  static bool log_eventually_has(const ServeProcess& s, const std::string& text) {
    for (int i = 0; i < 1500; ++i) {
      if (s.log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  static json greedy(const ServeProcess& s) { return s.complete({1, 17, 5, 42, 7}, 12); }

  std::string model_;
  cache::testing::ScratchDir dir_;
};

TEST_F(StartupE2ETest, SecondStartReadsThePreparedWeightsAndAnswersTheSame) {
  json first_answer;
  {
    auto s = serve("first");
    ASSERT_TRUE(s->ready());
    // The file is hashed beside the copy, and the cost model is measured after the write, idle.
    EXPECT_NE(s->log().find("not there yet (first start of this file, prepared beside its fingerprint); writing it"),
              std::string::npos) << s->log();
    EXPECT_NE(s->log().find("serve: fingerprint: first start of this file, hashed in"), std::string::npos) << s->log();
    EXPECT_NE(s->log().find("cost model measured in the first idle second"), std::string::npos) << s->log();
    first_answer = greedy(*s);
    ASSERT_FALSE(first_answer.is_null()) << s->last_error();
    // Where the SIMD path keeps F16's layout (AVX2), the weights are answered from the file mapping
    // while a thread copies them into huge pages, then swapped in (the answers of the later starts,
    // from the prepared file, are this one's: asserted below). The tiny model's copy may be done
    // before the log line.
    if (s->log().find("while a background thread copies them into huge-page memory") != std::string::npos) {
      ASSERT_TRUE(log_eventually_has(*s, "serve: weights: copied into huge-page memory in")) << s->log();
      EXPECT_EQ(s->metric("kvstash_startup_weights_preparing"), 0);
    }
    ASSERT_TRUE(log_eventually_has(*s, "serve: weights cache: written in")) << s->log();
    EXPECT_EQ(s->metric("kvstash_startup_weights_cache_writing"), 0);
    ASSERT_TRUE(log_eventually_has(*s, "cost model (measured when idle, saved to ")) << s->log();
    EXPECT_EQ(s->metric("kvstash_step_cost_pending"), 0);
    EXPECT_EQ(s->stop(), 0);
  }
  ASSERT_EQ(cache_files().size(), 1u);
  ASSERT_EQ(cache_files(".stepcost").size(), 1u);  // measured at the first start, kept beside the weights
  {
    auto s = serve("second");
    ASSERT_TRUE(s->ready());
    EXPECT_NE(s->log().find("serve: weights cache: read " + cache_files()[0].string()), std::string::npos) << s->log();
    EXPECT_NE(s->log().find("cost model (read from " + cache_files(".stepcost")[0].string()), std::string::npos) << s->log();
    EXPECT_EQ(s->log().find("serve: fingerprint: first start"), std::string::npos) << s->log();  // remembered
    EXPECT_EQ(s->metric("kvstash_step_cost_pending"), 0);
    EXPECT_NE(s->log().find("start-up: "), std::string::npos);
    const std::string page = s->metrics();
    for (const char* phase : {"map", "fingerprint", "prepare", "pool", "listening"}) {
      EXPECT_GE(ServeProcess::metric_in(page, std::string("kvstash_startup_phase_seconds{phase=\"") + phase + "\"}"), 0)
          << phase << "\n" << page;
    }
    EXPECT_GT(ServeProcess::metric_in(page, "kvstash_startup_seconds"), 0) << page;
    const json answer = greedy(*s);
    ASSERT_FALSE(answer.is_null()) << s->last_error();
    EXPECT_EQ(tokens_of(answer), tokens_of(first_answer));
    EXPECT_EQ(answer["choices"][0]["logprobs"], first_answer["choices"][0]["logprobs"]);
    EXPECT_EQ(s->stop(), 0);
  }
  // A damaged file: named, never used, rewritten; the answer is the same.
  {
    const fs::path file = cache_files()[0];
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 5));
    f.put('\x5a');
    f.put('\xa5');
    std::ofstream(cache_files(".stepcost")[0]) << "kvstash-step-cost-v2 -1 x";
  }
  {
    auto s = serve("damaged");
    ASSERT_TRUE(s->ready());
    EXPECT_NE(s->log().find("damaged (checksum mismatch"), std::string::npos) << s->log();
    EXPECT_NE(s->log().find("does not read back (damaged or of another version): measuring again"), std::string::npos) << s->log();
    EXPECT_NE(s->log().find("cost model measured in the first idle second"), std::string::npos) << s->log();
    ASSERT_TRUE(log_eventually_has(*s, "serve: weights cache: written in")) << s->log();
    ASSERT_TRUE(log_eventually_has(*s, "cost model (measured when idle, saved to ")) << s->log();
    const json answer = greedy(*s);
    ASSERT_FALSE(answer.is_null()) << s->last_error();
    EXPECT_EQ(tokens_of(answer), tokens_of(first_answer));
    EXPECT_EQ(s->stop(), 0);
  }
  // A tiny model's coefficients may measure 0 (its base below the clock's grain): still read back.
  std::ofstream(cache_files(".stepcost")[0]) << "kvstash-step-cost-v2 0 2e-05 1e-05 9.9e-08 1e-07\n";
  auto s = serve("rebuilt");
  ASSERT_TRUE(s->ready());
  EXPECT_NE(s->log().find("serve: weights cache: read "), std::string::npos) << s->log();
  EXPECT_NE(s->log().find("cost model (read from "), std::string::npos) << s->log();
}

// A first start stopped right after it listens, before the engine settles (0.5 s idle) and the
// write would begin: the prepared file is written before the process exits, and read next time.
TEST_F(StartupE2ETest, AStopRightAfterAFirstStartStillWritesThePreparedWeights) {
  {
    auto s = serve("stopped");
    ASSERT_TRUE(s->ready());
    EXPECT_EQ(s->stop(), 0);
    EXPECT_NE(s->log().find("serve: weights cache: written in"), std::string::npos) << s->log();
  }
  ASSERT_EQ(cache_files().size(), 1u);
  auto s = serve("after");
  ASSERT_TRUE(s->ready());
  EXPECT_NE(s->log().find("serve: weights cache: read " + cache_files()[0].string()), std::string::npos) << s->log();
}

TEST_F(StartupE2ETest, OffLeavesNoFile) {
  auto p = std::make_unique<ServeProcess>(model_, std::vector<std::string>{"--no-kv-store", "--weights-cache", "off"},
                                          dir_.path() + "/off.log");
  ASSERT_TRUE(p->ready()) << p->log();
  EXPECT_NE(p->log().find("serve: weights cache: off"), std::string::npos) << p->log();
  EXPECT_FALSE(fs::exists(cache_dir()));
}

}  // namespace
}  // namespace kvstash::server::testing
