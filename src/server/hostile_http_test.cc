// Hostile traffic against the real server (the tiny model in a real engine, the HTTP layer on
// loopback), over raw sockets: framing that RFC 9112 requires to be rejected, limits by every
// framing, slow senders, slow readers, pipelining, connection caps, abrupt disconnects, bad JSON.
// Each case asserts the status and OpenAI's error shape, then that a normal request still
// succeeds. Timeouts are set short (seconds) so the deadlines are exercised; every wait is
// bounded, and no assertion is about how fast something happened.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/test_models.h"
#include "server/raw_http_client.h"
#include "server/server.h"

namespace kvstash::server {
namespace {

using nlohmann::json;
using testing::RawHttpClient;
using testing::RawResponse;

constexpr std::size_t kBodyLimit = 64 << 10;
constexpr std::size_t kHeaderLimit = 8 << 10;

template <typename Pred>
bool eventually(Pred done) {
  // The answer of the call that succeeded counts: asking again could see another state.
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void expect_openai_error(const RawResponse& r, int status, const std::string& mentions = "") {
  EXPECT_EQ(r.status, status) << r.head << r.body;
  json body = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains("error")) << r.body;
  EXPECT_TRUE(body["error"]["message"].is_string());
  EXPECT_TRUE(body["error"]["type"].is_string());
  EXPECT_TRUE(body["error"].contains("param"));
  EXPECT_TRUE(body["error"].contains("code"));
  if (!mentions.empty()) {
    EXPECT_NE(r.body.find(mentions), std::string::npos) << r.body;
  }
}

class HostileHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::load(kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16));
    ASSERT_TRUE(model) << model.status().to_string();
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override { start({}); }
  void TearDown() override { stop(); }

  void start(const std::function<void(ServerOptions&)>& adjust) {
    stop();
    ASSERT_NE(model_, nullptr);
    EngineOptions eo;
    eo.n_threads = 2;
    eo.n_ctx = 8192;
    auto engine = Engine::create(*model_, eo);
    ASSERT_TRUE(engine) << engine.status().to_string();
    engine_ = std::move(*engine);
    backend_ = make_engine_backend(*engine_, "tiny");
    ServerOptions o;
    o.port = 0;
    o.log_requests = false;
    o.max_body_bytes = kBodyLimit;
    o.http.header_limit = kHeaderLimit;
    o.http.header_timeout = std::chrono::milliseconds(1000);
    o.http.body_timeout = std::chrono::milliseconds(1000);
    o.http.idle_timeout = std::chrono::milliseconds(1500);
    if (adjust) adjust(o);
    auto server = Server::create(*backend_, o);
    ASSERT_TRUE(server) << server.status().to_string();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->start().is_ok());
  }
  void stop() {
    if (server_) server_->stop();
    server_.reset();
    backend_.reset();
    engine_.reset();
  }
  int port() const { return server_->port(); }

  // A normal greedy completion on a fresh connection succeeds.
  void expect_still_serving() {
    RawHttpClient c(port());
    ASSERT_TRUE(c.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "ok", "max_tokens": 2, "temperature": 0})")));
    RawResponse r = c.read_response();
    EXPECT_EQ(r.status, 200) << r.head << r.body;
    EXPECT_NE(r.body.find("\"text_completion\""), std::string::npos) << r.body;
  }
  // Sends `bytes` on a fresh connection; the answer, and whether the server then closed.
  RawResponse exchange_and_close(const std::string& bytes) {
    RawHttpClient c(port());
    EXPECT_TRUE(c.send(bytes));
    RawResponse r = c.read_response();
    r.closed_after = c.closed_by_server();
    return r;
  }
  std::string metrics() {
    RawHttpClient c(port());
    c.send(RawHttpClient::get("/metrics"));
    return c.read_response().body;
  }
  bool engine_idle() const {
    EngineStats s = engine_->stats();
    return s.running == 0 && s.waiting == 0;
  }

  static Model* model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GenerationBackend> backend_;
  std::unique_ptr<Server> server_;
};

Model* HostileHttpTest::model_ = nullptr;

TEST_F(HostileHttpTest, BadJsonWrongTypesHugeNumbersInvalidUtf8) {
  const std::pair<std::string, std::string> cases[] = {
      {"{\"model\": \"tiny\", \"prompt\": \"a\"", "malformed JSON"},
      {"[1, 2]", "JSON object"},
      {R"({"model": "tiny", "prompt": 7})", "'prompt'"},
      {R"({"model": "tiny", "prompt": "a", "max_tokens": "many"})", "max_tokens"},
      {R"({"model": "tiny", "prompt": "a", "temperature": 1e400})", "number overflow"},  // where and why, not the library's error number
      {R"({"model": "tiny", "prompt": "a", "max_tokens": 1e400})", "number overflow"},  // where and why, not the library's error number
      {R"({"model": "tiny", "prompt": "a", "seed": 123456789012345678901234567890})", "seed"},
      {"{\"model\": \"tiny\", \"prompt\": \"a\xC3\"}", "UTF-8"},
      {"{\"model\": \"tiny\", \"prompt\": \"\\ud800\"}", "UTF-8"},
      {R"({"model": "tiny", "prompt": "a", "tools": [{"type": "function"}]})", "unsupported_parameter"},
      {R"({"model": "tiny", "prompt": "a", "presence_penalty": 2.5})", "presence_penalty"},
      {R"({"model": "tiny", "prompt": "a", "mirostat": 2})", "mirostat"},
      {R"({"prompt": "a", "model": "no-such-model"})", "model_not_found"},
      {R"({"prompt": "a"})", "'model' is required"},  // OpenAI requires it
  };
  for (const auto& [body, mentions] : cases) {
    SCOPED_TRACE(body);
    RawHttpClient c(port());
    ASSERT_TRUE(c.send(RawHttpClient::post("/v1/completions", body)));
    RawResponse r = c.read_response();
    expect_openai_error(r, mentions == "model_not_found" ? 404 : 400, mentions);
  }
  // Nulls of optional fields are absent, as OpenAI's clients send them; penalties of 0 are "off".
  RawHttpClient c(port());
  c.send(RawHttpClient::post("/v1/completions",
                             R"({"model": "tiny", "prompt": "a", "max_tokens": 2, "stop": null, "seed": null, "tools": null,
                                 "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}})"));
  EXPECT_EQ(c.read_response().status, 200);
  expect_still_serving();
}

TEST_F(HostileHttpTest, ContentTypes) {
  // curl -d's form type with a JSON body over 8 KiB: parsed as JSON, no false 413.
  // (The bulk is in "user", a field the server ignores, so the test does not time a long prefill.)
  const std::string body = json{{"model", "tiny"}, {"prompt", "hi"}, {"max_tokens", 1}, {"user", std::string(10000, 'u')}}.dump();
  RawHttpClient c(port());
  c.send(RawHttpClient::post("/v1/completions", body, "Content-Type: application/x-www-form-urlencoded\r\n"));
  EXPECT_EQ(c.read_response().status, 200);
  RawHttpClient m(port());
  m.send(RawHttpClient::post("/v1/completions", "--x\r\n\r\n{}\r\n--x--", "Content-Type: multipart/form-data; boundary=x\r\n"));
  expect_openai_error(m.read_response(), 415, "multipart");
  expect_still_serving();
}

TEST_F(HostileHttpTest, OversizedHeaderSectionIs431AndCloses) {
  std::string request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 20000; ++i) request += "X-Filler-" + std::to_string(i) + ": aaaaaaaaaaaaaaaa\r\n";
  request += "\r\n";
  RawHttpClient c(port());
  c.send(request);  // the server may close before taking it all
  RawResponse r = c.read_response();
  expect_openai_error(r, 431, "header");
  expect_still_serving();
  // One huge header line, too.
  RawResponse one = exchange_and_close("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 10, 'a') + "\r\n\r\n");
  expect_openai_error(one, 431);
  expect_still_serving();
}

TEST_F(HostileHttpTest, OversizedBodyIs413ByEveryFraming) {
  const std::string big(kBodyLimit + 1, 'a');
  // Content-Length: refused from the header, before the body is sent.
  {
    RawHttpClient c(port());
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(big.size()) + "\r\n\r\n");
    expect_openai_error(c.read_response(), 413, "too large");
    EXPECT_TRUE(c.closed_by_server());
  }
  // Chunked: counted as it arrives, whatever the chunk sizes say.
  {
    RawHttpClient c(port());
    std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (std::size_t sent = 0; sent <= kBodyLimit; sent += 4096) chunked += "1000\r\n" + std::string(4096, 'a') + "\r\n";
    chunked += "0\r\n\r\n";
    c.send(chunked);
    expect_openai_error(c.read_response(), 413, "too large");
  }
  // Expect: 100-continue with a body too large: 413 instead of 100.
  {
    RawHttpClient c(port());
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
           std::to_string(big.size()) + "\r\n\r\n");
    expect_openai_error(c.read_response(), 413);
  }
  // Expect: 100-continue within the limit: "100 Continue", then the answer.
  {
    RawHttpClient c(port());
    const std::string body = R"({"model": "tiny", "prompt": "a", "max_tokens": 1})";
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n");
    char buf[64] = {};
    ASSERT_GT(::recv(c.fd(), buf, sizeof(buf) - 1, 0), 0);
    EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << buf;
    c.send(body);
    EXPECT_EQ(c.read_response().status, 200);
  }
  expect_still_serving();
}

TEST_F(HostileHttpTest, SmugglingFramingsAre400AndClose) {
  const std::string body = R"({"model": "tiny", "prompt": "a", "max_tokens": 1})";
  const std::string cl = std::to_string(body.size());
  const std::string framings[] = {
      "Content-Length: " + cl + "\r\nContent-Length: " + std::to_string(body.size() + 1) + "\r\n",  // differing CLs
      "Content-Length: +" + cl + "\r\n",                                                              // sign
      "Content-Length: " + cl + "\r\nTransfer-Encoding: chunked\r\n",                                  // CL then TE
      "Transfer-Encoding: chunked\r\nContent-Length: " + cl + "\r\n",                                  // TE then CL
      "Transfer-Encoding: gzip\r\nContent-Length: " + cl + "\r\n",                                     // unknown TE + CL
      "Transfer-Encoding: gzip\r\n",                                                                   // unknown TE
      "Transfer-Encoding: chunked, gzip\r\n",                                                          // chunked not last
      "Content-Length: 1" + cl + "0000000000000000000000\r\n",                                         // overflow
  };
  for (const std::string& framing : framings) {
    SCOPED_TRACE(framing);
    RawResponse r = exchange_and_close("POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + framing + "\r\n" + body);
    expect_openai_error(r, 400);
    EXPECT_TRUE(r.closed_after);
  }
  // Bad chunk framing: data without its CRLF, a size that is not hex.
  for (const std::string& chunks : {std::string("5\r\nhelloXX0\r\n\r\n"), std::string("zz\r\nhello\r\n0\r\n\r\n")}) {
    SCOPED_TRACE(chunks);
    RawResponse r = exchange_and_close("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks);
    expect_openai_error(r, 400);
    EXPECT_TRUE(r.closed_after);
  }
  // No Host in HTTP/1.1; a request line that is not HTTP.
  expect_openai_error(exchange_and_close("GET /health HTTP/1.1\r\n\r\n"), 400, "Host");
  expect_openai_error(exchange_and_close("HELLO\r\n\r\n"), 400);
  expect_still_serving();
}

TEST_F(HostileHttpTest, PipelinedRequestsAreAnsweredInOrder) {
  RawHttpClient c(port());
  const std::string slow = R"({"model": "tiny", "prompt": "x", "max_tokens": 64, "ignore_eos": true, "temperature": 0})";
  const std::string fast = R"({"model": "tiny", "prompt": "y", "max_tokens": 1, "temperature": 0})";
  ASSERT_TRUE(c.send(RawHttpClient::post("/v1/completions", slow) + RawHttpClient::get("/health") +
                     RawHttpClient::post("/v1/completions", fast) + RawHttpClient::get("/v1/models")));
  RawResponse first = c.read_response(), second = c.read_response(), third = c.read_response(), fourth = c.read_response();
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body)["usage"]["completion_tokens"], 64);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, R"({"status":"ok"})");
  ASSERT_EQ(third.status, 200) << third.body;
  EXPECT_EQ(json::parse(third.body)["usage"]["completion_tokens"], 1);
  EXPECT_EQ(fourth.status, 200);
  EXPECT_NE(fourth.body.find("\"list\""), std::string::npos);
  // Connection: close on the last one ends the connection after its answer.
  c.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  RawResponse last = c.read_response();
  EXPECT_EQ(last.status, 200);
  EXPECT_EQ(last.header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(HostileHttpTest, SlowlorisHeadersAndBodiesGet408WhileOthersAreServed) {
  std::vector<std::unique_ptr<RawHttpClient>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<RawHttpClient>(port()));
    ASSERT_TRUE(slow.back()->send("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "));  // half a header, then nothing
  }
  RawHttpClient slow_body(port());
  slow_body.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"");
  // Served meanwhile (no thread is held by the idle senders).
  expect_still_serving();
  RawHttpClient health(port());
  health.send(RawHttpClient::get("/health"));
  EXPECT_EQ(health.read_response().status, 200);
  // The header deadline (1 s here) ends every slow sender with 408 and a close.
  for (auto& c : slow) {
    RawResponse r = c->read_response();
    expect_openai_error(r, 408, "header");
    EXPECT_TRUE(c->closed_by_server());
  }
  expect_openai_error(slow_body.read_response(), 408, "body");
  EXPECT_TRUE(slow_body.closed_by_server());
  // A connection that sends nothing at all is closed without an answer.
  RawHttpClient silent(port());
  EXPECT_TRUE(silent.closed_by_server());
  const std::string m = metrics();
  EXPECT_NE(m.find("kvstash_http_refused_total{reason=\"header_timeout\"} 201"), std::string::npos) << m;
  EXPECT_NE(m.find("kvstash_http_refused_total{reason=\"body_timeout\"} 1"), std::string::npos) << m;
  expect_still_serving();
}

TEST_F(HostileHttpTest, IdleKeepAliveConnectionsAreClosed) {
  RawHttpClient c(port());
  c.send(RawHttpClient::get("/health"));
  EXPECT_EQ(c.read_response().status, 200);
  EXPECT_TRUE(c.closed_by_server());  // after the idle timeout (1.5 s here)
  EXPECT_NE(metrics().find("kvstash_http_idle_closed_total 1"), std::string::npos);
}

TEST_F(HostileHttpTest, ConnectionCapsAnswer503WithRetryAfter) {
  start([](ServerOptions& o) {
    o.http.max_connections_per_client = 4;
    o.http.max_connections = 6;
  });
  std::vector<std::unique_ptr<RawHttpClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawHttpClient>(port()));
    held.back()->send(RawHttpClient::get("/health"));
    ASSERT_EQ(held.back()->read_response().status, 200);
  }
  RawHttpClient over(port());
  RawResponse r = over.read_response();  // answered at once, without a request
  expect_openai_error(r, 503, "this address");
  EXPECT_EQ(r.header("Retry-After"), "1");
  EXPECT_TRUE(over.closed_by_server());
  held.pop_back();  // room for one again
  // A scrape may itself meet the cap (and be counted) until the closed connections are noticed.
  const std::string family = "kvstash_http_connections_rejected_total{reason=\"max_connections_per_client\"} ";
  EXPECT_TRUE(eventually([&] {
    const std::string m = metrics();
    const auto at = m.find(family);
    return at != std::string::npos && std::atoi(m.c_str() + at + family.size()) >= 1;
  }));
}

TEST_F(HostileHttpTest, AbruptDisconnectsMidStreamAndMidRequestCancel) {
  const std::string body = R"({"model": "tiny", "prompt": "x", "max_tokens": 8000, "ignore_eos": true, "stream": true})";
  {
    RawHttpClient c(port());
    c.send(RawHttpClient::post("/v1/completions", body));
    char buf[512];
    ASSERT_GT(::recv(c.fd(), buf, sizeof(buf), 0), 0);
  }  // hangs up mid-stream
  EXPECT_TRUE(eventually([&] { return engine_idle(); }));
  EXPECT_LT(engine_->stats().generated_tokens, 8000);
  {
    RawHttpClient c(port());
    c.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "x", "max_tokens": 8000, "ignore_eos": true})"));
    ASSERT_TRUE(eventually([&] { return engine_->stats().running > 0; }));
  }  // hangs up while the non-streaming answer is being made
  EXPECT_TRUE(eventually([&] { return engine_idle(); }));
  EXPECT_TRUE(eventually([&] { return metrics().find("status=\"499\"} 1") != std::string::npos; })) << metrics();
  {
    RawHttpClient c(port());
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"pro");
  }  // hangs up mid-body
  expect_still_serving();
}

TEST_F(HostileHttpTest, ASlowReaderIsCutAndNeverBlocksTheEngine) {
  start([](ServerOptions& o) {
    o.http.stream_buffer_limit = 16 << 10;
    o.http.socket_send_buffer = 16 << 10;
  });
  RawHttpClient reader(port(), 20, /*receive_buffer=*/4096);
  reader.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "x", "max_tokens": 8000, "ignore_eos": true, "stream": true})"));
  // The reader reads nothing. Meanwhile another request is served to completion.
  RawHttpClient other(port());
  other.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "y", "max_tokens": 200, "ignore_eos": true})"));
  RawResponse r = other.read_response();
  EXPECT_EQ(r.status, 200);
  // The stream's buffer passes its bound: cut, counted, cancelled in the engine.
  EXPECT_TRUE(eventually([&] { return metrics().find("kvstash_http_refused_total{reason=\"slow_reader\"} 1") != std::string::npos; }))
      << metrics();
  EXPECT_TRUE(eventually([&] { return engine_idle(); }));
  EXPECT_LT(engine_->stats().generated_tokens, 8000 + 200);
  expect_still_serving();
}

TEST_F(HostileHttpTest, RequestTimeLimitEndsWithAnError) {
  start([](ServerOptions& o) { o.request_timeout_s = 0.3; });
  RawHttpClient whole(port());
  whole.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "x", "max_tokens": 8000, "ignore_eos": true})"));
  RawResponse r = whole.read_response();
  // A cut answer is an error (OpenAI has no finish_reason for it), never one that reads as whole.
  ASSERT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "request_timeout") << r.body;
  RawHttpClient stream(port());
  stream.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "x", "max_tokens": 8000, "ignore_eos": true, "stream": true})"));
  RawResponse s = stream.read_response();
  EXPECT_NE(s.body.find("\"code\":\"request_timeout\""), std::string::npos) << s.body.substr(s.body.size() - 500);
  EXPECT_EQ(s.body.find("\"finish_reason\":\"length\""), std::string::npos);
  expect_still_serving();
}

TEST_F(HostileHttpTest, ApiKeyCorsAndReadiness) {
  start([](ServerOptions& o) {
    o.api_keys = {"sk-test"};
    o.cors_origin = "https://app.example";
  });
  RawHttpClient no_key(port());
  no_key.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "a", "max_tokens": 1})"));
  RawResponse r = no_key.read_response();
  expect_openai_error(r, 401, "API key");
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "https://app.example");
  RawHttpClient wrong(port());
  wrong.send(RawHttpClient::get("/v1/models").insert(0, "").replace(std::string("GET /v1/models HTTP/1.1\r\n").size(), 0,
                                                                  "Authorization: Bearer nope\r\n"));
  expect_openai_error(wrong.read_response(), 401);
  RawHttpClient ok(port());
  ok.send(RawHttpClient::post("/v1/completions", R"({"model": "tiny", "prompt": "a", "max_tokens": 1})",
                              "Authorization: Bearer sk-test\r\nContent-Type: application/json\r\n"));
  EXPECT_EQ(ok.read_response().status, 200);
  RawHttpClient preflight(port());
  preflight.send("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\n"
                 "Access-Control-Request-Method: POST\r\n\r\n");
  RawResponse p = preflight.read_response();
  EXPECT_EQ(p.status, 204);
  EXPECT_NE(p.header("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  // Health and readiness need no key.
  RawHttpClient health(port());
  health.send(RawHttpClient::get("/health") + RawHttpClient::get("/ready"));
  EXPECT_EQ(health.read_response().status, 200);
  EXPECT_EQ(health.read_response().status, 200);
}

}  // namespace
}  // namespace kvstash::server
