// The router's private state, shared by router.cc (routes, admin, health, lifecycle) and
// router_proxy.cc (tokenizing, choosing a worker, the upstream exchange).
//
// A proxied request lives on its client connection's strand from arrival to the last byte of
// its answer (Impl::Proxied): tokenized, scored, sent upstream and relayed without a thread
// hand-off. Only a prompt whose body is over RouterOptions::tokenize_inline_bytes is tokenized
// on the `jobs` threads (and handed back to the strand), and the admin operations (which may
// join a worker's events thread) run there too.
//
// Lock order: workers_mu, health_mu and each Worker's own lock are never held together.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "router/metrics.h"
#include "router/prompt_cache.h"
#include "router/router.h"
#include "server/backend.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::router {

using Clock = std::chrono::steady_clock;

// A fixed set of threads running queued jobs (long prompts' tokenizing, admin), oldest first. stop() drops the jobs not started and
// joins. Thread safety: push() from any thread.
class JobQueue {
 public:
  explicit JobQueue(int n_threads);
  ~JobQueue();
  void push(std::function<void()> job);
  void stop();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::vector<std::thread> threads_;
};

// The vocabulary and chat template the workers use, from the GGUF's metadata.
// info.tokenizer is `caching`: the GGUF's tokenizer behind the tokenized-prefix cache.
struct RouterModel {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<PrefixTokenCache> prefix_cache;
  std::unique_ptr<CachingTokenizer> caching;
  server::ChatTemplate chat_template = server::ChatTemplate::kChatML;
  server::ModelInfo info;
};
Expected<std::unique_ptr<RouterModel>> load_router_model(const std::string& path, const std::string& chat_template_override,
                                                         std::size_t prefix_cache_tokens);

// 127.0.0.0/8, ::1, localhost.
bool is_loopback_host(const std::string& host);
void respond_on_strand(const std::shared_ptr<http::Exchange>& ex, http::Response r);
void respond_error(const std::shared_ptr<http::Exchange>& ex, int status, const std::string& message, const char* code);
// The router's own error answer, in OpenAI's shape.
http::Response error_response(int status, const std::string& message, const char* code);
nlohmann::json worker_json(const WorkerStatus& s);

struct Router::Impl : http::Handler, std::enable_shared_from_this<Router::Impl> {
  RouterOptions options;
  std::unique_ptr<RouterModel> model;  // null: route without keys
  RouterMetrics metrics;
  std::unique_ptr<http::HttpServer> http;
  std::unique_ptr<JobQueue> jobs;
  std::atomic<bool> started{false};
  std::atomic<std::uint64_t> turn{0};

  mutable std::mutex workers_mu;
  std::vector<std::shared_ptr<Worker>> workers;  // guarded by workers_mu

  std::mutex health_mu;
  std::condition_variable health_cv;
  bool health_stop = false;  // guarded by health_mu
  std::thread health;

  // router.cc
  void handle(http::Request request, std::shared_ptr<http::Exchange> exchange) override;
  void handle_admin(const http::Request& req, const std::shared_ptr<http::Exchange>& ex);
  std::vector<std::shared_ptr<Worker>> worker_list() const;
  std::shared_ptr<Worker> find_worker(const std::string& url) const;
  // `role`: as the router's flags give it; nullopt = the role the worker reports (colocated until then).
  Status add_worker(const std::string& url, std::optional<WorkerRole> role = std::nullopt);
  // Whether prefill hops can be taken: the router tokenizes (-m, a policy other than round-robin).
  bool can_hop() const { return model != nullptr && options.policy != Policy::kRoundRobin; }
  Status remove_worker(const std::string& url);
  void health_loop();
  std::string metrics_text() const;

  // router_proxy.cc
  // What routing needs of a request: its prompt's tokens and salt (when it could be tokenized)
  // and the work it adds.
  struct Prompt {
    bool tokenized = false;
    std::vector<std::int32_t> tokens;
    std::string cache_salt;
    int max_tokens = 0;
    std::string cache_key;  // OpenAI's prompt_cache_key: one key, one worker while it is up
    // The Responses API: the node tag of the response the request continues (previous_response_id)
    // or addresses (GET/DELETE /v1/responses/{id}); it goes to the worker that stores it.
    std::string owner_tag;
    // The prefill hop's request body (a chat or completions request); "" = no hop.
    std::string prefill_body;
    // Where the hop goes: "" = the request's own path; "/v1/chat/completions" for a Messages or
    // Responses request (the hop is the chat request it translates to).
    std::string prefill_target;
  };
  Prompt tokenize(const http::Request& req) const;
  bool any_prefill_worker() const;
  // One proxied request, from handle() to its answer's last byte (router_proxy.cc).
  struct Proxied;
  // On the client connection's strand: routes and proxies `req`, trying other workers when one
  // fails before its first byte.
  void proxy(http::Request req, std::shared_ptr<http::Exchange> ex, Clock::time_point arrived);
};

}  // namespace kvstash::router
