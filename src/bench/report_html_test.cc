// Renders the report in headless Chromium (Debian package `chromium`) and checks that the
// page's script drew every chart without errors and that the screenshot is not blank.
#include "bench/report_html.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace kvstash::bench {
namespace {

const char* kChromium = "/usr/bin/chromium";

BenchResult multi_round_result() {
  BenchResult result;
  result.config = {{"url", "http://127.0.0.1:8080"}, {"model", "tiny <test> & \"quotes\""},
                   {"workload", "multi-turn"}};
  for (int i = 0; i < 60; ++i) {
    RequestRecord r;
    r.index = i;
    r.session_id = i % 6;
    r.round = i / 6 % 4;
    r.start_s = i * 0.1;
    r.ttft_s = 0.05 + 0.02 * (i % 7) - 0.005 * r.round;
    r.itl_s = {0.01 + 0.001 * (i % 5), 0.012, 0.011};
    r.e2e_s = r.ttft_s + 0.033;
    r.prompt_tokens = 100 + 50 * r.round;
    r.output_tokens = 4;
    r.cached_tokens = r.round == 0 ? 0 : 90 + 50 * (r.round - 1);
    if (i % 17 == 16) {
      r.error = error_kind::kTimeout;
      r.error_detail = "</script><script>alert(1)</script>";  // must stay inert text
    }
    result.records.push_back(r);
  }
  result.summary = summarize(result.records, Slo{});
  return result;
}

// Runs a shell command and returns its stdout (stderr too when merge_stderr).
std::string run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  pclose(pipe);
  return output;
}

std::string chromium_command(const std::string& profile, const std::string& args) {
  return std::string(kChromium) +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
         " --disable-component-update --disable-sync --disable-dev-shm-usage --user-data-dir=" + profile + " " + args;
}

long file_size(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<long>(st.st_size) : -1;
}

class ReportHtmlTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kChromium, X_OK), 0) << "chromium is not installed (Debian package chromium; scripts/install-deps.sh installs it)";
    char dir_template[] = "/tmp/kvstash-report-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override {
    if (!dir_.empty()) run_command("rm -rf '" + dir_ + "'");
  }
  std::string dir_;
};

TEST(ReportHtmlContentTest, SelfContainedAndEscaped) {
  const std::string html = render_report_html(multi_round_result());
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("http://cdn"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  // The hostile error detail is in the data as \u003c escapes, never as markup.
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_NE(html.find("tiny &lt;test&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  EXPECT_NE(html.find("TTFT p99"), std::string::npos);
}

TEST_F(ReportHtmlTest, RendersAllChartsWithoutScriptErrors) {
  const std::string page = dir_ + "/report.html";
  ASSERT_TRUE(write_report_html(page, multi_round_result()).is_ok());

  const std::string dom = run_command(chromium_command(dir_ + "/p1", "--dump-dom file://" + page + " 2>/dev/null"));
  EXPECT_NE(dom.find("data-charts-drawn=\"4\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_NE(dom.find("ready: 4 charts"), std::string::npos);
  std::size_t charts = 0;
  for (std::size_t at = dom.find("class=\"kvstash-chart\""); at != std::string::npos;
       at = dom.find("class=\"kvstash-chart\"", at + 1)) {
    ++charts;
  }
  EXPECT_EQ(charts, 4u);
  EXPECT_GT(std::count(dom.begin(), dom.end(), '<'), 300);  // bars and points were drawn

  const std::string shot = dir_ + "/report.png";
  const std::string log = run_command(chromium_command(
      dir_ + "/p2", "--enable-logging=stderr --v=0 --window-size=1200,1600 --screenshot=" + shot + " file://" + page +
                        " 2>&1"));
  EXPECT_EQ(log.find("Uncaught"), std::string::npos) << log;
  EXPECT_EQ(log.find("ERROR:CONSOLE"), std::string::npos) << log;

  // A blank page of the same size compresses to a tiny PNG; the report must not.
  const std::string blank = dir_ + "/blank.html";
  std::ofstream(blank) << "<!DOCTYPE html><html><body></body></html>";
  const std::string blank_shot = dir_ + "/blank.png";
  run_command(chromium_command(dir_ + "/p3", "--window-size=1200,1600 --screenshot=" + blank_shot + " file://" +
                                                 blank + " 2>/dev/null"));
  ASSERT_GT(file_size(shot), 0) << log;
  ASSERT_GT(file_size(blank_shot), 0);
  EXPECT_GT(file_size(shot), 10 * file_size(blank_shot));
  if (const char* keep = std::getenv("KVSTASH_KEEP_REPORT")) {
    run_command("cp '" + shot + "' '" + page + "' '" + keep + "'");
  }
}

TEST_F(ReportHtmlTest, SingleRequestRunDrawsTwoCharts) {
  BenchResult result;
  result.config = {{"workload", "random"}};
  RequestRecord r;
  r.ttft_s = 0.1;
  r.e2e_s = 0.2;
  r.output_tokens = 1;
  result.records = {r};
  result.summary = summarize(result.records, Slo{});
  const std::string page = dir_ + "/single.html";
  ASSERT_TRUE(write_report_html(page, result).is_ok());
  const std::string dom = run_command(chromium_command(dir_ + "/p1", "--dump-dom file://" + page + " 2>/dev/null"));
  // TTFT histogram and scatter; the ITL histogram has no samples and the round chart no rounds.
  EXPECT_NE(dom.find("data-charts-drawn=\"2\""), std::string::npos) << dom.substr(0, 2000);
  EXPECT_NE(dom.find("no samples"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::bench
