// `kvstash route`'s router in front of real `kvstash serve` workers (tiny model, loopback):
// requests go to the worker that holds their prefix (seen in its KV events and in the answer's
// usage), salts keep tenants apart, a killed worker's requests go elsewhere without a failure,
// the index is rebuilt after a router restart, streams pass through byte for byte, and the admin
// endpoint changes the worker set at run time.
#include <map>
#include <set>
#include <thread>

#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "router/router_test_util.h"

namespace kvstash::router::testing {
namespace {

using server::testing::ServeProcess;


std::vector<int> extend(std::vector<int> p, int seed, int n) {
  const auto more = prompt(seed + 1000, n);
  p.insert(p.end(), more.begin(), more.end());
  return p;
}

// Several clients post to the router while a worker is killed: `kill` runs once `kill_after`
// requests have been answered, and each client then sends `after_kill` more. (Fixed counts raced:
// on a fast machine every request was answered before the kill.) Bounded: at most 5,000 requests
// per client before the kill.
struct KillUnderLoad {
  int sent = 0, failed = 0, sent_after_kill = 0, to_dead_after_kill = 0;
  std::string first_error;
};
KillUnderLoad kill_under_load(int port, const std::string& dead, int clients, int kill_after, int after_kill,
                              const std::function<json(int client, int i)>& body_of, const std::function<void()>& kill) {
  constexpr int kMaxBeforeKill = 5000;
  std::atomic<int> sent{0}, failed{0}, sent_after_kill{0}, to_dead_after_kill{0};
  std::atomic<bool> killed{false};
  std::mutex errors_mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      int after_count = 0;
      for (int i = 0; i < kMaxBeforeKill + after_kill && after_count < after_kill; ++i) {
        const bool after = killed.load();
        Answer a = post(port, "/v1/completions", body_of(t, i));
        ++sent;
        if (a.status != 200) {
          ++failed;
          std::lock_guard lock(errors_mu);
          if (first_error.empty()) first_error = std::to_string(a.status) + " " + a.body;
        }
        if (after) {
          ++after_count;
          ++sent_after_kill;
          if (a.worker == dead) ++to_dead_after_kill;
        }
      }
    });
  }
  const bool started = wait_until([&] { return sent.load() >= kill_after; });
  kill();
  killed = true;
  for (auto& th : threads) th.join();
  EXPECT_TRUE(started);
  return {sent.load(), failed.load(), sent_after_kill.load(), to_dead_after_kill.load(), first_error};
}

class RouterE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    model_path_ = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    auto m = load_router_model(model_path_, "", 0);
    ASSERT_TRUE(m) << m.status().to_string();
    model_ = std::move(*m);
  }
  void start_workers(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string name = "w" + std::to_string(workers_.size());
      workers_.push_back(std::make_unique<ServeProcess>(
          model_path_,
          std::vector<std::string>{"--cache-ram", "64MiB", "--chunk-tokens", "32", "--identity", scratch_.path() + "/" + name + ".key"},
          scratch_.path() + "/" + name + ".log"));
      ASSERT_TRUE(workers_.back()->ready()) << workers_.back()->log();
    }
  }
  std::unique_ptr<Router> start_router(Policy policy = Policy::kCacheAware, std::vector<std::string> urls = {},
                                       std::chrono::milliseconds health_interval = std::chrono::milliseconds(200)) {
    RouterOptions o;
    o.port = 0;
    o.model_path = model_path_;
    o.policy = policy;
    o.health_interval = health_interval;
    o.worker.backoff_min = std::chrono::milliseconds(100);
    if (urls.empty()) {
      for (const auto& w : workers_) urls.push_back(worker_url(*w));
    }
    o.workers = urls;
    auto r = Router::create(o);
    EXPECT_TRUE(r) << r.status().to_string();
    if (!r) return nullptr;
    EXPECT_TRUE((*r)->start());
    return std::move(*r);
  }
  // Waits until the router's index of worker `w` holds every block key of `p`.
  bool wait_indexed(const Router& r, int w, const std::vector<int>& p, const std::string& salt = "") {
    const WorkerKvInfo info = kv_info_of(workers_[static_cast<std::size_t>(w)]->port());
    const RequestKeys keys = keys_of(*model_, info, p, salt);
    return wait_until([&] { return status_of(r, worker_url(*workers_[static_cast<std::size_t>(w)])).pool_keys >= keys.block_keys.size(); });
  }
  double metric(const Router& r, const std::string& sample) { return ServeProcess::metric_in("\n" + r.metrics_text(), sample); }

  std::string model_path_;
  std::unique_ptr<RouterModel> model_;
  cache::testing::ScratchDir scratch_;
  std::vector<std::unique_ptr<ServeProcess>> workers_;
};

TEST_F(RouterE2E, RoutesEachRequestToTheWorkerHoldingItsPrefix) {
  start_workers(3);
  auto router = start_router();
  ASSERT_TRUE(router);
  std::vector<std::vector<int>> prompts;
  for (int w = 0; w < 3; ++w) {
    prompts.push_back(prompt(w, 150));
    ASSERT_FALSE(workers_[static_cast<std::size_t>(w)]->complete(prompts.back(), 2).is_null());  // direct: only w holds it
    ASSERT_TRUE(wait_indexed(*router, w, prompts.back())) << "the router never saw worker " << w << "'s events";
  }
  for (int round = 0; round < 2; ++round) {
    for (int w = 0; w < 3; ++w) {
      const auto next = extend(prompts[static_cast<std::size_t>(w)], w * 10 + round, 20);
      Answer a = post(router->port(), "/v1/completions", completion(next));
      ASSERT_EQ(a.status, 200) << a.body;
      EXPECT_EQ(a.worker, worker_url(*workers_[static_cast<std::size_t>(w)]));
      // The router's wait on the worker: a number, positive, within what the client waited.
      ASSERT_FALSE(a.upstream_ms.empty()) << "no x-kvstash-upstream-ms header";
      const double upstream_ms = std::stod(a.upstream_ms);
      EXPECT_GT(upstream_ms, 0.0);
      EXPECT_LT(upstream_ms, a.elapsed_ms);
      EXPECT_GE(a.cached(), 144) << "the worker that held the prefix reused it";
      prompts[static_cast<std::size_t>(w)] = next;
      ASSERT_TRUE(wait_indexed(*router, w, next));
    }
  }
  for (int w = 0; w < 3; ++w) {
    const std::string url = worker_url(*workers_[static_cast<std::size_t>(w)]);
    const double predicted = metric(*router, "kvstash_router_predicted_cached_tokens_total{worker=\"" + url + "\"}");
    const double actual = metric(*router, "kvstash_router_actual_cached_tokens_total{worker=\"" + url + "\"}");
    EXPECT_GT(predicted, 0);
    EXPECT_EQ(predicted, actual) << "the index predicted exactly what the worker reused";
    EXPECT_EQ(metric(*router, "kvstash_router_requests_total{worker=\"" + url + "\",decision=\"cache_hit\"}"), 2);
  }
}

// OpenAI's prompt_cache_key (issue 35): 8 users x 5 turns, each user with a key of its own and
// prompts that share nothing (so the cache-aware score alone would spread them by load): every
// turn of a key goes to one worker, and the keys spread over the workers.
TEST_F(RouterE2E, PromptCacheKeyKeepsEachKeyOnOneWorker) {
  start_workers(3);
  auto router = start_router();
  ASSERT_TRUE(router);
  std::set<std::string> used;
  std::map<int, std::string> first;  // user -> the worker of its first turn
  for (int turn = 0; turn < 5; ++turn) {
    for (int user = 0; user < 8; ++user) {
      json body = completion(prompt(1000 + user * 10 + turn, 40), 2);
      body["prompt_cache_key"] = "user-" + std::to_string(user);
      Answer a = post(router->port(), "/v1/completions", body);
      ASSERT_EQ(a.status, 200) << a.body;
      if (turn == 0) {
        first[user] = a.worker;
        used.insert(a.worker);
      } else {
        EXPECT_EQ(a.worker, first[user]) << "user " << user << " turn " << turn << " moved";
      }
    }
  }
  EXPECT_GE(used.size(), 2u) << "8 keys all hashed to one of 3 workers";
  double by_key = 0;
  for (const auto& w : workers_) {
    // -1: no such sample (a worker no key hashed to).
    by_key += std::max(0.0, metric(*router, "kvstash_router_requests_total{worker=\"" + worker_url(*w) + "\",decision=\"cache_key\"}"));
  }
  EXPECT_EQ(by_key, 40) << router->metrics_text();
}

// The Responses API through the router: each stored response lives on one worker, and its id
// names that worker's key, so every next turn (previous_response_id) and every GET/DELETE of it
// reaches that worker, whichever the router would otherwise pick. (A first turn is routed by the
// cache-aware policy: each user has its own instructions, so that first turns share no prefix
// block (the chat template's default system prompt would draw them all to one worker) and spread.)
TEST_F(RouterE2E, ResponsesConversationsStayOnTheWorkerThatStoresThem) {
  start_workers(2);
  auto router = start_router();
  ASSERT_TRUE(router);
  ASSERT_TRUE(wait_until([&] {
    for (const auto& w : workers_) {
      if (!status_of(*router, worker_url(*w)).kv_info_known) return false;
    }
    return true;
  }));
  std::set<std::string> used;
  for (int user = 0; user < 4; ++user) {
    std::string previous, worker;
    for (int turn = 0; turn < 3; ++turn) {
      json body = {{"model", kTinyModelId}, {"input", "user " + std::to_string(user) + " says thing number " + std::to_string(turn)},
                   {"max_output_tokens", 3}, {"temperature", 0}, {"instructions", "User " + std::to_string(user) + "."}};
      if (!previous.empty()) body["previous_response_id"] = previous;
      Answer a = post(router->port(), "/v1/responses", body);
      ASSERT_EQ(a.status, 200) << "user " << user << " turn " << turn << ": " << a.body;
      const json r = a.json_body();
      if (turn == 0) {
        worker = a.worker;
        used.insert(worker);
      } else {
        EXPECT_EQ(a.worker, worker) << "user " << user << " turn " << turn << " left its worker";
        EXPECT_GT(r["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), 0) << a.body;
      }
      previous = r["id"].get<std::string>();
    }
    httplib::Client c("127.0.0.1", router->port());
    auto got = c.Get("/v1/responses/" + previous);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, 200) << got->body;
    EXPECT_EQ(got->get_header_value("x-kvstash-worker"), worker);
    auto deleted = c.Delete("/v1/responses/" + previous);
    ASSERT_TRUE(deleted);
    EXPECT_EQ(deleted->status, 200) << deleted->body;
  }
  EXPECT_EQ(used.size(), 2u) << "4 conversations all started on one of 2 idle workers";
  EXPECT_EQ(metric(*router, "kvstash_router_requests_total{worker=\"" + worker_url(*workers_[0]) + "\",decision=\"response_owner\"}") +
                metric(*router, "kvstash_router_requests_total{worker=\"" + worker_url(*workers_[1]) + "\",decision=\"response_owner\"}"),
            4 * (2 + 2))
      << router->metrics_text();
}

TEST_F(RouterE2E, SaltedRequestsOnlyMatchTheirSaltsKeys) {
  start_workers(2);
  auto router = start_router();
  ASSERT_TRUE(router);
  const auto p = prompt(5, 150);
  ASSERT_FALSE(workers_[1]->complete(p, 2, "blue").is_null());
  ASSERT_TRUE(wait_indexed(*router, 1, p, "blue"));
  const std::string w1 = worker_url(*workers_[1]);
  Answer blue = post(router->port(), "/v1/completions", completion(extend(p, 1, 20), 4, "blue"));
  ASSERT_EQ(blue.status, 200) << blue.body;
  EXPECT_EQ(blue.worker, w1);
  EXPECT_GE(blue.cached(), 144);
  for (const std::string salt : {"red", ""}) {
    Answer other = post(router->port(), "/v1/completions", completion(extend(p, 2, 20), 4, salt));
    ASSERT_EQ(other.status, 200) << other.body;
    EXPECT_EQ(other.cached(), 0) << "salt '" << salt << "' must not reuse blue's KV";
  }
  EXPECT_EQ(metric(*router, "kvstash_router_requests_total{worker=\"" + w1 + "\",decision=\"cache_hit\"}"), 1);
  const double p0 = metric(*router, "kvstash_router_predicted_cached_tokens_total{worker=\"" + worker_url(*workers_[0]) + "\"}");
  const double p1 = metric(*router, "kvstash_router_predicted_cached_tokens_total{worker=\"" + w1 + "\"}");
  EXPECT_EQ(std::max(0.0, p0) + std::max(0.0, p1), blue.cached()) << "only blue's request was predicted to hit";
}

// What a stream says, apart from how the worker split it into chunks (which depends on timing:
// tokens that arrive between two writes go out as one delta): the text, the finish reason, the
// usage, and whether it ended with [DONE].
std::string stream_meaning(const std::string& body) {
  std::string text, finish, usage;
  bool done = false;
  bench::SseParser parser;
  parser.feed(body, [&](const std::string& data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(data, nullptr, false);
    if (j.contains("usage")) usage = j["usage"].dump();
    for (const auto& c : j.value("choices", json::array())) {
      if (c.contains("delta") && c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
    }
  });
  return text + "|" + finish + "|" + usage + "|" + (done ? "[DONE]" : "cut");
}

TEST_F(RouterE2E, StreamsAndErrorsFromARealWorkerPassThrough) {
  start_workers(1);
  auto router = start_router();
  ASSERT_TRUE(router);
  json body = {{"messages", {{{"role", "user"}, {"content", "hello there, router"}}}},
               {"max_tokens", 12}, {"temperature", 0}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  auto fetch = [&](int port, const json& b, std::string* worker, std::string* head = nullptr) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    auto r = c.Post("/v1/chat/completions", server::testing::naming_model(b.dump(), kTinyModelId), "application/json");
    if (!r) return std::string("<no answer>");
    if (worker) *worker = r->get_header_value("x-kvstash-worker");
    if (head) *head = std::to_string(r->status) + " " + r->get_header_value("Content-Type");
    return r->body;
  };
  // Twice each way, so both sides see a cold and a warm prefix in the same order.
  std::string head_direct, head_routed, worker;
  body["cache_salt"] = "direct";
  const std::string direct = fetch(workers_[0]->port(), body, nullptr, &head_direct);
  const std::string direct_warm = fetch(workers_[0]->port(), body, nullptr);
  body["cache_salt"] = "routed";
  const std::string routed = fetch(router->port(), body, &worker, &head_routed);
  const std::string routed_warm = fetch(router->port(), body, nullptr);
  EXPECT_EQ(worker, worker_url(*workers_[0]));
  EXPECT_EQ(head_routed, head_direct);
  EXPECT_NE(direct.find("data: [DONE]"), std::string::npos) << direct;
  EXPECT_EQ(stream_meaning(routed), stream_meaning(direct));
  EXPECT_EQ(stream_meaning(routed_warm), stream_meaning(direct_warm));
  EXPECT_NE(stream_meaning(routed_warm), stream_meaning(routed)) << "the warm run reports its cached tokens";
  // Errors come back unchanged: status, type, body, byte for byte.
  json bad = {{"messages", json::array()}, {"max_tokens", 4}};
  std::string head_a, head_b;
  EXPECT_EQ(fetch(router->port(), bad, nullptr, &head_a), fetch(workers_[0]->port(), bad, nullptr, &head_b));
  EXPECT_EQ(head_a, head_b);
  EXPECT_EQ(head_a.substr(0, 3), "400");
  json wrong_model = {{"model", "nope"}, {"prompt", "x"}, {"max_tokens", 2}};
  httplib::Client c("127.0.0.1", router->port());
  auto via = c.Post("/v1/completions", wrong_model.dump(), "application/json");
  auto direct_404 = workers_[0]->client()->Post("/v1/completions", wrong_model.dump(), "application/json");
  ASSERT_TRUE(via && direct_404);
  EXPECT_EQ(via->status, 404);
  EXPECT_EQ(via->body, direct_404->body);
  // Non-generation paths are proxied too; the router's own /health reports the workers.
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(models->get_header_value("x-kvstash-worker"), worker_url(*workers_[0]));
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// A worker whose stream is fixed bytes (split at awkward places: inside a UTF-8 character, inside
// a JSON string, between \r and \n), served by the project's own HTTP layer: what comes out of
// the router is exactly those bytes.
class ScriptedWorker : public http::Handler {
 public:
  static std::vector<std::string> pieces() {
    return {"data: {\"choices\":[{\"delta\":{\"content\":\"caf\xC3", "\xA9 \\u00e9\"}}]}\r", "\n\r\n: a comment\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
            "data: [DONE]\n\n"};
  }
  void handle(http::Request req, std::shared_ptr<http::Exchange> ex) override {
    if (req.path == "/health") return ex->respond({200, "application/json", {}, "{}"});
    if (req.path != "/v1/chat/completions") return ex->respond({404, "application/json", {}, "{\"error\":\"scripted\"}"});
    ex->begin_stream({200, "text/event-stream", {{"X-Scripted", "yes"}}, ""});
    for (const std::string& p : pieces()) ex->write(p);
    ex->end();
  }
};

TEST_F(RouterE2E, StreamsPassThroughByteForByte) {
  ScriptedWorker script;
  http::HttpServerOptions o;
  o.port = 0;
  auto upstream = http::HttpServer::start(o, script);
  ASSERT_TRUE(upstream);
  auto router = start_router(Policy::kCacheAware, {"http://127.0.0.1:" + std::to_string((*upstream)->port())});
  ASSERT_TRUE(router);
  std::string expected;
  for (const std::string& p : ScriptedWorker::pieces()) expected += p;
  for (int i = 0; i < 3; ++i) {
    httplib::Client c("127.0.0.1", router->port());
    std::string got;
    int status = 0;
    std::string scripted_header;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true}}.dump();
    req.headers.emplace("Content-Type", "application/json");
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      scripted_header = r.get_header_value("X-Scripted");
      return true;
    };
    req.content_receiver = [&](const char* d, std::size_t n, std::uint64_t, std::uint64_t) {
      got.append(d, n);
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    ASSERT_TRUE(c.send(req, res, err)) << httplib::to_string(err);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(scripted_header, "yes");
    EXPECT_EQ(got, expected);
  }
  (*upstream)->stop();
}

TEST_F(RouterE2E, AKilledWorkersRequestsGoElsewhereAndNoneFails) {
  start_workers(3);
  // Health checks far apart: only the failed requests themselves can take the worker out.
  auto router = start_router(Policy::kCacheAware, {}, std::chrono::milliseconds(600000));
  ASSERT_TRUE(router);
  const auto p = prompt(9, 150);
  ASSERT_FALSE(workers_[0]->complete(p, 2).is_null());
  ASSERT_TRUE(wait_indexed(*router, 0, p));
  const std::string dead = worker_url(*workers_[0]);
  // Three clients keep sending continuations of p (which the index sends to worker 0); worker 0
  // is killed while they run.
  const KillUnderLoad r = kill_under_load(
      router->port(), dead, 3, 3, 6, [&](int t, int i) { return completion(extend(p, t * 100000 + i, 8), 2); },
      [&] { workers_[0]->kill9(); });
  EXPECT_EQ(r.sent_after_kill, 3 * 6);
  EXPECT_EQ(r.failed, 0) << r.first_error;
  EXPECT_EQ(r.to_dead_after_kill, 0);
  EXPECT_FALSE(status_of(*router, dead).up);
  EXPECT_EQ(metric(*router, "kvstash_router_failed_total"), 0);
  EXPECT_GE(metric(*router, "kvstash_router_retries_total"), 1) << "a request sent to the dead worker was sent again";
  // Its next requests: elsewhere.
  Answer a = post(router->port(), "/v1/completions", completion(extend(p, 77, 8), 2));
  ASSERT_EQ(a.status, 200);
  EXPECT_NE(a.worker, dead);
}

// Many requests at once through the asynchronous upstream (all on the router's two I/O threads),
// half of them long enough to be tokenized on a job thread, while a worker is killed: every one
// is answered (a request that had not reached the worker goes to another), none goes to the dead
// worker after the kill, and none is lost.
TEST_F(RouterE2E, ManyConcurrentRequestsSurviveAWorkerKilledMidRun) {
  start_workers(3);
  RouterOptions o;
  o.port = 0;
  o.model_path = model_path_;
  o.health_interval = std::chrono::milliseconds(600000);  // only the failed requests take the worker out
  o.tokenize_inline_bytes = 600;                          // the long prompts below go to a job thread
  for (const auto& w : workers_) o.workers.push_back(worker_url(*w));
  auto created = Router::create(o);
  ASSERT_TRUE(created) << created.status().to_string();
  std::unique_ptr<Router> router = std::move(*created);
  ASSERT_TRUE(router->start());
  const std::string dead = worker_url(*workers_[0]);
  constexpr int kClients = 12;
  std::atomic<int> long_ones{0};
  const KillUnderLoad r = kill_under_load(
      router->port(), dead, kClients, kClients, 3,
      [&](int t, int i) {
        const json body = completion(prompt(t * 31 + i, t % 2 == 0 ? 200 : 12), 2);
        if (body.dump().size() > o.tokenize_inline_bytes) ++long_ones;
        return body;
      },
      [&] { workers_[0]->kill9(); });
  EXPECT_EQ(r.sent_after_kill, kClients * 3);
  EXPECT_GT(long_ones.load(), 0);
  EXPECT_EQ(r.failed, 0) << r.first_error;
  EXPECT_EQ(r.to_dead_after_kill, 0);
  EXPECT_FALSE(status_of(*router, dead).up);
  EXPECT_EQ(metric(*router, "kvstash_router_failed_total"), 0);
  EXPECT_EQ(metric(*router, "kvstash_router_overhead_seconds_count"), r.sent);
  EXPECT_GT(metric(*router, "kvstash_router_upstream_connections_total{kind=\"reused\"}"), 0)
      << "kept-alive upstream connections are reused";
}

// Streams from several clients at once, interleaved on the router's I/O threads, each exactly
// the worker's bytes.
TEST_F(RouterE2E, ConcurrentStreamsPassThroughByteForByte) {
  ScriptedWorker script;
  http::HttpServerOptions so;
  so.port = 0;
  auto upstream = http::HttpServer::start(so, script);
  ASSERT_TRUE(upstream);
  auto router = start_router(Policy::kCacheAware, {"http://127.0.0.1:" + std::to_string((*upstream)->port())});
  ASSERT_TRUE(router);
  std::string expected;
  for (const std::string& p : ScriptedWorker::pieces()) expected += p;
  std::atomic<int> exact{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", router->port());
      for (int i = 0; i < 5; ++i) {
        auto r = c.Post("/v1/chat/completions",
                        json{{"model", kTinyModelId}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true}}.dump(),
                        "application/json");
        if (r && r->status == 200 && r->body == expected) ++exact;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(exact.load(), 40);
  (*upstream)->stop();
}

TEST_F(RouterE2E, TheIndexIsRebuiltAfterARouterRestartAndEventsKeepFlowing) {
  start_workers(2);
  const auto p1 = prompt(11, 150), p2 = prompt(12, 150), p3 = prompt(13, 150);
  {
    auto first = start_router();
    ASSERT_TRUE(first);
    ASSERT_FALSE(workers_[1]->complete(p1, 2).is_null());
    ASSERT_TRUE(wait_indexed(*first, 1, p1));
    first->stop();
  }
  ASSERT_FALSE(workers_[1]->complete(p2, 2).is_null());  // while no router listens
  auto second = start_router();
  ASSERT_TRUE(second);
  ASSERT_TRUE(wait_indexed(*second, 1, p2)) << "the snapshot carries what happened while the router was down";
  ASSERT_FALSE(workers_[1]->complete(p3, 2).is_null());  // after: arrives as events
  ASSERT_TRUE(wait_indexed(*second, 1, p3));
  for (const auto& p : {p1, p2, p3}) {
    Answer a = post(second->port(), "/v1/completions", completion(extend(p, 5, 20)));
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.worker, worker_url(*workers_[1]));
    EXPECT_GE(a.cached(), 144);
  }
  EXPECT_GT(status_of(*second, worker_url(*workers_[1])).events_applied, 0u);
}

TEST_F(RouterE2E, AdminAddsDrainsAndRemovesWorkers) {
  start_workers(2);
  const std::string w0 = worker_url(*workers_[0]), w1 = worker_url(*workers_[1]);
  auto router = start_router(Policy::kRoundRobin, {w0});
  ASSERT_TRUE(router);
  httplib::Client c("127.0.0.1", router->port());
  auto added = c.Post("/admin/workers", json{{"url", w1}}.dump(), "application/json");
  ASSERT_TRUE(added);
  EXPECT_EQ(added->status, 200) << added->body;
  EXPECT_EQ(json::parse(added->body)["workers"].size(), 2u);
  auto twice = c.Post("/admin/workers", json{{"url", w1}}.dump(), "application/json");
  EXPECT_EQ(twice->status, 400);
  auto drained = c.Post("/admin/workers/drain", json{{"url", w0}}.dump(), "application/json");
  ASSERT_TRUE(drained);
  EXPECT_EQ(drained->status, 200);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(post(router->port(), "/v1/completions", completion(prompt(i, 20), 2)).worker, w1);
  auto removed = c.Delete("/admin/workers?url=" + w1);
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->status, 200);
  EXPECT_EQ(post(router->port(), "/v1/completions", completion(prompt(1, 20), 2)).status, 503);  // w0 drains, w1 gone
  EXPECT_EQ(c.Get("/health")->status, 503);
  c.Post("/admin/workers/drain", json{{"url", w0}, {"drain", false}}.dump(), "application/json");
  EXPECT_EQ(post(router->port(), "/v1/completions", completion(prompt(1, 20), 2)).worker, w0);
  EXPECT_EQ(c.Delete("/admin/workers?url=http://127.0.0.1:1")->status, 404);
}

}  // namespace
}  // namespace kvstash::router::testing
