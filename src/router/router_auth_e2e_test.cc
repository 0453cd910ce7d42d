// API keys and the admin token of `kvstash route`, a real router process in front of a real
// `kvstash serve --api-key` worker (loopback): clients need the router's key (OpenAI-style 401
// otherwise), the router sends the workers' key in place of the client's (answers and KV events
// flow), /admin/* needs the admin token, and listening beyond loopback without one is refused.
#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "router/router_test_util.h"

namespace kvstash::router::testing {
namespace {

using server::testing::ServeProcess;

struct Reply {
  int status = 0;
  std::string body;
  std::string worker;
  json error() const {
    json j = json::parse(body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"] : json();
  }
};

Reply call(int port, const std::string& method, const std::string& path, const std::string& auth, const json& body = json()) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  httplib::Headers h;
  if (!auth.empty()) h.emplace("Authorization", auth);
  const std::string sent = path.rfind("/v1/", 0) == 0 ? server::testing::naming_model(body.dump(), kTinyModelId) : body.dump();
  httplib::Result r = method == "GET" ? c.Get(path, h) : c.Post(path, h, sent, "application/json");
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.worker = r->get_header_value("x-kvstash-worker");
  return out;
}

class RouterAuthE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    worker_ = std::make_unique<ServeProcess>(
        model_, std::vector<std::string>{"--api-key", "worker-key", "--identity", scratch_.path() + "/w.key"},
        scratch_.path() + "/w.log");
    ASSERT_TRUE(worker_->ready()) << worker_->log();
  }
  std::unique_ptr<RouteProcess> route(std::vector<std::string> flags, const std::string& name) {
    std::vector<std::string> args = {"-m", model_, "--worker", worker_url(*worker_)};
    args.insert(args.end(), flags.begin(), flags.end());
    return std::make_unique<RouteProcess>(args, scratch_.path() + "/" + name + ".log");
  }

  std::string model_;
  cache::testing::ScratchDir scratch_;
  std::unique_ptr<ServeProcess> worker_;
};

TEST_F(RouterAuthE2E, ClientsNeedTheRoutersKeyAndWorkersGetTheirs) {
  auto r = route({"--api-key", "client-key", "--api-key", "second-key", "--worker-api-key", "worker-key", "--admin-token", "admin-tok"},
                 "router");
  ASSERT_GT(r->port(), 0) << r->log();
  const json body = completion({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}, 2);

  for (const std::string& bad : {std::string(), std::string("Bearer wrong"), std::string("Bearer worker-key"),
                                 std::string("Bearer admin-tok"), std::string("Basic client-key")}) {
    Reply a = call(r->port(), "POST", "/v1/completions", bad, body);
    EXPECT_EQ(a.status, 401) << "auth '" << bad << "': " << a.body;
    EXPECT_EQ(a.error().value("code", ""), "invalid_api_key") << a.body;
    EXPECT_EQ(a.error().value("type", ""), "invalid_request_error") << a.body;
    EXPECT_TRUE(a.worker.empty());  // never proxied
  }
  // The worker requires worker-key: a 200 means the router sent it.
  Reply ok = call(r->port(), "POST", "/v1/completions", "Bearer client-key", body);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.worker, worker_url(*worker_));
  EXPECT_EQ(call(r->port(), "POST", "/v1/completions", "bearer second-key", body).status, 200);
  EXPECT_EQ(call(r->port(), "GET", "/v1/models", "Bearer client-key").status, 200);
  EXPECT_EQ(call(r->port(), "GET", "/v1/models", "").status, 401);
  // /health stays open.
  EXPECT_EQ(call(r->port(), "GET", "/health", "").status, 200);

  // The KV event subscription carries the worker key too: the router's index learns the blocks.
  bool indexed = wait_until([&] {
    Reply w = call(r->port(), "GET", "/admin/workers", "Bearer admin-tok");
    json j = json::parse(w.body, nullptr, false);
    return w.status == 200 && j["workers"][0]["events_connected"] == true && j["workers"][0]["kv_keys"]["pool"].get<int>() > 0;
  });
  EXPECT_TRUE(indexed) << call(r->port(), "GET", "/admin/workers", "Bearer admin-tok").body << "\n" << r->log();
}

TEST_F(RouterAuthE2E, AdminNeedsTheAdminToken) {
  auto r = route({"--api-key", "client-key", "--worker-api-key", "worker-key", "--admin-token", "admin-tok"}, "router");
  ASSERT_GT(r->port(), 0) << r->log();
  for (const std::string& bad : {std::string(), std::string("Bearer client-key"), std::string("Bearer admin-to")}) {
    Reply a = call(r->port(), "GET", "/admin/workers", bad);
    EXPECT_EQ(a.status, 401) << a.body;
    EXPECT_EQ(a.error().value("code", ""), "invalid_admin_token") << a.body;
    Reply add = call(r->port(), "POST", "/admin/workers", bad, json{{"url", "http://127.0.0.1:9"}});
    EXPECT_EQ(add.status, 401) << add.body;
  }
  Reply list = call(r->port(), "GET", "/admin/workers", "Bearer admin-tok");
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(json::parse(list.body)["workers"].size(), 1u);  // the refused add did not happen
  Reply drain = call(r->port(), "POST", "/admin/workers/drain", "Bearer admin-tok", json{{"url", worker_url(*worker_)}});
  EXPECT_EQ(drain.status, 200) << drain.body;
  EXPECT_EQ(json::parse(drain.body)["workers"][0]["draining"], true);
}

TEST_F(RouterAuthE2E, WithoutAWorkerKeyTheClientsKeyIsNotPassedOn) {
  // The router's own key is the router's: the keyed worker answers 401, passed through unchanged.
  auto keyed = route({"--api-key", "worker-key"}, "keyed");
  ASSERT_GT(keyed->port(), 0) << keyed->log();
  Reply a = call(keyed->port(), "POST", "/v1/completions", "Bearer worker-key", completion({5, 6, 7, 8}, 1));
  EXPECT_EQ(a.status, 401) << a.body;
  EXPECT_EQ(a.worker, worker_url(*worker_));  // the worker's answer, not the router's
  // A router without keys is transparent: the client's Authorization reaches the worker.
  auto open = route({}, "open");
  ASSERT_GT(open->port(), 0) << open->log();
  EXPECT_EQ(call(open->port(), "POST", "/v1/completions", "Bearer worker-key", completion({5, 6, 7, 8}, 1)).status, 200);
  EXPECT_EQ(call(open->port(), "POST", "/v1/completions", "", completion({5, 6, 7, 8}, 1)).status, 401);
}

TEST_F(RouterAuthE2E, ListeningBeyondLoopbackNeedsAnAdminToken) {
  auto r = route({"--host", "0.0.0.0"}, "refused");
  EXPECT_EQ(r->wait_exit(), 1) << r->log();
  EXPECT_NE(r->log().find("--admin-token"), std::string::npos) << r->log();
  EXPECT_EQ(r->port(), 0);
  // With a token the options are accepted (not started here: tests listen on loopback only).
  RouterOptions o;
  o.host = "0.0.0.0";
  o.admin_token = "admin-tok";
  EXPECT_TRUE(Router::create(o));
  o.admin_token.clear();
  EXPECT_FALSE(Router::create(o));
  o.host = "127.0.0.1";
  EXPECT_TRUE(Router::create(o));
}

}  // namespace
}  // namespace kvstash::router::testing
