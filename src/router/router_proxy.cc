// One proxied request: tokenize (the server's own request parser and prompt builder), choose a
// worker (router/policy.h), send it upstream on a kept-alive connection and copy the answer back
// byte for byte, stream or not; on a failure before the first byte, the next worker. All of it
// runs on the client connection's strand (Proxied); the upstream exchange is asynchronous
// (http/upstream.h), so no thread waits for the worker and no answer changes threads.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>

#include "bench/sse.h"
#include "router/router_impl.h"
#include "server/anthropic_api.h"
#include "server/log.h"
#include "server/prompt_builder.h"
#include "server/request_parser.h"
#include "server/responses_api.h"

namespace kvstash::router {
namespace {

using nlohmann::json;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Headers not copied between the two connections: hop-by-hop ones and the framing, which each
// side's HTTP layer writes for itself (RFC 9110 §7.6.1).
bool hop_by_hop(const std::string& name) {
  const std::string n = lower(name);
  return n == "connection" || n == "keep-alive" || n == "transfer-encoding" || n == "content-length" || n == "host" ||
         n == "te" || n == "trailer" || n == "upgrade" || n == "proxy-connection" || n == "content-type" ||
         n == "expect";  // the router has the whole body; the worker must not answer 100 Continue
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// usage.prompt_tokens_details.cached_tokens and usage.prompt_tokens of a JSON answer; -1 when absent.
std::pair<std::int64_t, std::int64_t> usage_of(const json& j) {
  if (!j.is_object() || !j.contains("usage") || !j["usage"].is_object()) return {-1, 0};
  const json& u = j["usage"];
  std::int64_t cached = -1;
  if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
    cached = u["prompt_tokens_details"].value("cached_tokens", std::int64_t{-1});
  }
  return {cached, u.value("prompt_tokens", std::int64_t{0})};
}

// The prefill hop's body: the (chat or completions) request with max_tokens 1 (no
// max_completion_tokens), no stream (nor stream_options), n 1 and "kvstash_store_sync": true (the
// worker answers once its KV reached the shared store). "" when the body is not a JSON object.
std::string prefill_body(json j) {
  if (!j.is_object()) return "";
  j.erase("max_completion_tokens");
  j.erase("stream_options");
  j["max_tokens"] = 1;
  j["stream"] = false;
  j["n"] = 1;
  j["kvstash_store_sync"] = true;
  return j.dump();
}

}  // namespace

Expected<std::unique_ptr<RouterModel>> load_router_model(const std::string& path, const std::string& chat_template_override,
                                                         std::size_t prefix_cache_tokens) {
  auto m = std::make_unique<RouterModel>();
  Expected<std::unique_ptr<gguf::File>> file = gguf::File::open(path);
  if (!file) return Status(file.status().code(), "-m " + path + ": " + file.status().message());
  m->file = std::move(*file);
  Expected<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*m->file);
  if (!tokenizer) return Status(tokenizer.status().code(), "-m " + path + ": " + tokenizer.status().message());
  m->tokenizer = std::move(*tokenizer);
  Expected<server::ChatTemplateChoice> choice = server::choose_chat_template(m->tokenizer->chat_template(), chat_template_override);
  if (!choice) return choice.status();
  m->chat_template = choice->kind;
  m->prefix_cache = std::make_unique<PrefixTokenCache>(*m->tokenizer, prefix_cache_tokens);
  m->caching = std::make_unique<CachingTokenizer>(*m->tokenizer, *m->prefix_cache);
  m->info.tokenizer = m->caching.get();
  m->info.n_vocab = static_cast<int>(m->tokenizer->vocab_size());
  m->info.n_ctx = INT_MAX / 2;  // the worker enforces its context; the router only needs the tokens
  m->info.chat_template = m->tokenizer->chat_template();
  return m;
}

bool Router::Impl::any_prefill_worker() const {
  std::lock_guard lock(workers_mu);
  return std::any_of(workers.begin(), workers.end(), [](const auto& w) { return w->prefill(); });
}

Router::Impl::Prompt Router::Impl::tokenize(const http::Request& req) const {
  Prompt p;
  if (!model || req.method != "POST") return p;
  // Messages and Responses requests are translated as the server translates them, so that their
  // prompt is the chat request's the worker runs (and the prefill hop can be that chat request).
  bool chat = req.path == "/v1/chat/completions";
  std::string translated;  // the chat request of a Messages or Responses request
  if (req.path == "/v1/messages") {
    server::MessagesTranslation t;
    if (server::translate_messages_request(req.body, t)) return p;  // the worker answers the error
    translated = t.chat.dump();
  } else if (req.path == "/v1/responses") {
    // No conversation is stored here: a previous_response_id is "not found" and the request is not
    // tokenized (it goes to the worker that stores the conversation, and never hops).
    server::ResponseStore none(std::chrono::seconds(1), 0);
    server::ResponsesTranslation t;
    if (server::translate_responses_request(req.body, none, "", t)) return p;
    translated = t.chat.dump();
  } else if (!chat && req.path != "/v1/completions") {
    return p;
  }
  if (!translated.empty()) {
    chat = true;
    p.prefill_target = "/v1/chat/completions";
  }
  const std::string& body = translated.empty() ? req.body : translated;
  server::ParsedRequest parsed;
  if (server::parse_request(chat ? server::Endpoint::kChatCompletions : server::Endpoint::kCompletions, body, parsed)) {
    return p;  // invalid: the worker answers the error
  }
  GenerationRequest gen;
  if (server::build_generation_request(parsed, model->info, model->chat_template, gen)) return p;
  p.tokenized = true;
  p.cache_key = parsed.prompt_cache_key;
  p.tokens = std::move(gen.prompt);
  p.cache_salt = std::move(gen.cache_salt);
  p.max_tokens = gen.max_tokens;
  // The prefill hop's body, when a hop may be taken (whether it is, the index decides later on the strand).
  if (static_cast<std::int64_t>(p.tokens.size()) >= options.prefill_min_tokens && any_prefill_worker()) {
    p.prefill_body = prefill_body(json::parse(body, nullptr, false));
  }
  return p;
}

// One proxied request. Every member is used on the client connection's strand only, except
// `prompt`, which a job thread fills for a long prompt before anything else runs.
struct Router::Impl::Proxied : std::enable_shared_from_this<Router::Impl::Proxied> {
  std::shared_ptr<Impl> router;
  http::Request req;
  std::shared_ptr<http::Exchange> ex;
  Clock::time_point arrived;
  Policy policy = Policy::kCacheAware;
  Prompt prompt;
  http::UpstreamRequest upstream_request;
  // The request's keys per distinct KV layout (workers of one model share one).
  std::vector<std::pair<WorkerKvInfo, RequestKeys>> keys_by_layout;
  std::vector<std::string> tried;
  int attempt = 0;
  bool gone = false;  // the client's connection closed
  std::shared_ptr<http::UpstreamCall> upstream;  // the exchange in flight
  std::shared_ptr<Worker> prefill_worker;  // the prefill hop in flight
  // How long the prefill hop took (sent to answered): upstream work, so neither the router's
  // decision time nor its overhead; x-kvstash-upstream-ms includes it.
  Clock::duration hop_time{};
  bool prefilled = false;  // the hop succeeded: the prompt's KV is predicted in the shared store

  // The attempt in flight.
  std::shared_ptr<Worker> worker;
  std::int64_t load = 0, predicted_cached = 0;
  std::string decision;
  Clock::time_point sent;
  bool streaming = false;
  int status = 0;
  http::Response head;
  std::string body;
  bench::SseParser parser;
  std::int64_t actual_cached = -1, prompt_tokens = 0;

  const RequestKeys& keys_for(const WorkerKvInfo& info) {
    for (const auto& [i, k] : keys_by_layout) {
      if (i == info) return k;
    }
    keys_by_layout.emplace_back(info, compute_request_keys(info, prompt.tokens, prompt.cache_salt));
    return keys_by_layout.back().second;
  }

  void client_gone() {
    gone = true;
    if (upstream) upstream->cancel();
  }

  void build_upstream_request(const RouterOptions& options) {
    http::UpstreamRequest& up = upstream_request;
    up.method = req.method;
    up.target = req.target;
    up.body = std::move(req.body);
    std::string content_type = "application/json";
    // The client's Authorization goes on only when the router has no keys of its own.
    const bool replace_auth = !options.worker_api_key.empty() || !options.api_keys.empty();
    for (const http::Header& h : req.headers) {
      const std::string name = lower(h.name);
      if (name == "content-type") content_type = h.value;
      if (replace_auth && name == "authorization") continue;
      if (!hop_by_hop(h.name)) up.headers.push_back(h);
    }
    up.headers.push_back({"Content-Type", content_type});
    if (!options.worker_api_key.empty()) up.headers.push_back({"Authorization", "Bearer " + options.worker_api_key});
  }

  // The request's route: the prefill hop first when it needs one (RouterOptions::prefill_workers),
  // then next(). The hop's failure, whatever it is, only leaves the decode worker to prefill.
  void start() {
    Impl& r = *router;
    if (!prompt.tokenized || gone) return next();
    const std::vector<std::shared_ptr<Worker>> workers = r.worker_list();
    if (std::none_of(workers.begin(), workers.end(), [](const auto& w) { return w->prefill(); })) return next();
    if (prompt.prefill_body.empty()) {  // fewer tokens than prefill_min_tokens in all
      r.metrics.count_prefill("skipped");
      return next();
    }
    // The prompt's tokens predicted cached on the best eligible decode worker.
    std::int64_t best_cached = 0;
    std::vector<std::shared_ptr<Worker>> prefill;
    for (auto& w : workers) {
      if (!w->eligible()) continue;
      if (w->prefill()) {
        prefill.push_back(w);
      } else if (std::optional<WorkerKvInfo> info = w->kv_info()) {
        best_cached = std::max<std::int64_t>(best_cached, w->index().match(*info, keys_for(*info)).total());
      }
    }
    const auto uncached = static_cast<std::int64_t>(prompt.tokens.size()) - best_cached;
    if (prefill.empty() || uncached < r.options.prefill_min_tokens) {
      r.metrics.count_prefill("skipped");
      return next();
    }
    // The least loaded prefill worker (tokens, then requests in flight).
    prefill_worker = *std::min_element(prefill.begin(), prefill.end(), [](const auto& a, const auto& b) {
      return std::pair(a->load_tokens(), a->in_flight()) < std::pair(b->load_tokens(), b->in_flight());
    });
    http::UpstreamRequest hop;
    hop.method = upstream_request.method;
    hop.target = prompt.prefill_target.empty() ? upstream_request.target : prompt.prefill_target;
    hop.headers = upstream_request.headers;
    hop.body = std::move(prompt.prefill_body);
    prompt.prefill_body.clear();
    prefill_worker->begin_request(uncached + 1);
    auto self = shared_from_this();
    auto hop_status = std::make_shared<int>(0);
    http::UpstreamHandlers handlers;
    handlers.on_head = [self, hop_status](http::UpstreamHead h) {
      *hop_status = h.status;
      return !self->gone;
    };
    handlers.on_body = [self](std::string_view) { return !self->gone; };  // the one token is not needed
    handlers.on_done = [self, hop_status, uncached, hop_sent = Clock::now()](const http::UpstreamResult& result) {
      self->hop_time = Clock::now() - hop_sent;
      self->upstream.reset();
      std::shared_ptr<Worker> w = std::move(self->prefill_worker);
      self->prefill_worker = nullptr;
      w->end_request(uncached + 1);
      const bool ok = result.answered && result.ok && *hop_status == 200;
      self->prefilled = ok;
      if (!result.answered && !self->gone) w->mark_failed();  // in transport: taken out, checked again later
      self->router->metrics.count_prefill(ok ? "hop" : "failed");
      if (self->router->options.log_requests) {
        server::log_line("prefill " + self->req.path + " -> " + w->url() +
                         (ok ? "" : " failed (" + (result.answered ? "HTTP " + std::to_string(*hop_status) : result.error) +
                                        "): decode worker prefills"));
      }
      self->next();
    };
    std::shared_ptr<http::UpstreamCall> call = prefill_worker->upstream().send(ex, hop, std::move(handlers));
    if (call) upstream = std::move(call);
  }

  // Chooses a worker among those not tried and sends the request there; 503 when none is left.
  void next() {
    Impl& r = *router;
    if (gone) return;
    if (attempt < r.options.max_attempts) {
      std::vector<std::shared_ptr<Worker>> eligible;
      for (auto& w : r.worker_list()) {
        if (w->eligible() && !w->prefill() && std::find(tried.begin(), tried.end(), w->url()) == tried.end()) eligible.push_back(w);
      }
      if (!eligible.empty()) return send(eligible);
    }
    r.metrics.count_failed();
    ex->respond(error_response(503, "no worker could take the request (" + std::to_string(tried.size()) + " tried)", "no_worker"));
  }

  void send(const std::vector<std::shared_ptr<Worker>>& eligible) {
    Impl& r = *router;
    std::vector<Candidate> candidates;
    std::uint64_t prefix_hash = 0;
    bool hashed = false;
    for (const auto& w : eligible) {
      Candidate c{w->url(), {}, w->load_tokens(), w->in_flight()};
      if (prompt.tokenized && (policy == Policy::kCacheAware || policy == Policy::kPrefixHash)) {
        if (std::optional<WorkerKvInfo> info = w->kv_info()) {
          const RequestKeys& keys = keys_for(*info);
          if (policy == Policy::kCacheAware) c.match = w->index().match(*info, keys);
          if (!hashed) {
            prefix_hash = prefix_hash_of(keys, prompt.tokens, prompt.cache_salt, r.options.hash_prefix_tokens, info->block_size);
          }
          hashed = true;
        }
      }
      candidates.push_back(std::move(c));
    }
    if (!hashed && prompt.tokenized) prefix_hash = prefix_hash_of({}, prompt.tokens, prompt.cache_salt);
    // A stored response lives on one worker: its conversation goes there while it is eligible
    // (elsewhere it would be a 404; when its worker is gone, the worker chosen says so).
    std::optional<std::size_t> owner;
    if (!prompt.owner_tag.empty()) {
      for (std::size_t i = 0; i < eligible.size() && !owner; ++i) {
        if (eligible[i]->node_tag() == prompt.owner_tag) owner = i;
      }
    }
    // A prompt_cache_key decides alone: rendezvous hashing of the key (and the tenant's salt) over
    // the workers that may take it, so one key stays on one worker while that worker is up.
    const bool by_key = !prompt.cache_key.empty();
    Choice choice = owner ? Choice{*owner, 0, "response_owner"}
                    : by_key
                        ? choose_worker(Policy::kPrefixHash, r.options.weights, candidates, r.turn.fetch_add(1),
                                        cache_key_hash(prompt.cache_key, prompt.cache_salt))
                        : choose_worker(policy, r.options.weights, candidates, r.turn.fetch_add(1), prefix_hash);
    if (by_key && !owner) choice.decision = "cache_key";
    worker = eligible[choice.index];
    const Candidate& chosen = candidates[choice.index];
    predicted_cached = chosen.match.total();
    if (prefilled) {
      // The hop put the prompt's KV in the shared store: any decode worker loads it, all whole
      // blocks but the last token's (the engine always computes the last token itself).
      const std::optional<WorkerKvInfo> info = worker->kv_info();
      const std::int64_t block = info ? info->block_size : 16;
      const auto n = static_cast<std::int64_t>(prompt.tokens.size());
      predicted_cached = std::max(predicted_cached, n > 0 ? (n - 1) / block * block : 0);
    }
    load = std::max<std::int64_t>(0, static_cast<std::int64_t>(prompt.tokens.size()) - predicted_cached) + prompt.max_tokens;
    decision = attempt == 0 ? choice.decision : "retry";
    worker->begin_request(load);
    r.metrics.count_request(worker->url(), decision);
    streaming = false;
    status = 0;
    head = {};
    body.clear();
    parser = bench::SseParser();
    actual_cached = -1;
    prompt_tokens = 0;
    sent = Clock::now();
    r.metrics.observe_decision(seconds(sent - arrived - hop_time));
    auto self = shared_from_this();
    http::UpstreamHandlers handlers;
    handlers.on_head = [self](http::UpstreamHead h) { return self->on_head(std::move(h)); };
    handlers.on_body = [self](std::string_view piece) { return self->on_body(piece); };
    handlers.on_done = [self](const http::UpstreamResult& result) { self->on_done(result); };
    // (send() answers through the handlers later, on this strand; null only when it ended at once.)
    std::shared_ptr<http::UpstreamCall> call = worker->upstream().send(ex, upstream_request, std::move(handlers));
    if (call) upstream = std::move(call);
  }

  bool on_head(http::UpstreamHead h) {
    const Clock::time_point first_byte = Clock::now();
    status = h.status;
    head.status = h.status;
    head.content_type = h.header("Content-Type");
    for (http::Header& hd : h.headers) {
      if (!hop_by_hop(hd.name)) head.headers.push_back(std::move(hd));
    }
    head.headers.push_back({"x-kvstash-worker", worker->url()});
    // How long this router waited on the worker for its first byte (from sending the request):
    // a client subtracts it from its own time to first byte to see what the router added.
    char upstream_ms[32];
    std::snprintf(upstream_ms, sizeof upstream_ms, "%.3f", 1e3 * seconds(first_byte - sent + hop_time));
    head.headers.push_back({"x-kvstash-upstream-ms", upstream_ms});
    streaming = lower(head.content_type).rfind("text/event-stream", 0) == 0;
    if (streaming) {
      ex->begin_stream(head);
      const double back = seconds(Clock::now() - first_byte);
      router->metrics.observe_return(back);
      router->metrics.observe_overhead(seconds(sent - arrived - hop_time) + back);
    }
    return !gone;
  }

  bool on_body(std::string_view piece) {
    if (!streaming) {
      body.append(piece);
      return !gone;
    }
    std::string chunk(piece);
    parser.feed(chunk, [&](const std::string& event) {
      if (event.find("\"usage\"") == std::string::npos) return;
      if (auto c = bench::parse_stream_chunk(event); c && c->has_usage) {
        actual_cached = c->cached_tokens;
        prompt_tokens = c->prompt_tokens;
      }
    });
    return ex->write(std::move(chunk)) && !gone;
  }

  void on_done(const http::UpstreamResult& result) {
    Impl& r = *router;
    upstream.reset();
    std::shared_ptr<Worker> w = std::move(worker);
    worker = nullptr;
    w->end_request(load);
    for (int i = 0; i < result.connections_new; ++i) r.metrics.count_connection(false);
    for (int i = 0; i < result.connections_reused; ++i) r.metrics.count_connection(true);
    if (r.options.log_requests) {
      server::log_line("route " + req.path + " -> " + w->url() + " (" + decision + ", predicted cached " +
                       std::to_string(predicted_cached) + " of " + std::to_string(prompt.tokens.size()) + " tokens)" +
                       (result.answered ? "" : " failed before the first byte: " + result.error));
    }
    if (!result.answered) {
      if (gone) return;  // the client left; nobody to answer
      w->mark_failed();
      tried.push_back(w->url());
      r.metrics.count_retry();
      ++attempt;
      return next();
    }
    if (streaming) {
      ex->end();
    } else if (result.ok) {
      const Clock::time_point last_byte = Clock::now();
      auto [cached, prompt_n] = usage_of(json::parse(body, nullptr, false));
      actual_cached = cached;
      prompt_tokens = prompt_n;
      head.body = std::move(body);
      ex->respond(std::move(head));
      const double back = seconds(Clock::now() - last_byte);
      r.metrics.observe_return(back);
      r.metrics.observe_overhead(seconds(sent - arrived - hop_time) + back);
    } else if (!gone) {
      ex->respond(error_response(502, "worker " + w->url() + " failed in the middle of its answer (" + result.error + ")",
                                 "bad_gateway"));
    }
    r.metrics.count_response(w->url(), result.ok ? status : 502);
    r.metrics.count_cached(w->url(), predicted_cached, status == 200 ? actual_cached : -1, prompt_tokens);
  }
};

namespace {

// The response a Responses API request continues or addresses: POST /v1/responses's
// previous_response_id (found in the body's text, not parsed: the body may be long and this runs
// on an I/O thread; a look-alike inside a string only misroutes, the worker still checks), or the
// {id} of GET/DELETE /v1/responses/{id}[/...]. "" when none.
std::string addressed_response(const http::Request& req) {
  constexpr std::string_view kPath = "/v1/responses";
  const std::string_view path = req.path;
  if (path.substr(0, kPath.size()) != kPath) return "";
  if (path.size() > kPath.size()) {
    if (path[kPath.size()] != '/') return "";
    const std::string_view rest = path.substr(kPath.size() + 1);
    return std::string(rest.substr(0, rest.find('/')));
  }
  if (req.method != "POST") return "";
  constexpr std::string_view kKey = "\"previous_response_id\"";
  const std::string_view body = req.body;
  std::size_t at = body.find(kKey);
  if (at == std::string_view::npos) return "";
  at += kKey.size();
  auto skip = [&] {
    while (at < body.size() && (body[at] == ' ' || body[at] == '\t' || body[at] == '\r' || body[at] == '\n')) ++at;
  };
  skip();
  if (at >= body.size() || body[at] != ':') return "";
  ++at;
  skip();
  if (at >= body.size() || body[at] != '"') return "";
  const std::size_t end = body.find('"', at + 1);
  return end == std::string_view::npos ? "" : std::string(body.substr(at + 1, end - at - 1));
}

}  // namespace

void Router::Impl::proxy(http::Request req, std::shared_ptr<http::Exchange> ex, Clock::time_point arrived) {
  auto p = std::make_shared<Proxied>();
  p->router = shared_from_this();
  p->ex = ex;
  p->arrived = arrived;
  // Generation requests, the translated APIs' included, are routed by the policy; the rest by load.
  const bool generation = req.path == "/v1/chat/completions" || req.path == "/v1/completions" ||
                          (req.method == "POST" && (req.path == "/v1/messages" || req.path == "/v1/responses"));
  p->policy = generation ? options.policy : Policy::kLeastLoaded;
  p->req = std::move(req);
  const std::string owner_tag = server::response_owner_tag(addressed_response(p->req));
  p->prompt.owner_tag = owner_tag;
  ex->on_close([weak = std::weak_ptr<Proxied>(p)] {
    if (auto alive = weak.lock()) alive->client_gone();
  });
  // Round-robin needs neither keys nor load: it skips the tokenizer.
  const bool tokenizes = p->policy != Policy::kRoundRobin && model && p->req.method == "POST" && generation;
  if (tokenizes && p->req.body.size() > options.tokenize_inline_bytes) {
    // A long prompt: tokenized on a job thread, so that this I/O thread serves other connections meanwhile.
    jobs->push([p, owner_tag] {
      p->router->metrics.observe_queue(seconds(Clock::now() - p->arrived));
      p->prompt = p->router->tokenize(p->req);
      p->prompt.owner_tag = owner_tag;
      p->build_upstream_request(p->router->options);
      p->ex->post([p] { p->start(); });
    });
    return;
  }
  metrics.observe_queue(seconds(Clock::now() - arrived));
  if (tokenizes) {
    p->prompt = tokenize(p->req);
    p->prompt.owner_tag = owner_tag;
  }
  p->build_upstream_request(options);
  p->start();
}

}  // namespace kvstash::router
