// Prefill/decode disaggregation (issue 34, RouterOptions::prefill_workers) end to end: real
// `kvstash serve` workers (tiny model, loopback), one in the prefill role and one decoding. A long
// prompt takes the prefill hop and its greedy answer is the one a single node gives; a short one
// skips the hop; a prefill worker killed before the request only costs the hop (colocated
// serving on the decode worker, same answer, no error); roles reported in /v1/kv/info (serve
// --role) make prefill workers without --prefill-worker, and the router's flags win over them.
// DisaggE2E's workers share no store: those tests prove routing and fallbacks; DisaggStoreE2E's
// share a redis-server and prove the decode worker loads the prefilled KV, for the chat,
// completions, Messages and Responses APIs.
#include <csignal>

#include "cache/redis_test_server.h"
#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "router/router_test_util.h"

namespace kvstash::router::testing {
namespace {

using server::testing::ServeProcess;


std::string text_of(const Answer& a) {
  json j = a.json_body();
  return j.is_object() && j.contains("choices") ? j["choices"][0].value("text", "") : "<no answer: " + a.body + ">";
}

// The text of a Messages answer (its text blocks) or a Responses answer (its messages' output_text).
std::string api_text(const Answer& a) {
  json j = a.json_body();
  if (!j.is_object() || (!j.contains("content") && !j.contains("output"))) return "<no answer: " + a.body + ">";
  std::string out;
  for (const json& b : j.value("content", json::array())) {
    if (b.value("type", "") == "text") out += b.value("text", "");
  }
  for (const json& item : j.value("output", json::array())) {
    if (item.value("type", "") != "message") continue;
    for (const json& part : item.value("content", json::array())) out += part.value("text", "");
  }
  return out;
}

// The prompt tokens read from the KV cache, as the Messages API (cache_read_input_tokens) or the
// Responses API (input_tokens_details.cached_tokens) says.
int api_cached(const Answer& a) {
  json j = a.json_body();
  if (!j.is_object() || !j.contains("usage")) return -1;
  const json& u = j["usage"];
  if (u.contains("cache_read_input_tokens")) return u["cache_read_input_tokens"].get<int>();
  return u.contains("input_tokens_details") ? u["input_tokens_details"].value("cached_tokens", -1) : -1;
}

// A long user message: n numbers.
std::string words_of(int seed, int n) {
  std::string words;
  for (int x : prompt(seed, n)) words += " " + std::to_string(x);
  return words;
}

class DisaggE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    model_path_ = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    for (const char* name : {"decode", "prefill", "single"}) {
      std::vector<std::string> args = {"--cache-ram", "64MiB", "--chunk-tokens", "32"};
      if (std::string(name) != "single") args.insert(args.end(), shared_store_.begin(), shared_store_.end());
      const auto& role = std::string(name) == "decode" ? decode_args_ : std::string(name) == "prefill" ? prefill_args_ : no_args_;
      args.insert(args.end(), role.begin(), role.end());
      workers_.push_back(std::make_unique<ServeProcess>(model_path_, args, scratch_.path() + "/" + name + ".log"));
      ASSERT_TRUE(workers_.back()->ready()) << workers_.back()->log();
    }
  }
  ServeProcess& decode() { return *workers_[0]; }
  ServeProcess& prefill() { return *workers_[1]; }
  ServeProcess& single() { return *workers_[2]; }  // the reference: a node outside the router
  // The decode worker as --worker and the prefill worker as --prefill-worker.
  RouterOptions router_options(std::chrono::milliseconds read_timeout = std::chrono::milliseconds(600000)) {
    RouterOptions o;
    o.worker.read_timeout = read_timeout;
    o.port = 0;
    o.model_path = model_path_;
    o.health_interval = std::chrono::milliseconds(600000);  // only failed requests take a worker out
    o.worker.backoff_min = std::chrono::milliseconds(100);
    o.workers = {worker_url(decode())};
    o.prefill_workers = {worker_url(prefill())};
    o.prefill_min_tokens = 64;
    return o;
  }
  std::unique_ptr<Router> start_router(std::chrono::milliseconds read_timeout = std::chrono::milliseconds(600000)) {
    return start_router(router_options(read_timeout));
  }
  std::unique_ptr<Router> start_router(const RouterOptions& o) {
    auto r = Router::create(o);
    EXPECT_TRUE(r) << r.status().to_string();
    if (!r) return nullptr;
    EXPECT_TRUE((*r)->start());
    return std::move(*r);
  }
  // Kills (SIGKILL) or hangs (SIGSTOP) the prefill worker after a first hop, then sends two long prompts.
  void fail_prefill_worker(bool hang);
  double metric(const Router& r, const std::string& sample) { return ServeProcess::metric_in("\n" + r.metrics_text(), sample); }

  std::string model_path_;
  std::vector<std::string> shared_store_;  // serve arguments of the decode and prefill workers' shared store
  std::vector<std::string> decode_args_, prefill_args_, no_args_;  // more serve arguments of each (--role)
  cache::testing::ScratchDir scratch_;
  std::vector<std::unique_ptr<ServeProcess>> workers_;
};

TEST_F(DisaggE2E, ALongPromptIsPrefilledOnThePrefillWorkerAndAnsweredAsOneNodeWould) {
  auto router = start_router();
  ASSERT_TRUE(router);
  const auto p = prompt(1, 150);
  Answer a = post(router->port(), "/v1/completions", completion(p, 8));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.worker, worker_url(decode())) << "a prefill worker never answers";
  EXPECT_EQ(text_of(a), text_of(post(single().port(), "/v1/completions", completion(p, 8))));
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 1);
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"failed\"}"), 0);
  // The prefill worker prefilled the prompt (its own counters; the hop ended before the decode).
  EXPECT_GE(prefill().metric("kvstash_prompt_tokens_total"), 150);
  EXPECT_EQ(decode().metric("kvstash_prompt_tokens_total"), 150) << "the decode worker saw the prompt once";
  EXPECT_TRUE(status_of(*router, worker_url(prefill())).prefill);
  EXPECT_FALSE(status_of(*router, worker_url(decode())).prefill);
  // A chat request with a stream takes the hop too, and its stream still comes from the decode worker.
  std::string words;
  for (int x : prompt(7, 200)) words += " " + std::to_string(x);
  json chat = {{"messages", json::array({json{{"role", "user"}, {"content", words}}})},
               {"max_tokens", 4}, {"temperature", 0}, {"stream", true}};
  Answer s = post(router->port(), "/v1/chat/completions", chat);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.worker, worker_url(decode()));
  EXPECT_NE(s.body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 2);
}

TEST_F(DisaggE2E, AShortPromptSkipsTheHop) {
  auto router = start_router();
  ASSERT_TRUE(router);
  const auto p = prompt(2, 20);
  Answer a = post(router->port(), "/v1/completions", completion(p, 8));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(text_of(a), text_of(post(single().port(), "/v1/completions", completion(p, 8))));
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"skipped\"}"), 1);
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 0);
  EXPECT_EQ(status_of(*router, worker_url(prefill())).pool_keys, 0u);
}

// A prefill worker that fails under the router (killed, or hung past the read timeout) costs
// only the hop: the decode worker prefills (colocated serving), the answer is the same, and no
// request fails. Whether the router had already taken a killed worker out (its first health round
// runs as the router starts) or finds out from the hop itself, the outcome is a fallback: the
// test allows either of the two counters, never an error and never a hop that "succeeded".
void DisaggE2E::fail_prefill_worker(bool hang) {
  {
    RouterOptions o;
    o.port = 0;
    o.model_path = model_path_;
    o.health_interval = std::chrono::milliseconds(600000);
    o.worker.read_timeout = std::chrono::milliseconds(1000);  // the hung hop's end
    o.workers = {worker_url(decode())};
    o.prefill_workers = {worker_url(prefill())};
    o.prefill_min_tokens = 64;
    auto r = Router::create(o);
    ASSERT_TRUE(r) << r.status().to_string();
    Router& router = **r;
    ASSERT_TRUE(router.start());
    // A first request takes the hop (the prefill worker is up).
    Answer warm = post(router.port(), "/v1/completions", completion(prompt(10, 150), 4));
    ASSERT_EQ(warm.status, 200) << warm.body;
    ASSERT_EQ(metric(router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 1);
    const std::string failed_url = worker_url(prefill());
    if (hang) {
      ASSERT_EQ(::kill(prefill().pid(), SIGSTOP), 0);
    } else {
      prefill().kill9();
    }
    for (int seed : {3, 4}) {
      const auto p = prompt(seed, 150);
      Answer a = post(router.port(), "/v1/completions", completion(p, 8));
      ASSERT_EQ(a.status, 200) << a.body;
      EXPECT_EQ(a.worker, worker_url(decode()));
      EXPECT_EQ(text_of(a), text_of(post(single().port(), "/v1/completions", completion(p, 8))));
      if (hang && seed == 3) {
        // The hung hop waited out the 1 s read timeout (a lower bound by construction): that is
        // upstream time, so x-kvstash-upstream-ms holds it and the router's overhead does not.
        EXPECT_GE(std::atof(a.upstream_ms.c_str()), 1000.0) << a.upstream_ms;
      }
    }
    EXPECT_EQ(metric(router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 1) << "no hop after the failure succeeded";
    EXPECT_EQ(metric(router, "kvstash_router_prefill_total{outcome=\"failed\"}") +
                  metric(router, "kvstash_router_prefill_total{outcome=\"skipped\"}"),
              2);
    EXPECT_LE(metric(router, "kvstash_router_prefill_total{outcome=\"failed\"}"), 1) << "one failed hop takes the worker out";
    EXPECT_EQ(metric(router, "kvstash_router_failed_total"), 0);
    EXPECT_FALSE(status_of(router, failed_url).up);
    if (hang) ::kill(prefill().pid(), SIGCONT);
    router.stop();
  }
}

TEST_F(DisaggE2E, AKilledPrefillWorkerFallsBackToColocatedServingWithTheSameAnswer) { fail_prefill_worker(false); }
TEST_F(DisaggE2E, AHungPrefillWorkerFallsBackToColocatedServingWithTheSameAnswer) { fail_prefill_worker(true); }

TEST_F(DisaggE2E, APrefillWorkerIsNeverTheOnlyWorkerThatAnswers) {
  RouterOptions o;
  o.port = 0;
  o.model_path = model_path_;
  o.prefill_workers = {worker_url(prefill())};
  auto r = Router::create(o);
  ASSERT_TRUE(r) << r.status().to_string();
  ASSERT_TRUE((*r)->start());
  Answer a = post((*r)->port(), "/v1/completions", completion(prompt(5, 20), 4));
  EXPECT_EQ(a.status, 503) << "no decode worker: refused, not answered by the prefill worker";
  o.model_path.clear();
  auto no_model = Router::create(o);
  ASSERT_FALSE(no_model);
  EXPECT_NE(no_model.status().message().find("--prefill-worker needs -m"), std::string::npos);
}

// The decode and prefill workers share a redis-server (--cache-redis); the reference node does not.
class DisaggStoreE2E : public DisaggE2E {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cache::testing::redis_installed()) << "redis-server is not installed";
    redis_ = std::make_unique<cache::testing::RedisTestServer>(cache::testing::free_port());
    ASSERT_TRUE(redis_->ready());
    shared_store_ = {"--cache-redis", "redis://127.0.0.1:" + std::to_string(redis_->port())};
    DisaggE2E::SetUp();
  }
  std::unique_ptr<cache::testing::RedisTestServer> redis_;
};

// The hop's kvstash_store_sync: the prefill worker answers once its chunks (the prompt's tail
// included) are in redis, so the decode worker, whose own pool never saw the prompt, loads them.
TEST_F(DisaggStoreE2E, TheDecodeWorkerLoadsThePrefilledKvFromTheSharedStore) {
  auto router = start_router();
  ASSERT_TRUE(router);
  const auto p = prompt(21, 150);
  Answer a = post(router->port(), "/v1/completions", completion(p, 8));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.worker, worker_url(decode()));
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 1);
  EXPECT_GE(a.cached(), 128) << "the decode worker found the prefill worker's chunks in redis: " << a.body;
  const std::string decode_label = "{worker=\"" + worker_url(decode()) + "\"}";
  EXPECT_EQ(metric(*router, "kvstash_router_predicted_cached_tokens_total" + decode_label), a.cached())
      << "after a hop the router predicts the KV the decode worker loads from the store";
  EXPECT_EQ(text_of(a), text_of(post(single().port(), "/v1/completions", completion(p, 8))));
}

// A store that refuses writes (the redis-server killed): whatever the hop does, the answer is the
// single node's and nothing fails.
TEST_F(DisaggStoreE2E, AStoreThatRefusesWritesStillGivesTheSameAnswer) {
  auto router = start_router(std::chrono::milliseconds(30000));
  ASSERT_TRUE(router);
  redis_->kill();
  for (int seed : {22, 23}) {
    const auto p = prompt(seed, 150);
    Answer a = post(router->port(), "/v1/completions", completion(p, 8));
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.worker, worker_url(decode()));
    EXPECT_EQ(text_of(a), text_of(post(single().port(), "/v1/completions", completion(p, 8))));
  }
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}") +
                metric(*router, "kvstash_router_prefill_total{outcome=\"failed\"}"),
            2);
  EXPECT_EQ(metric(*router, "kvstash_router_failed_total"), 0);
}

// The Messages and Responses APIs take the hop as a chat request (the one the worker translates
// them to): the decode worker finds the prefill worker's chunks (the same prompt, token for
// token) and answers as a single node does. A Responses request that continues a stored response
// is not tokenized by the router (its conversation is on the worker that stores it) and never hops.
TEST_F(DisaggStoreE2E, MessagesAndResponsesRequestsTakeTheHopAndAnswerAsOneNodeWould) {
  auto router = start_router();
  ASSERT_TRUE(router);
  json messages = {{"messages", json::array({json{{"role", "user"}, {"content", words_of(41, 200)}}})},
                   {"max_tokens", 8}, {"temperature", 0}};
  Answer m = post(router->port(), "/v1/messages", messages);
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.worker, worker_url(decode()));
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 1);
  EXPECT_GE(api_cached(m), 128) << "the decode worker loaded the hop's chunks: " << m.body;
  EXPECT_EQ(api_text(m), api_text(post(single().port(), "/v1/messages", messages)));

  json responses = {{"input", words_of(42, 200)}, {"max_output_tokens", 8}, {"temperature", 0}};
  Answer r = post(router->port(), "/v1/responses", responses);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.worker, worker_url(decode()));
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 2);
  EXPECT_GE(api_cached(r), 128) << "the decode worker loaded the hop's chunks: " << r.body;
  EXPECT_EQ(api_text(r), api_text(post(single().port(), "/v1/responses", responses)));

  json next = {{"input", "and once more"}, {"max_output_tokens", 4}, {"temperature", 0},
               {"previous_response_id", r.json_body().value("id", "")}};
  Answer n = post(router->port(), "/v1/responses", next);
  ASSERT_EQ(n.status, 200) << n.body;
  EXPECT_EQ(n.worker, worker_url(decode())) << "the worker that stores the conversation";
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 2);
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"skipped\"}"), 0);
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"failed\"}"), 0);
}

// The decode and prefill workers are started with --role decode and --role prefill (no shared
// store: these prove the routing by role).
class DisaggRolesE2E : public DisaggE2E {
 protected:
  void SetUp() override {
    decode_args_ = {"--role", "decode"};
    prefill_args_ = {"--role", "prefill"};
    DisaggE2E::SetUp();
  }
  // Until every worker of `r` has reported its role (bounded).
  bool roles_known(const Router& r) {
    return wait_until([&] {
      for (const WorkerStatus& s : r.workers()) {
        if (s.reported_role.empty()) return false;
      }
      return true;
    });
  }
};

TEST_F(DisaggRolesE2E, AWorkerThatReportsRolePrefillIsAPrefillWorkerWithoutTheFlag) {
  httplib::Client c("127.0.0.1", prefill().port());
  auto info = c.Get("/v1/kv/info");
  ASSERT_TRUE(info);
  EXPECT_EQ(json::parse(info->body, nullptr, false).value("role", ""), "prefill") << info->body;
  RouterOptions o = router_options();
  o.workers = {worker_url(decode()), worker_url(prefill())};  // both plain --worker
  o.prefill_workers.clear();
  auto router = start_router(o);
  ASSERT_TRUE(router);
  ASSERT_TRUE(roles_known(*router));
  EXPECT_EQ(status_of(*router, worker_url(prefill())).role, WorkerRole::kPrefill);
  EXPECT_TRUE(status_of(*router, worker_url(prefill())).prefill);
  EXPECT_EQ(status_of(*router, worker_url(decode())).role, WorkerRole::kDecode);
  httplib::Client admin("127.0.0.1", router->port());
  auto list = admin.Get("/admin/workers");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->status, 200) << list->body;
  const json workers = json::parse(list->body, nullptr, false)["workers"];
  ASSERT_EQ(workers.size(), 2u) << list->body;
  for (const json& w : workers) {
    const std::string role = w["url"] == worker_url(prefill()) ? "prefill" : "decode";
    EXPECT_EQ(w["role"], role) << list->body;
    EXPECT_EQ(w["reported_role"], role) << list->body;
  }
  const auto p = prompt(31, 150);
  Answer a = post(router->port(), "/v1/completions", completion(p, 8));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.worker, worker_url(decode()));
  EXPECT_EQ(text_of(a), text_of(post(single().port(), "/v1/completions", completion(p, 8))));
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 1);
  EXPECT_GE(prefill().metric("kvstash_prompt_tokens_total"), 150);
  for (int seed : {32, 33, 34}) {  // short prompts: the decode worker, never the prefill worker
    Answer s = post(router->port(), "/v1/completions", completion(prompt(seed, 20), 4));
    ASSERT_EQ(s.status, 200) << s.body;
    EXPECT_EQ(s.worker, worker_url(decode()));
  }
  EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"skipped\"}"), 3);
  // POST /admin/workers takes a role as the flags give it; an unknown one is refused by name.
  auto bad = admin.Post("/admin/workers", json{{"url", worker_url(single())}, {"role", "primary"}}.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("role"), std::string::npos) << bad->body;
  auto added = admin.Post("/admin/workers", json{{"url", worker_url(single())}, {"role", "prefill"}}.dump(), "application/json");
  ASSERT_TRUE(added);
  EXPECT_EQ(added->status, 200) << added->body;
  EXPECT_EQ(status_of(*router, worker_url(single())).role, WorkerRole::kPrefill);
}

TEST_F(DisaggRolesE2E, TheRoutersFlagsWinOverTheReportedRoleAndARouterThatCannotHopUsesNone) {
  {  // The flags say the opposite of the reports: the flags win.
    RouterOptions o = router_options();
    o.workers.clear();
    o.decode_workers = {worker_url(prefill())};   // reports prefill
    o.prefill_workers = {worker_url(decode())};   // reports decode
    auto router = start_router(o);
    ASSERT_TRUE(router);
    ASSERT_TRUE(roles_known(*router));
    const WorkerStatus flagged_decode = status_of(*router, worker_url(prefill()));
    EXPECT_EQ(flagged_decode.role, WorkerRole::kDecode);
    EXPECT_EQ(flagged_decode.reported_role, "prefill");
    EXPECT_FALSE(flagged_decode.prefill);
    EXPECT_EQ(status_of(*router, worker_url(decode())).role, WorkerRole::kPrefill);
    const auto p = prompt(35, 150);
    Answer a = post(router->port(), "/v1/completions", completion(p, 8));
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.worker, worker_url(prefill())) << "the --decode-worker answers";
    EXPECT_EQ(metric(*router, "kvstash_router_prefill_total{outcome=\"hop\"}"), 1);
    EXPECT_EQ(text_of(a), text_of(post(single().port(), "/v1/completions", completion(p, 8))));
  }
  {  // Without event subscriptions, the health check reads the role.
    RouterOptions o = router_options();
    o.policy = Policy::kLeastLoaded;
    o.worker.subscribe_events = false;
    o.workers = {worker_url(decode()), worker_url(prefill())};
    o.prefill_workers.clear();
    auto router = start_router(o);
    ASSERT_TRUE(router);
    ASSERT_TRUE(roles_known(*router));
    EXPECT_TRUE(status_of(*router, worker_url(prefill())).prefill);
  }
  {  // Without -m the router takes no hop: a worker that reports prefill answers as a colocated one.
    RouterOptions o;
    o.port = 0;
    o.health_interval = std::chrono::milliseconds(600000);
    o.workers = {worker_url(prefill())};
    auto router = start_router(o);
    ASSERT_TRUE(router);
    ASSERT_TRUE(roles_known(*router));
    const WorkerStatus s = status_of(*router, worker_url(prefill()));
    EXPECT_EQ(s.role, WorkerRole::kColocated);
    EXPECT_EQ(s.reported_role, "prefill");
    EXPECT_FALSE(s.prefill);
    Answer a = post(router->port(), "/v1/completions", completion(prompt(36, 20), 4));
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.worker, worker_url(prefill()));
  }
}

// A role serve cannot report or act on is refused by name, never ignored.
TEST(DisaggServeRole, ServeRefusesARoleItCannotReport) {
  const std::string model = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
  cache::testing::ScratchDir scratch;
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--role", "prefill", "--no-kv-events"}, "--no-kv-events"},
      {{"--role", "decode", "--no-kv-events"}, "--no-kv-events"},
      {{"--role", "prefill", "--no-kv-store"}, "--no-kv-store"},
      {{"--role", "primary"}, "--role"},
  };
  for (const auto& [args, message] : cases) {
    ServeProcess p(model, args, scratch.path() + "/bad-role.log");
    EXPECT_FALSE(p.ready());
    EXPECT_EQ(p.wait_exit(), 1) << p.log();
    EXPECT_NE(p.log().find(message), std::string::npos) << p.log();
  }
}

}  // namespace
}  // namespace kvstash::router::testing
