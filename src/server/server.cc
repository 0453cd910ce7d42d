// The only file that includes httplib: routes, error pages, and the two ways of answering a
// generation request (one JSON body, or an SSE stream from a chunked content provider).
#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>

#include "server/chat_template.h"
#include "server/connection_probe.h"
#include "server/generation.h"
#include "server/log.h"
#include "server/prompt_builder.h"
#include "server/request_parser.h"
#include "server/response_json.h"

namespace kvstash::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a worker waits for engine events before it checks the client and the server again.
constexpr std::chrono::milliseconds kPollInterval{50};

const char* kJson = "application/json";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  res.set_content(error.to_json(), kJson);
}

// One admitted generation request, counted in Impl::active until it ends.
class ActiveSlot {
 public:
  explicit ActiveSlot(std::atomic<int>& active) : active_(active) {}
  ~ActiveSlot() { active_.fetch_sub(1); }
  ActiveSlot(const ActiveSlot&) = delete;
  ActiveSlot& operator=(const ActiveSlot&) = delete;

 private:
  std::atomic<int>& active_;
};

// What one generation request's log line reports.
struct RequestRecord {
  std::string id;
  std::string endpoint;
  Clock::time_point start = Clock::now();
  bool stream = false;
};

}  // namespace

struct Server::Impl {
  GenerationBackend& backend;
  ServerOptions options;
  ChatTemplateKind chat_template = ChatTemplateKind::kChatML;
  httplib::Server http;
  Metrics metrics;
  std::thread listener;
  std::atomic<bool> stopping{false};
  std::atomic<int> active{0};  // admitted generation requests (see ServerOptions::max_active_requests)
  int port = 0;

  // Takes a slot for one generation request, or nullptr when max_active_requests are active.
  std::unique_ptr<ActiveSlot> admit() {
    const int limit = options.max_active_requests;
    if (active.fetch_add(1) >= limit && limit > 0) {
      active.fetch_sub(1);
      return nullptr;
    }
    return std::make_unique<ActiveSlot>(active);
  }

  Impl(GenerationBackend& b, ServerOptions o) : backend(b), options(std::move(o)) {}

  void log_request(const RequestRecord& r, int status, const Outcome& o, const std::string& note) {
    if (!options.log_requests) return;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "%s %s%s status=%d prompt_tokens=%d cached_tokens=%d generated=%d ttft=%.3fs "
                  "total=%.3fs finish=%s%s%s",
                  r.id.c_str(), r.endpoint.c_str(), r.stream ? " stream" : "", status, o.prompt_tokens,
                  o.cached_tokens, o.completion_tokens, o.ttft_s, seconds_since(r.start),
                  o.finish_reason.empty() ? "-" : o.finish_reason.c_str(), note.empty() ? "" : " ",
                  note.c_str());
    log_line(line);
  }

  void fail(httplib::Response& res, const RequestRecord& r, const ApiError& error, const Outcome& o = {}) {
    log_request(r, error.http_status, o, "error=\"" + error.message.substr(0, 200) + "\"");
    send_error(res, error);
  }

  void install_routes();
  void handle_generation(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void respond_whole(std::unique_ptr<Generation> gen, const ParsedRequest& parsed, ResponseMeta meta,
                     RequestRecord record, const httplib::Request& req, httplib::Response& res);
  void respond_stream(std::unique_ptr<Generation> gen, std::unique_ptr<ActiveSlot> slot,
                      const ParsedRequest& parsed, ResponseMeta meta, RequestRecord record,
                      httplib::Response& res);
};

void Server::Impl::handle_generation(Endpoint endpoint, const httplib::Request& req,
                                     httplib::Response& res) {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  RequestRecord record;
  record.id = new_response_id(chat ? "chatcmpl-" : "cmpl-");
  record.endpoint = req.path;
  ParsedRequest parsed;
  if (auto err = parse_request(endpoint, req.body, parsed)) return fail(res, record, *err);
  record.stream = parsed.stream;
  const ModelInfo& info = backend.model_info();
  GenerationRequest request;
  if (auto err = build_generation_request(parsed, info, chat_template, request)) {
    return fail(res, record, *err);
  }
  Outcome submitted;
  submitted.prompt_tokens = static_cast<int>(request.prompt.size());
  std::unique_ptr<ActiveSlot> slot = admit();
  if (!slot) {
    ApiError full{429,
                  "the server is at capacity (" + std::to_string(options.max_active_requests) +
                      " requests running or queued); retry later",
                  "rate_limit_error", "", "queue_full"};
    return fail(res, record, full, submitted);
  }
  auto gen = std::make_unique<Generation>(backend, parsed.stop, parsed.logprobs);
  if (auto err = gen->start(std::move(request))) return fail(res, record, *err, submitted);

  ResponseMeta meta{record.id, static_cast<std::int64_t>(std::time(nullptr)), info.id};
  if (parsed.stream) {
    respond_stream(std::move(gen), std::move(slot), parsed, std::move(meta), std::move(record), res);
  } else {
    respond_whole(std::move(gen), parsed, std::move(meta), std::move(record), req, res);
  }
}

void Server::Impl::respond_whole(std::unique_ptr<Generation> gen, const ParsedRequest& parsed,
                                 ResponseMeta meta, RequestRecord record, const httplib::Request& req,
                                 httplib::Response& res) {
  std::string text;
  std::vector<LogprobEntry> logprobs;
  // Nothing is written until the answer is whole, so a client that hangs up is only seen by
  // looking at its socket between polls.
  std::optional<ClientConnection> client =
      ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  bool client_gone = false;
  while (!gen->done()) {
    if (stopping) {
      gen->abort();  // answered below with finish_reason "abort": never a cut answer as "stop"
      break;
    }
    if (client && client->peer_closed()) {
      gen->abandon();
      client_gone = true;
      break;
    }
    Delta d = gen->poll(kPollInterval);
    text += d.text;
    logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  }
  const Outcome& o = gen->outcome();
  metrics.observe_generation(o.prompt_tokens, o.cached_tokens, o.completion_tokens,
                             o.completion_tokens > 0 ? o.ttft_s : -1.0);
  if (client_gone) {
    // No one reads this answer; httplib's write fails and closes the connection.
    res.status = 499;  // nginx's "client closed request", for the request counter
    log_request(record, 499, o, "client_disconnected");
    return;
  }
  if (o.finish_reason == "error") {
    ApiError err{500, "generation failed: " + o.error, "server_error", "", ""};
    return fail(res, record, err, o);
  }
  const Tokenizer& tok = *backend.model_info().tokenizer;
  json body;
  if (parsed.endpoint == Endpoint::kChatCompletions) {
    body = chat_completion_json(meta, text, o, parsed.logprobs ? chat_logprobs_json(logprobs, tok) : json(nullptr));
  } else {
    body = text_completion_json(meta, text, o,
                                parsed.logprobs ? completion_logprobs_json(logprobs, tok) : json(nullptr));
  }
  res.set_content(dump_json(body), kJson);
  log_request(record, 200, o, "");
}

namespace {

// A stream's state, shared by the content provider and its releaser.
struct StreamState {
  std::unique_ptr<Generation> gen;
  std::unique_ptr<ActiveSlot> slot;
  ParsedRequest parsed;
  ResponseMeta meta;
  RequestRecord record;
  bool role_sent = false;
  bool all_sent = false;
};

}  // namespace

void Server::Impl::respond_stream(std::unique_ptr<Generation> gen, std::unique_ptr<ActiveSlot> slot,
                                  const ParsedRequest& parsed, ResponseMeta meta, RequestRecord record,
                                  httplib::Response& res) {
  auto state = std::make_shared<StreamState>();
  state->gen = std::move(gen);
  state->slot = std::move(slot);
  state->parsed = parsed;
  state->meta = std::move(meta);
  state->record = std::move(record);
  const Tokenizer& tok = *backend.model_info().tokenizer;
  const bool chat = parsed.endpoint == Endpoint::kChatCompletions;

  auto provider = [this, state, &tok, chat](std::size_t, httplib::DataSink& sink) -> bool {
    Generation& g = *state->gen;
    if (state->all_sent) {
      sink.done();
      return true;
    }
    std::string out;
    if (chat && !state->role_sent) {
      out += sse_event(chat_chunk_json(state->meta, /*first=*/true, "", "", nullptr));
      state->role_sent = true;
    } else {
      if (stopping) g.abort();
      Delta d = g.poll(kPollInterval);
      if (!d.text.empty() || !d.logprobs.empty()) {
        json lp = nullptr;
        if (state->parsed.logprobs) lp = chat ? chat_logprobs_json(d.logprobs, tok) : completion_logprobs_json(d.logprobs, tok);
        out += sse_event(chat ? chat_chunk_json(state->meta, false, d.text, "", lp)
                              : text_chunk_json(state->meta, d.text, "", lp));
      }
    }
    if (g.done()) {
      const Outcome& o = g.outcome();
      if (o.finish_reason == "error") {
        out += sse_event(json::parse(ApiError{500, "generation failed: " + o.error, "server_error", "", ""}.to_json()));
      } else if (o.finish_reason == "abort") {
        // The stream is cut: an error event says so (a client must not take it as complete).
        out += sse_event(json::parse(
            ApiError{503, "the server is shutting down; the answer is incomplete", "server_error", "", "shutdown"}.to_json()));
      } else {
        out += sse_event(chat ? chat_chunk_json(state->meta, false, "", o.finish_reason, nullptr)
                              : text_chunk_json(state->meta, "", o.finish_reason, nullptr));
        if (state->parsed.include_usage) out += sse_event(usage_chunk_json(state->meta, chat, o));
      }
      out += "data: [DONE]\n\n";
      state->all_sent = true;
    }
    if (!out.empty()) {
      if (!sink.write(out.data(), out.size())) {
        g.abandon();  // the client went away
        return false;
      }
    } else if (!sink.is_writable()) {
      g.abandon();
      return false;
    }
    if (state->all_sent) sink.done();
    return true;
  };
  auto releaser = [this, state](bool success) {
    Generation& g = *state->gen;
    if (!g.done()) g.abandon();
    const Outcome& o = g.outcome();
    metrics.observe_generation(o.prompt_tokens, o.cached_tokens, o.completion_tokens,
                               o.completion_tokens > 0 ? o.ttft_s : -1.0);
    log_request(state->record, 200, o, success && state->all_sent ? "" : "client_disconnected");
    // Drop the Generation now (cancels the engine's side if still running) rather than when
    // httplib destroys the response.
    state->gen.reset();
    state->slot.reset();
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", provider, releaser);
}

void Server::Impl::install_routes() {
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(Endpoint::kChatCompletions, req, res);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(Endpoint::kCompletions, req, res);
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", kJson);
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json model = {{"id", backend.model_info().id},
                  {"object", "model"},
                  {"created", static_cast<std::int64_t>(std::time(nullptr))},
                  {"owned_by", "kvstash"}};
    res.set_content(dump_json({{"object", "list"}, {"data", json::array({model})}}), kJson);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(backend.stats(), backend.kv_store_stats()), "text/plain; version=0.0.4");
  });

  // Known paths asked with the wrong method get 405 rather than 404.
  auto method_not_allowed = [](const char* allowed) {
    return [allowed](const httplib::Request& req, httplib::Response& res) {
      ApiError err{405, "method " + req.method + " is not allowed on " + req.path + " (use " + allowed + ")",
                   "invalid_request_error", "", "method_not_allowed"};
      res.set_header("Allow", allowed);
      send_error(res, err);
    };
  };
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    http.Get(path, method_not_allowed("POST"));
    http.Put(path, method_not_allowed("POST"));
    http.Delete(path, method_not_allowed("POST"));
    http.Patch(path, method_not_allowed("POST"));
  }
  for (const char* path : {"/health", "/v1/models", "/metrics"}) {
    http.Post(path, method_not_allowed("GET"));
    http.Put(path, method_not_allowed("GET"));
    http.Delete(path, method_not_allowed("GET"));
    http.Patch(path, method_not_allowed("GET"));
  }

  // Statuses httplib produces itself (no route, body too large) arrive here with no body.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError err;
    err.http_status = res.status;
    if (res.status == 404) {
      err.message = "unknown endpoint: " + req.method + " " + req.path;
      err.code = "unknown_endpoint";
    } else if (res.status == 413) {
      err.message = "request body too large (limit " + std::to_string(options.max_body_bytes) + " bytes)";
      err.code = "payload_too_large";
    } else {
      err.message = "HTTP error " + std::to_string(res.status);
    }
    send_error(res, err);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, "internal error: " + what, "server_error", "", ""});
  });
  // Counted just before the response is written (not in the logger, which runs after it): a
  // client that has its answer must find it counted. A stream is counted when it starts.
  http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    static const char* kKnown[] = {"/v1/chat/completions", "/v1/completions", "/health", "/v1/models",
                                   "/metrics"};
    std::string endpoint = "other";
    for (const char* k : kKnown) {
      if (req.path == k) endpoint = k;
    }
    metrics.count_request(endpoint, res.status);
  });
}

Expected<std::unique_ptr<Server>> Server::create(GenerationBackend& backend, const ServerOptions& options) {
  Expected<ChatTemplateChoice> choice =
      choose_chat_template(backend.model_info().chat_template, options.chat_template);
  if (!choice) return choice.status();
  std::unique_ptr<Server> server(new Server());
  server->impl_ = std::make_unique<Impl>(backend, options);
  server->impl_->chat_template = choice->kind;
  if (!choice->warning.empty()) log_line("warning: " + choice->warning);
  server->impl_->install_routes();
  return server;
}

Server::~Server() { stop(); }

Status Server::start() {
  Impl& s = *impl_;
  const int threads = std::max(4, s.options.http_threads);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  s.http.set_payload_max_length(s.options.max_body_bytes);
  if (s.options.port == 0) {
    s.port = s.http.bind_to_any_port(s.options.host);
    if (s.port <= 0) return io_error("cannot bind " + s.options.host + " to any port");
  } else {
    if (!s.http.bind_to_port(s.options.host, s.options.port)) {
      return io_error("cannot bind " + s.options.host + ":" + std::to_string(s.options.port));
    }
    s.port = s.options.port;
  }
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  return Status::ok();
}

void Server::stop() {
  if (!impl_) return;
  impl_->stopping = true;
  // Open generations see `stopping` at their next poll, end with "abort" (an error event when
  // streaming) and free their slots; wait for that (bounded) before httplib cuts the sockets.
  for (int i = 0; i < 100 && impl_->active.load() > 0; ++i) {
    std::this_thread::sleep_for(kPollInterval);
  }
  impl_->http.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

int Server::port() const { return impl_->port; }
const Metrics& Server::metrics() const { return impl_->metrics; }

}  // namespace kvstash::server
