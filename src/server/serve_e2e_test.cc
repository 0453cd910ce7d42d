// `kvstash serve` as a real process, for what only the command shows: its flags (--queue) and
// its signal handling (SIGTERM ends open requests honestly).
#include <gtest/gtest.h>

#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "server/http_test_util.h"
#include "server/serve_process.h"

namespace kvstash::server::testing {
namespace {

class ServeE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    ASSERT_FALSE(model_.empty());
  }
  // Requests name the model "tiny" (OpenAI requires a model).
  static std::vector<std::string> with_alias(std::vector<std::string> args) {
    args.insert(args.end(), {"--alias", "tiny"});
    return args;
  }
  std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> args) {
    auto p = std::make_unique<ServeProcess>(model_, with_alias(std::move(args)), dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << "kvstash serve did not start: " << p->log();
    return p;
  }
  // A long greedy completion that runs until the test ends it.
  static std::string long_request(bool stream) {
    return json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 7000}, {"ignore_eos", true}, {"temperature", 0}, {"stream", stream}}
        .dump();
  }

  std::string model_;
  cache::testing::ScratchDir dir_;
};

// Bounded poll (~10 s), never a timing assertion.
template <typename Pred>
bool eventually(Pred done) {
  // The answer of the call that succeeded counts: asking again could see another state.
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST_F(ServeE2ETest, SigtermEndsRunningRequestsWithAnErrorNeverStop) {
  auto s = serve("sigterm", {"--ctx", "8192", "--kv-pool-tokens", "20000", "--no-kv-store", "--parallel", "4",
                             "--drain-seconds", "0"});
  ASSERT_TRUE(s->ready());
  RawRequest whole(s->port(), "/v1/completions", long_request(false));
  RawRequest stream(s->port(), "/v1/completions", long_request(true));
  ASSERT_NE(stream.read_at_least(1).find("HTTP/1.1 200"), std::string::npos);
  ASSERT_TRUE(eventually([&] { return s->metric("kvstash_requests_running") >= 2; })) << s->metrics();
  s->terminate();
  // Both answers end (the server closes once they are written); read them whole.
  const std::string whole_response = whole.read_at_least(std::string::npos);
  const std::string stream_response = stream.read_at_least(std::string::npos);
  EXPECT_EQ(s->wait_exit(), 0) << s->log();

  const auto body_at = whole_response.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos) << whole_response;
  // A cut answer is an error (OpenAI has no finish_reason for it), never one that reads as whole.
  EXPECT_EQ(whole_response.rfind("HTTP/1.1 503", 0), 0u) << whole_response;
  json body = json::parse(whole_response.substr(body_at + 4), nullptr, false);
  ASSERT_TRUE(body.is_object()) << whole_response;
  EXPECT_EQ(body["error"]["code"], "shutdown") << body.dump();

  // The stream ends with an error event, never a finish_reason of "stop" or "length".
  EXPECT_NE(stream_response.find("\"code\":\"shutdown\""), std::string::npos) << stream_response.substr(stream_response.size() - std::min<std::size_t>(stream_response.size(), 2000));
  EXPECT_EQ(stream_response.find("\"finish_reason\":\"stop\""), std::string::npos);
  EXPECT_EQ(stream_response.find("\"finish_reason\":\"length\""), std::string::npos);
}

TEST_F(ServeE2ETest, SigtermDrainsInFlightRequestsThenExits) {
  auto s = serve("drain", {"--ctx", "8192", "--no-kv-store", "--drain-seconds", "60"});
  ASSERT_TRUE(s->ready());
  const std::string body =
      json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 3000}, {"ignore_eos", true}, {"temperature", 0}, {"stream", true}}.dump();
  RawRequest stream(s->port(), "/v1/completions", body);
  ASSERT_NE(stream.read_at_least(1).find("HTTP/1.1 200"), std::string::npos);
  s->terminate();
  // The request in flight finishes whole within the drain time, then the server exits.
  const std::string response = stream.read_at_least(std::string::npos);
  EXPECT_NE(response.find("\"finish_reason\":\"length\""), std::string::npos) << response.substr(0, 500);
  EXPECT_NE(response.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(response.find("\"code\":\"shutdown\""), std::string::npos);
  EXPECT_EQ(s->wait_exit(), 0) << s->log();
}

TEST_F(ServeE2ETest, QueueZeroFillsTheBatchAndRefusesTheNext) {
  auto s = serve("queue0", {"--ctx", "8192", "--no-kv-store", "--parallel", "2", "--queue", "0"});
  ASSERT_TRUE(s->ready());
  {
    RawRequest first(s->port(), "/v1/completions", long_request(true));
    RawRequest second(s->port(), "/v1/completions", long_request(true));
    ASSERT_NE(first.read_at_least(1).find("HTTP/1.1 200"), std::string::npos) << first.read_at_least(1);
    ASSERT_NE(second.read_at_least(1).find("HTTP/1.1 200"), std::string::npos) << second.read_at_least(1);
    auto r = s->client()->Post("/v1/completions", R"({"model": "tiny", "prompt": "x", "max_tokens": 2})", "application/json");
    expect_api_error(r, 429, "capacity");
  }  // both hang up: their slots free
  EXPECT_TRUE(eventually([&] {
    auto r = s->client()->Post("/v1/completions", R"({"model": "tiny", "prompt": "x", "max_tokens": 2})", "application/json");
    return r && r->status == 200;
  }));
}

}  // namespace
}  // namespace kvstash::server::testing

namespace kvstash::server::testing {
namespace {

// --step-log: one JSON line per forward step, what the step budget saw (docs/step-budget.md).
TEST_F(ServeE2ETest, StepLogHasALinePerStepWithTheBudgetWhileDecoding) {
  const std::string path = dir_.path() + "/steps.jsonl";
  auto s = serve("steplog", {"--no-kv-store", "--step-log", path});
  ASSERT_TRUE(s->ready());
  const std::string body =
      json{{"model", "tiny"}, {"prompt", "x y z"}, {"max_tokens", 6}, {"ignore_eos", true}, {"temperature", 0}}.dump();
  {
    httplib::Client client("127.0.0.1", s->port());
    auto res = client.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    ASSERT_NE(res->body.find("\"finish_reason\":\"length\""), std::string::npos) << res->body;
  }
  s->terminate();
  EXPECT_EQ(s->wait_exit(), 0) << s->log();
  std::istringstream lines(read_text_file(path));
  int prefill_steps = 0, decode_steps = 0;
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    EXPECT_GT(j.at("measured_s").get<double>(), 0) << line;
    if (j.at("decode_rows").get<int>() > 0) {
      ++decode_steps;
      EXPECT_GT(j.at("budget_s").get<double>(), 0) << "the default budget applies while a sequence decodes: " << line;
    } else {
      prefill_steps += j.at("prefill_tokens").get<int>() > 0;
      EXPECT_EQ(j.at("budget_s").get<double>(), 0) << line;
    }
  }
  EXPECT_GE(prefill_steps, 1);
  EXPECT_EQ(decode_steps, 5);  // 6 tokens: the prefill samples the first, each decode step one more
}

TEST_F(ServeE2ETest, StepLogThatCannotBeOpenedIsRefusedByName) {
  ServeProcess p(model_, with_alias({"--step-log", dir_.path() + "/no/such/dir/steps.jsonl"}), dir_.path() + "/bad.log");
  EXPECT_FALSE(p.ready());
  EXPECT_NE(p.wait_exit(), 0);
  EXPECT_NE(p.log().find("--step-log: cannot open"), std::string::npos) << p.log();
}

}  // namespace
}  // namespace kvstash::server::testing
