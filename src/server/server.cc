// Routes, operations (API keys, CORS, readiness, model names, request time limit, draining) and
// the admission of generation requests. The HTTP layer underneath is http/http_server.h; one
// generation request in flight is a GenerationTask.
#include "server/server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>

#include <openssl/crypto.h>

#include "common/sha256.h"
#include "server/anthropic_api.h"
#include "server/responses_api.h"
#include "server/chat_template.h"
#include "server/embeddings_api.h"
#include "server/tokenize_api.h"
#include "server/generation_task.h"
#include "server/log.h"
#include "server/prompt_builder.h"
#include "server/request_parser.h"
#include "server/request_workers.h"
#include "server/response_cache.h"
#include "server/response_json.h"
#include "server/tool_calls.h"

namespace kvstash::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// How often the time keeper looks for generations past their time limit.
constexpr std::chrono::milliseconds kTimeKeeperTick{100};
// stop(): how long aborted generations get to send their last bytes.
constexpr std::chrono::milliseconds kAbortFlush{2000};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string known_endpoint(const std::string& path) {
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/identity", "/v1/kv/info", "/v1/kv/events", "/v1/embeddings", "/tokenize", "/detokenize", "/v1/messages", "/v1/messages/count_tokens",
                        "/health", "/ready", "/metrics"}) {
    if (path == p) return p;
  }
  if (starts_with(path, "/v1/models/")) return "/v1/models/{id}";  // one label, whatever the id
  if (path == "/v1/responses") return path;
  if (starts_with(path, "/v1/responses/")) return "/v1/responses/{id}";
  return "other";
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// The cache salt of a request: the key's namespace, then the body's cache_salt, length-prefixed so
// that no pair of (namespace, salt) can spell another's. The common namespace ("") leaves the
// body's salt as it is, so requests without keys keep their keys (and peers their sharing).
std::string tenant_salt(const std::string& cache_namespace, const std::string& body_salt) {
  if (cache_namespace.empty()) return body_salt;
  return "kvstash-tenant-v1:" + std::to_string(cache_namespace.size()) + ":" + cache_namespace + ":" + body_salt;
}

// The endpoints anyone may call with keys configured: liveness and readiness probes.
bool open_endpoint(const std::string& path) { return path == "/health" || path == "/ready"; }

}  // namespace

struct Server::Impl : http::Handler {
  GenerationBackend& backend;
  ServerOptions options;
  ChatTemplateKind chat_template = ChatTemplateKind::kChatML;
  // How the template's model writes tool calls, and the ids of that markup's control tokens (the
  // output must show them for the parser: tool_calls.h).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  std::vector<TokenId> tool_marker_tokens;
  Metrics metrics;
  std::unique_ptr<http::HttpServer> http;
  // What handlers read: set once `http` is in place. A request can arrive (on an I/O thread) before
  // start() has stored the server it came through.
  std::atomic<const http::HttpServer*> http_view{nullptr};
  std::atomic<bool> draining{false};
  std::atomic<int> active{0};  // admitted generation requests (see ServerOptions::max_active_requests)

  std::mutex tasks_mutex;
  std::condition_variable tasks_changed;
  // Open generation requests; the map owns them until they end (their finished callback).
  std::map<GenerationTask*, std::shared_ptr<GenerationTask>> tasks;  // guarded by tasks_mutex
  bool keeper_stop = false;                                         // guarded by tasks_mutex
  std::thread time_keeper;
  std::unique_ptr<KvEventsApi> kv_events;  // set when options.kv_events is
  std::unique_ptr<EmbeddingsApi> embeddings;
  std::unique_ptr<ResponseStore> responses;  // the Responses API's stored conversations  // POST /v1/embeddings (its own worker thread)
  // Parsing, rendering and tokenizing bodies (never on the I/O threads).
  std::unique_ptr<RequestWorkers> workers;
  PromptOptions prompt_options;
  std::unique_ptr<StructuredOutputs> structured_outputs;  // response_format's grammars (prompt_options points here)
  // The API keys as digests, with their cache namespaces ("" = the common one).
  struct KeyEntry {
    Digest digest{};
    std::string cache_namespace;
    std::string name;
  };
  std::vector<KeyEntry> keys;

  Impl(GenerationBackend& b, ServerOptions o) : backend(b), options(std::move(o)) {
    const auto add_key = [this](const std::string& key, const std::string& name, const std::string& ns) {
      KeyEntry e;
      e.digest = sha256(key.data(), key.size());
      // A key's own namespace is named by its digest: stable across restarts, never the key itself.
      e.cache_namespace = ns == "*" ? "" : !ns.empty() ? "ns:" + ns : "key:" + to_hex(e.digest).substr(0, 32);
      e.name = name;
      keys.push_back(std::move(e));
    };
    for (const std::string& k : options.api_keys) add_key(k, "", "");
    for (const ApiKey& k : options.named_api_keys) add_key(k.key, k.name, k.cache_namespace);
    prompt_options.parse_special_in_content = options.parse_special_in_content;
    if (backend.model_info().tokenizer) {
      structured_outputs = std::make_unique<StructuredOutputs>(backend.model_info().tokenizer);
      prompt_options.structured_outputs = structured_outputs.get();
    }
    workers = std::make_unique<RequestWorkers>(
        RequestWorkersOptions{.threads = std::max(1, options.request_workers), .max_queued = options.request_queue});
    if (options.kv_events) {
      kv_events = std::make_unique<KvEventsApi>(*options.kv_events, options.kv_info, backend.model_info().id,
                                                options.identity ? options.identity->public_key_hex() : "");
    }
    embeddings = std::make_unique<EmbeddingsApi>(backend, [this](const std::string& model) { return check_model(model); });
    responses = std::make_unique<ResponseStore>(options.responses_ttl, options.responses_max,
                                                options.identity ? response_node_tag(options.identity->public_key_hex()) : "");
  }

  void handle(http::Request request, std::shared_ptr<http::Exchange> exchange) override;
  void handle_generation(Endpoint endpoint, http::Request req, std::shared_ptr<http::Exchange> exchange,
                         std::string cache_namespace);
  // Anthropic's Messages API (anthropic_api.h): translated on a worker into a chat request, which
  // runs as any other, its answer translated back; count_tokens answers the prompt's length.
  void handle_messages(bool count_only, http::Request req, std::shared_ptr<http::Exchange> exchange,
                       std::string cache_namespace);
  // OpenAI's Responses API (responses_api.h): translated on a worker, its history from the store.
  void handle_responses(http::Request req, std::shared_ptr<http::Exchange> exchange, std::string cache_namespace);
  // On a worker: parses, renders and tokenizes, then continues on the strand with admit().
  void prepare_generation(Endpoint endpoint, const http::Request& req, const std::shared_ptr<http::Exchange>& exchange,
                          const std::string& cache_namespace, Clock::time_point arrived);
  // What the response cache decided for a request: "hit" or "semantic-hit" (record set), "miss"
  // (query set when the answer is to be indexed for semantic hits) or "bypass".
  struct CacheOutcome {
    std::string status;
    cache::ChunkKey key;
    std::optional<cache::ResponseRecord> record;
    std::optional<SemanticQuery> query{};
  };
  struct PendingGeneration {
    ParsedRequest parsed;
    GenerationRequest request;
    RequestRecord record;
    // With a response cache: its key and semantic query, computed on the worker with the prompt
    // (hashing every prompt token and tokenizing the last user message are no work for the strand).
    std::optional<CachePlan> plan{};
    std::optional<SemanticQuery> query{};
  };
  // Starts the admitted request's task: from the engine, or replaying a cached record.
  // `cached` = nullopt when the server has no response cache.
  void launch(std::shared_ptr<http::Exchange> exchange, ParsedRequest parsed, GenerationRequest request,
              RequestRecord record, std::optional<CacheOutcome> cached);
  // On the strand: admission (capacity), the response cache's plan and lookup, then launch().
  void admit(std::shared_ptr<http::Exchange> exchange, PendingGeneration pending, const http::Request& req);
  void respond(http::Exchange& exchange, const std::string& path, http::Response response);
  void respond_error(http::Exchange& exchange, const std::string& path, const ApiError& error,
                     std::vector<http::Header> headers = {});
  std::optional<ApiError> check_model(const std::string& requested) const;
  // Tools need a template that presents them and a call syntax the server parses.
  std::optional<ApiError> check_tools(const ParsedRequest& parsed) const;
  // True when no keys are configured or the request bears one; `*who` is then its entry (null
  // without keys).
  bool authenticate(const http::Request& req, const KeyEntry** who) const;
  // Runs `job` on the request workers; answers 503 when their queue is full.
  void offload(const std::shared_ptr<http::Exchange>& exchange, const std::string& path, std::function<void()> job);
  void add_cors(http::Response& r) const;
  void log_request(const RequestRecord& r, int status, const Outcome& o, const std::string& note);
  std::string identity_json() const;
  void abort_all(const std::string& why);
  void keep_time();
  int open_tasks();
};

void Server::Impl::log_request(const RequestRecord& r, int status, const Outcome& o, const std::string& note) {
  if (!options.log_requests) return;
  const double total = std::chrono::duration<double>(Clock::now() - r.start).count();
  if (options.log_json) {
    json line = {{"id", r.id},          {"endpoint", r.endpoint},        {"stream", r.stream},
                 {"status", status},    {"prompt_tokens", o.prompt_tokens}, {"cached_tokens", o.cached_tokens},
                 {"generated", o.completion_tokens}, {"ttft_s", o.ttft_s}, {"total_s", total},
                 {"finish", o.finish_reason}};
    if (!r.cache.empty()) line["cache"] = r.cache;
    if (!note.empty()) line["note"] = note;
    log_line(dump_json(line));
    return;
  }
  char text[512];
  std::snprintf(text, sizeof(text),
                "%s %s%s status=%d prompt_tokens=%d cached_tokens=%d generated=%d ttft=%.3fs "
                "total=%.3fs finish=%s%s%s%s%s",
                r.id.c_str(), r.endpoint.c_str(), r.stream ? " stream" : "", status, o.prompt_tokens,
                o.cached_tokens, o.completion_tokens, o.ttft_s, total,
                o.finish_reason.empty() ? "-" : o.finish_reason.c_str(), r.cache.empty() ? "" : " cache=",
                r.cache.c_str(), note.empty() ? "" : " ", note.c_str());
  log_line(text);
}

// GET /v1/identity: the node's public key (it signs this node's response records), the keys it
// trusts, and whether the response cache is on.
std::string Server::Impl::identity_json() const {
  json trusted = json::array();
  if (options.trust) {
    for (const identity::PublicKey& key : options.trust->keys()) trusted.push_back(identity::to_hex(key));
  }
  return dump_json({{"object", "identity"},
                    {"algorithm", "ed25519"},
                    {"public_key", options.identity ? json(options.identity->public_key_hex()) : json(nullptr)},
                    {"trusted_keys", trusted},
                    {"signature_domains", {std::string(cache::kResponseSignatureDomain)}},
                    {"response_cache", options.response_cache != nullptr}});
}

void Server::Impl::add_cors(http::Response& r) const {
  if (options.cors_origin.empty()) return;
  r.headers.push_back({"Access-Control-Allow-Origin", options.cors_origin});
  if (options.cors_origin != "*") r.headers.push_back({"Vary", "Origin"});
}

void Server::Impl::respond(http::Exchange& exchange, const std::string& path, http::Response response) {
  add_cors(response);
  metrics.count_request(known_endpoint(path), response.status);
  exchange.respond(std::move(response));
}

void Server::Impl::respond_error(http::Exchange& exchange, const std::string& path, const ApiError& error,
                                 std::vector<http::Header> headers) {
  http::Response r;
  r.status = error.http_status;
  r.body = error.to_json();
  r.headers = std::move(headers);
  respond(exchange, path, std::move(r));
}

bool Server::Impl::authenticate(const http::Request& req, const KeyEntry** who) const {
  *who = nullptr;
  if (keys.empty()) return true;
  const std::string_view auth = req.header("Authorization");
  // Anthropic's SDKs send the key as x-api-key.
  const std::string_view api_key = req.header("x-api-key");
  if (!starts_with(lower(auth.substr(0, 7)), "bearer ") && api_key.empty()) return false;
  const std::string_view key = starts_with(lower(auth.substr(0, 7)), "bearer ") ? auth.substr(7) : api_key;
  // Digests of equal length compared in constant time, every entry every time: neither the
  // comparison nor the loop tells a timing observer how much of a key was right.
  const Digest given = sha256(key.data(), key.size());
  const KeyEntry* found = nullptr;
  for (const KeyEntry& e : keys) {
    const bool same = CRYPTO_memcmp(given.data(), e.digest.data(), given.size()) == 0;
    if (same && found == nullptr) found = &e;
  }
  *who = found;
  return found != nullptr;
}

void Server::Impl::offload(const std::shared_ptr<http::Exchange>& exchange, const std::string& path,
                           std::function<void()> job) {
  if (workers->submit(std::move(job))) return;
  respond_error(*exchange, path,
                ApiError{503, "the server is busy parsing other requests; retry later", "server_error", "", "busy"},
                {{"Retry-After", "1"}});
}

std::optional<ApiError> Server::Impl::check_model(const std::string& requested) const {
  if (requested == backend.model_info().id) return std::nullopt;
  if (std::find(options.aliases.begin(), options.aliases.end(), requested) != options.aliases.end()) return std::nullopt;
  return ApiError{404, "The model '" + requested + "' does not exist (this server serves '" + backend.model_info().id + "')",
                  "invalid_request_error", "model", "model_not_found"};
}

void Server::Impl::handle(http::Request req, std::shared_ptr<http::Exchange> exchange) {
  const std::string& path = req.path;
  if (req.method == "OPTIONS" && !options.cors_origin.empty()) {
    http::Response r;
    r.status = 204;
    r.content_type.clear();
    r.headers = {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                 {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
                 {"Access-Control-Max-Age", "86400"}};
    return respond(*exchange, path, std::move(r));
  }
  const bool peer_path = options.share_handler &&
                         (starts_with(path, "/v1/kv/chunks/") || starts_with(path, "/v1/kv/fragments/") ||
                          starts_with(path, "/v1/kv/responses/") || starts_with(path, "/v1/kv/peer"));
  // Peers authenticate by signature; probes need no key; everything else does.
  const bool needs_key = !peer_path && !open_endpoint(path) && !(path == "/metrics" && options.public_metrics);
  const KeyEntry* who = nullptr;
  if (needs_key && !authenticate(req, &who)) {
    return respond_error(*exchange, path,
                         ApiError{401, "Incorrect or missing API key: send 'Authorization: Bearer KEY'",
                                  "invalid_request_error", "", "invalid_api_key"},
                         {{"WWW-Authenticate", "Bearer"}});
  }
  if (peer_path) {
    // Counted by the share module's own counters (kvstash_share_*), not per endpoint here.
    return options.share_handler->handle(std::move(req), std::move(exchange));
  }
  const char* allowed = nullptr;  // the method a known path takes
  if (kv_events && (path == "/v1/kv/info" || path == "/v1/kv/events")) {
    if (req.method == "GET") {
      metrics.count_request(path, 200);
      if (path == "/v1/kv/info") return kv_events->handle_info(*exchange);
      return kv_events->handle_events(req, std::move(exchange));
    }
    allowed = "GET";
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (req.method == "POST") {
      // Decided before `req` moves (`path` refers into it).
      const Endpoint endpoint = path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions;
      return handle_generation(endpoint, std::move(req), std::move(exchange), who ? who->cache_namespace : std::string());
    }
    allowed = "POST";
  } else if (path == "/v1/responses" || starts_with(path, "/v1/responses/")) {
    const std::string id = path.size() > 14 ? path.substr(14) : std::string();  // after "/v1/responses/"
    const std::string tenant = who ? who->cache_namespace : std::string();
    if (id.empty() && req.method == "POST") return handle_responses(std::move(req), std::move(exchange), tenant);
    if (!id.empty() && (req.method == "GET" || req.method == "DELETE")) {
      std::optional<StoredResponse> stored = responses->get(id, tenant);
      if (!stored) {
        return respond_error(*exchange, path, ApiError{404, "response '" + id + "' not found", "invalid_request_error", "", "not_found"});
      }
      http::Response r;
      if (req.method == "GET") {
        r.body = stored->response.dump();
      } else {
        responses->erase(id, tenant);
        r.body = nlohmann::json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump();
      }
      return respond(*exchange, path, std::move(r));
    }
    allowed = id.empty() ? "POST" : "GET, DELETE";
  } else if (path == "/v1/messages" || path == "/v1/messages/count_tokens") {
    if (req.method == "POST") {
      const bool count_only = path == "/v1/messages/count_tokens";  // before `req` moves (`path` refers into it)
      return handle_messages(count_only, std::move(req), std::move(exchange), who ? who->cache_namespace : std::string());
    }
    allowed = "POST";
  } else if (path == "/v1/embeddings") {
    if (req.method == "POST") {
      return embeddings->submit(std::move(req.body), [this, exchange, path](int status, std::string body) {
        exchange->post([this, exchange, path, status, body = std::move(body)]() mutable {
          http::Response r;
          r.status = status;
          r.body = std::move(body);
          respond(*exchange, path, std::move(r));
        });
      });
    }
    allowed = "POST";
  } else if (path == "/tokenize" || path == "/detokenize") {
    if (req.method == "POST") {
      // Tokenizing a large body takes a while: on the workers, answered on the strand.
      return offload(exchange, path, [this, exchange, path, body = std::move(req.body)] {
        std::string out;
        const Tokenizer& tokenizer = *backend.model_info().tokenizer;
        auto err = path == "/tokenize" ? tokenize_request(body, tokenizer, &out) : detokenize_request(body, tokenizer, &out);
        exchange->post([this, exchange, path, err = std::move(err), out = std::move(out)]() mutable {
          if (err) return respond_error(*exchange, path, *err);
          http::Response r;
          r.body = std::move(out);
          respond(*exchange, path, std::move(r));
        });
      });
    }
    allowed = "POST";
  } else if (starts_with(path, "/v1/models/")) {
    // OpenAI's "retrieve model": the served model or an alias; any other id is a 404 in OpenAI's
    // error shape. Ids may hold '/' (Hugging Face names), so the rest of the path is the id.
    if (req.method == "GET" || req.method == "HEAD") {
      const std::string id = path.substr(std::string_view("/v1/models/").size());
      if (!id.empty() && !check_model(id)) {
        http::Response r;
        r.body = dump_json({{"id", id}, {"object", "model"}, {"created", static_cast<std::int64_t>(std::time(nullptr))},
                            {"owned_by", "kvstash"}});
        return respond(*exchange, path, std::move(r));
      }
      return respond_error(*exchange, path, ApiError{404, "The model '" + id + "' does not exist", "invalid_request_error",
                                                     "model", "model_not_found"});
    }
    allowed = "GET, HEAD";
  } else if (path == "/health" || path == "/ready" || path == "/v1/models" || path == "/metrics" || path == "/v1/identity") {
    if (req.method == "GET" || req.method == "HEAD") {
      http::Response r;
      if (path == "/health") {
        r.body = R"({"status":"ok"})";
      } else if (path == "/ready") {
        const bool ready = !draining.load();
        r.status = ready ? 200 : 503;
        r.body = ready ? R"({"status":"ready"})" : R"({"status":"draining"})";
      } else if (path == "/v1/models") {
        json models = json::array();
        for (const std::string& id : [&] {
               std::vector<std::string> ids = {backend.model_info().id};
               ids.insert(ids.end(), options.aliases.begin(), options.aliases.end());
               return ids;
             }()) {
          models.push_back({{"id", id}, {"object", "model"}, {"created", static_cast<std::int64_t>(std::time(nullptr))},
                            {"owned_by", "kvstash"}});
        }
        r.body = dump_json({{"object", "list"}, {"data", models}});
      } else if (path == "/v1/identity") {
        r.body = identity_json();
      } else {
        const http::HttpServer* front = http_view.load(std::memory_order_acquire);
        const http::HttpStats hs = front ? front->stats() : http::HttpStats{};
        r.content_type = "text/plain; version=0.0.4";
        r.body = metrics.render(backend.stats(), backend.kv_store_stats(), &hs);
        if (options.extra_metrics) r.body += options.extra_metrics();
        if (options.response_cache) r.body += options.response_cache->render_metrics();
      }
      return respond(*exchange, path, std::move(r));
    }
    allowed = "GET";
  }
  if (allowed) {
    return respond_error(*exchange, path,
                         ApiError{405, "method " + req.method + " is not allowed on " + path + " (use " + allowed + ")",
                                  "invalid_request_error", "", "method_not_allowed"},
                         {{"Allow", allowed}});
  }
  respond_error(*exchange, path,
                ApiError{404, "unknown endpoint: " + req.method + " " + path, "invalid_request_error", "", "unknown_endpoint"});
}

void Server::Impl::handle_generation(Endpoint endpoint, http::Request req, std::shared_ptr<http::Exchange> exchange,
                                     std::string cache_namespace) {
  // The body is JSON whatever the Content-Type says (curl -d sends a form type); a multipart
  // form is not JSON and is refused by name.
  if (starts_with(lower(req.header("Content-Type")), "multipart/")) {
    RequestRecord record;
    record.id = new_response_id(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-");
    record.endpoint = req.path;
    const ApiError error{415, "the request body must be JSON (Content-Type: application/json), not a multipart form",
                         "invalid_request_error", "", "unsupported_media_type"};
    log_request(record, error.http_status, Outcome{}, "error=\"" + error.message.substr(0, 200) + "\"");
    return respond_error(*exchange, req.path, error);
  }
  const std::string path = req.path;
  auto shared_req = std::make_shared<http::Request>(std::move(req));
  // The request's clock (log, TTFT) starts now: time waiting for a worker counts.
  offload(exchange, path, [this, endpoint, shared_req, exchange, ns = std::move(cache_namespace), arrived = Clock::now()] {
    prepare_generation(endpoint, *shared_req, exchange, ns, arrived);
  });
}

void Server::Impl::handle_messages(bool count_only, http::Request req, std::shared_ptr<http::Exchange> exchange,
                                   std::string cache_namespace) {
  const std::string path = req.path;
  auto shared_req = std::make_shared<http::Request>(std::move(req));
  offload(exchange, path, [this, count_only, shared_req, exchange, path, ns = std::move(cache_namespace), arrived = Clock::now()] {
    auto answer = [&](int status, std::string body) {
      exchange->post([this, exchange, path, status, body = std::move(body)]() mutable {
        http::Response r;
        r.status = status;
        r.body = std::move(body);
        metrics.count_request(path, status);
        exchange->respond(std::move(r));
      });
    };
    if (count_only) {  // count_tokens takes no max_tokens
      nlohmann::json body = nlohmann::json::parse(shared_req->body, nullptr, false);
      if (body.is_object() && !body.contains("max_tokens")) {
        body["max_tokens"] = 1;
        shared_req->body = body.dump();
      }
    }
    MessagesTranslation t;
    if (auto err = translate_messages_request(shared_req->body, t)) return answer(400, anthropic_error_body(400, err->message));
    if (count_only) {
      ParsedRequest parsed;
      GenerationRequest request;
      std::optional<ApiError> err = parse_request(Endpoint::kChatCompletions, t.chat.dump(), parsed);
      if (!err) err = build_generation_request(parsed, backend.model_info(), chat_template, request, prompt_options);
      if (err) return answer(err->http_status, anthropic_error_body(err->http_status, err->message));
      return answer(200, nlohmann::json{{"input_tokens", request.prompt.size()}}.dump());
    }
    shared_req->body = t.chat.dump();
    auto translated = std::make_shared<AnthropicExchange>(exchange, t.model, t.pin_messages > 0);
    prepare_generation(Endpoint::kChatCompletions, *shared_req, translated, ns, arrived);
  });
}

void Server::Impl::handle_responses(http::Request req, std::shared_ptr<http::Exchange> exchange, std::string cache_namespace) {
  const std::string path = req.path;
  auto shared_req = std::make_shared<http::Request>(std::move(req));
  offload(exchange, path, [this, shared_req, exchange, path, ns = std::move(cache_namespace), arrived = Clock::now()] {
    ResponsesTranslation t;
    if (auto err = translate_responses_request(shared_req->body, *responses, ns, t)) {
      const ApiError error{err->status, err->message, "invalid_request_error", err->param, err->status == 404 ? "not_found" : ""};
      exchange->post([this, exchange, path, error] { respond_error(*exchange, path, error); });
      return;
    }
    shared_req->body = t.chat.dump();
    auto translated = std::make_shared<ResponsesExchange>(exchange, std::move(t), responses.get(), ns);
    prepare_generation(Endpoint::kChatCompletions, *shared_req, translated, ns, arrived);
  });
}

void Server::Impl::prepare_generation(Endpoint endpoint, const http::Request& req,
                                      const std::shared_ptr<http::Exchange>& exchange,
                                      const std::string& cache_namespace, Clock::time_point arrived) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  RequestRecord record;
  record.start = arrived;
  record.id = new_response_id(chat ? "chatcmpl-" : "cmpl-");
  record.endpoint = req.path;
  auto fail = [&](const ApiError& error) {
    exchange->post([this, exchange, record, error] {
      log_request(record, error.http_status, Outcome{}, "error=\"" + error.message.substr(0, 200) + "\"");
      respond_error(*exchange, record.endpoint, error);
    });
  };
  ParsedRequest parsed;
  if (auto err = parse_request(endpoint, req.body, parsed)) return fail(*err);
  record.stream = parsed.stream;
  if (parsed.n > options.max_n) {
    return fail(ApiError{400, "'n' is " + std::to_string(parsed.n) + "; this server generates at most " +
                                  std::to_string(options.max_n) + " choices per request (--max-n)",
                         "invalid_request_error", "n", "out_of_range"});
  }
  if (auto err = check_model(parsed.model)) return fail(*err);
  if (auto err = check_tools(parsed)) return fail(*err);
  // The key's namespace first: a body's salt narrows a tenant's namespace, never leaves it.
  parsed.cache_salt = tenant_salt(cache_namespace, parsed.cache_salt);
  const ModelInfo& info = backend.model_info();
  GenerationRequest request;
  if (auto err = build_generation_request(parsed, info, chat_template, request, prompt_options)) return fail(*err);
  auto state = std::make_shared<PendingGeneration>(PendingGeneration{std::move(parsed), std::move(request), std::move(record)});
  if (ResponseCache* cache = options.response_cache.get()) {
    state->plan = cache->plan(state->parsed, state->request, req);
    if (state->plan->cacheable()) state->query = cache->semantic_query(state->parsed, state->request, *info.tokenizer);
  }
  auto http_req = std::make_shared<http::Request>();  // the request without its (large) body
  http_req->method = req.method;
  http_req->target = req.target;
  http_req->path = req.path;
  http_req->query = req.query;
  http_req->headers = req.headers;
  http_req->remote_address = req.remote_address;
  exchange->post([this, exchange, state, http_req] { admit(exchange, std::move(*state), *http_req); });
}

void Server::Impl::admit(std::shared_ptr<http::Exchange> exchange, PendingGeneration pending, const http::Request& req) {
  ParsedRequest& parsed = pending.parsed;
  GenerationRequest& request = pending.request;
  RequestRecord& record = pending.record;
  auto fail = [&](const ApiError& error) {
    log_request(record, error.http_status, Outcome{}, "error=\"" + error.message.substr(0, 200) + "\"");
    respond_error(*exchange, req.path, error);
  };
  if (draining.load()) return fail(ApiError{503, "the server is shutting down", "server_error", "", "shutdown"});
  const int limit = options.max_active_requests;
  if (active.fetch_add(1) >= limit && limit > 0) {
    active.fetch_sub(1);
    return fail(ApiError{429, "the server is at capacity (" + std::to_string(limit) + " requests running or queued); retry later",
                         "rate_limit_error", "", "queue_full"});
  }
  ResponseCache* cache = options.response_cache.get();
  if (cache == nullptr) return launch(std::move(exchange), std::move(parsed), std::move(request), std::move(record), {});
  const CachePlan plan = pending.plan ? std::move(*pending.plan) : cache->plan(parsed, request, req);
  if (!plan.cacheable()) {
    cache->count_bypass();
    return launch(std::move(exchange), std::move(parsed), std::move(request), std::move(record),
                  CacheOutcome{"bypass", plan.key, std::nullopt});
  }
  // The lookup may wait on redis (and embed the text for a semantic lookup): it runs on the
  // cache's workers and continues on the strand.
  std::optional<SemanticQuery> query = std::move(pending.query);
  auto state = std::make_shared<PendingGeneration>(PendingGeneration{std::move(parsed), std::move(request), std::move(record)});
  const cache::ChunkKey key = plan.key;
  cache->lookup(key, std::move(query), [this, exchange, state, key](LookupResult found) mutable {
    exchange->post([this, exchange, state, key, found = std::move(found)]() mutable {
      if (draining.load()) {
        active.fetch_sub(1);
        log_request(state->record, 503, Outcome{}, "shutdown");
        return respond_error(*exchange, state->record.endpoint,
                             ApiError{503, "the server is shutting down", "server_error", "", "shutdown"});
      }
      const char* status = !found.record ? "miss" : found.semantic ? "semantic-hit" : "hit";
      launch(std::move(exchange), std::move(state->parsed), std::move(state->request), std::move(state->record),
             CacheOutcome{status, key, std::move(found.record), std::move(found.query)});
    });
  });
}

void Server::Impl::launch(std::shared_ptr<http::Exchange> exchange, ParsedRequest parsed, GenerationRequest request,
                          RequestRecord record, std::optional<CacheOutcome> cached) {
  const ModelInfo& info = backend.model_info();
  TaskHost host{metrics, *info.tokenizer,
                [this](const RequestRecord& r, int status, const Outcome& o, const std::string& note) {
                  log_request(r, status, o, note);
                },
                nullptr};
  ResponseMeta meta{record.id, static_cast<std::int64_t>(std::time(nullptr)), info.id};
  const bool want_logprobs = parsed.logprobs;
  const bool store_sync = parsed.store_sync;
  const bool salted = !request.cache_salt.empty();  // its record stays on this node (peer sharing)
  const int prompt_tokens = static_cast<int>(request.prompt.size());
  const bool store_answer = cached && cached->status == "miss";
  std::vector<std::unique_ptr<Generation>> gens;  // one per choice
  for (int i = 0; i < request.n; ++i) {
    auto gen = std::make_unique<Generation>(backend, parsed.stop, parsed.logprobs);
    if (parsed.tools.parse_calls()) gen->show_tokens(tool_marker_tokens);
    if (store_answer) gen->record_events();
    gens.push_back(std::move(gen));
  }
  if (cached) record.cache = cached->status;
  auto task = std::make_shared<GenerationTask>(std::move(host), exchange, std::move(gens), std::move(parsed),
                                               std::move(meta), std::move(record));
  task->set_tool_call_format(tool_format);
  if (store_sync) {
    // The flush blocks: on a request worker, never this I/O thread or the engine's; when none
    // takes it (queue full, stopping), the answer waits for nothing rather than failing.
    task->set_answer_gate([this](std::function<void()> send) {
      auto job = [this, send] {
        backend.flush_kv_store();
        send();
      };
      if (!workers->submit(job)) send();
    });
  }
  if (cached) {
    std::vector<http::Header> headers = {{"x-kvstash-cache", cached->status}};
    if (cached->status != "bypass") headers.push_back({"x-kvstash-cache-key", cached->key.hex()});
    // A semantic hit also names the record it served (the near-duplicate's request key).
    if (cached->record && cached->status == "semantic-hit") {
      headers.push_back({"x-kvstash-cache-source", cached->record->request_key.hex()});
    }
    task->set_headers(std::move(headers));
  }
  if (store_answer) {
    task->set_answer_callback([cache = options.response_cache, key = cached->key, want_logprobs, salted,
                               query = std::move(cached->query)](const Generation& g, const std::string& text) {
      if (g.computed_on_unchecked()) {  // counted by store(); no semantic entry for it either
        cache->store(key, g, text, want_logprobs, salted);
        return;
      }
      cache->store(key, g, text, want_logprobs, salted);
      if (query) cache->store_semantic(key, *query);
    });
  }
  GenerationTask* raw = task.get();
  task->set_finished_callback([this, raw] {
    active.fetch_sub(1);
    std::shared_ptr<GenerationTask> last;  // released after the lock (the caller holds its own)
    {
      std::lock_guard<std::mutex> lock(tasks_mutex);
      auto it = tasks.find(raw);
      if (it != tasks.end()) {
        last = std::move(it->second);
        tasks.erase(it);
      }
    }
    tasks_changed.notify_all();
  });
  {
    std::lock_guard<std::mutex> lock(tasks_mutex);
    tasks.emplace(raw, task);
  }
  if (cached && cached->record) {
    std::vector<TokenEvent> events = ResponseCache::replay_events(*cached->record);
    if (cached->status == "semantic-hit") {
      // The record answered another (near-duplicate) prompt: usage counts this request's prompt,
      // all of it "cached" since none of it was prefilled.
      for (TokenEvent& e : events) e.prompt_tokens = e.cached_tokens = prompt_tokens;
    }
    task->start_replay(std::move(events));
    return;
  }
  task->start(std::move(request));  // answers errors itself; finished callback frees the slot
}

std::optional<ApiError> Server::Impl::check_tools(const ParsedRequest& parsed) const {
  if (!parsed.tools.has_tools()) return std::nullopt;
  // A Jinja template that never reads `tools` would drop them from the prompt without a word.
  if (chat_template.is_jinja() && chat_template.source().find("tools") == std::string::npos) {
    return bad_request("this model's chat template does not present tools to the model; start the server with a "
                       "template that does (--chat-template-file)",
                       "tools", "unsupported_tools");
  }
  if (parsed.tools.parse_calls() && tool_format == ToolCallFormat::kNone) {
    return bad_request("this server cannot read tool calls in this model's chat-template family (known: hermes, "
                       "llama3, mistral, deepseek, command-r); send tool_choice \"none\" or start the server with "
                       "such a template (--chat-template-file)",
                       "tools", "unsupported_tools");
  }
  return std::nullopt;
}

int Server::Impl::open_tasks() {
  std::lock_guard<std::mutex> lock(tasks_mutex);
  return static_cast<int>(tasks.size());
}

void Server::Impl::abort_all(const std::string& why) {
  std::vector<std::shared_ptr<GenerationTask>> open;
  {
    std::lock_guard<std::mutex> lock(tasks_mutex);
    for (auto& [raw, task] : tasks) open.push_back(task);
  }
  for (auto& t : open) t->abort_later(why);
}

void Server::Impl::keep_time() {
  std::unique_lock<std::mutex> lock(tasks_mutex);
  while (!keeper_stop) {
    tasks_changed.wait_for(lock, kTimeKeeperTick);
    if (keeper_stop || options.request_timeout_s <= 0) continue;
    const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.request_timeout_s));
    const auto now = Clock::now();
    for (auto& [raw, task] : tasks) {
      if (now - task->started() > limit) task->abort_later("request_timeout");
    }
  }
}

Expected<std::unique_ptr<Server>> Server::create(GenerationBackend& backend, const ServerOptions& options) {
  Expected<ChatTemplateChoice> choice =
      choose_chat_template(backend.model_info().chat_template, options.chat_template);
  if (!choice) return choice.status();
  std::unique_ptr<Server> server(new Server());
  server->impl_ = std::make_shared<Impl>(backend, options);
  server->impl_->chat_template = choice->kind;
  server->impl_->tool_format = detect_tool_call_format(choice->kind);
  server->impl_->prompt_options.tool_format = server->impl_->tool_format;
  for (const std::string& text : tool_call_marker_tokens(server->impl_->tool_format)) {
    if (std::optional<TokenId> id = backend.model_info().tokenizer->find_token(text)) {
      server->impl_->tool_marker_tokens.push_back(*id);
    }
  }
  if (!choice->warning.empty()) log_line("warning: " + choice->warning);
  return server;
}

Server::~Server() { stop(); }

Status Server::start() {
  Impl& s = *impl_;
  http::HttpServerOptions o = s.options.http;
  o.host = s.options.host;
  o.port = s.options.port;
  o.body_limit = s.options.max_body_bytes;
  o.io_threads = std::max(1, s.options.http_threads);
  o.error_body = [](int status, const std::string& message) {
    const char* code = status == 413 ? "payload_too_large"
                       : status == 431 ? "headers_too_large"
                       : status == 408 ? "request_timeout"
                       : status == 503 ? "unavailable"
                                       : "bad_request";
    return ApiError{status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code}.to_json();
  };
  Expected<std::unique_ptr<http::HttpServer>> started = http::HttpServer::start(o, s);
  if (!started) return started.status();
  s.http = std::move(*started);
  s.http_view.store(s.http.get(), std::memory_order_release);
  s.time_keeper = std::thread([&s] { s.keep_time(); });
  return Status::ok();
}

void Server::drain(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  if (!s.http) return;
  s.draining = true;
  s.http->stop_accepting();
  std::unique_lock<std::mutex> lock(s.tasks_mutex);
  s.tasks_changed.wait_for(lock, grace, [&] { return s.tasks.empty(); });
  lock.unlock();
  stop();
}

void Server::stop() {
  if (!impl_ || !impl_->http) return;
  Impl& s = *impl_;
  s.draining = true;
  s.http->stop_accepting();
  if (s.kv_events) s.kv_events->stop();  // event streams end; their threads join
  // Lookups in flight finish (their continuations see `draining` and answer 503).
  if (s.options.response_cache) s.options.response_cache->stop();
  s.embeddings->stop();  // queued embedding requests answer 503
  s.workers->stop();     // bodies being prepared finish; their continuations see `draining` (503)
  // Open generations end with "abort" (an error event when streaming) and their last bytes go
  // out before the connections close (bounded).
  s.abort_all("shutdown");
  {
    std::unique_lock<std::mutex> lock(s.tasks_mutex);
    s.tasks_changed.wait_for(lock, kAbortFlush, [&] { return s.tasks.empty(); });
  }
  s.http->stop();  // writes what the aborted tasks queued (bounded), then closes
  {
    std::lock_guard<std::mutex> lock(s.tasks_mutex);
    s.keeper_stop = true;
  }
  s.tasks_changed.notify_all();
  if (s.time_keeper.joinable()) s.time_keeper.join();
  s.http_view.store(nullptr, std::memory_order_release);
  s.http.reset();
}

int Server::port() const { return impl_->http ? impl_->http->port() : 0; }
const Metrics& Server::metrics() const { return impl_->metrics; }

}  // namespace kvstash::server
