// One proxied request: tokenize (the server's own request parser and prompt builder), choose a
// worker (router/policy.h), send it upstream on a kept-alive connection and copy the answer back
// byte for byte, stream or not; on a failure before the first byte, the next worker.
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <climits>

#include "bench/sse.h"
#include "router/router_impl.h"
#include "server/log.h"
#include "server/prompt_builder.h"
#include "server/request_parser.h"

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
         n == "te" || n == "trailer" || n == "upgrade" || n == "proxy-connection" || n == "content-type";
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

Router::Impl::Prompt Router::Impl::tokenize(const http::Request& req) const {
  Prompt p;
  if (!model || req.method != "POST") return p;
  const bool chat = req.path == "/v1/chat/completions";
  if (!chat && req.path != "/v1/completions") return p;
  server::ParsedRequest parsed;
  if (server::parse_request(chat ? server::Endpoint::kChatCompletions : server::Endpoint::kCompletions, req.body, parsed)) {
    return p;  // invalid: the worker answers the error
  }
  GenerationRequest gen;
  if (server::build_generation_request(parsed, model->info, model->chat_template, gen)) return p;
  p.tokenized = true;
  p.tokens = std::move(gen.prompt);
  p.cache_salt = std::move(gen.cache_salt);
  p.max_tokens = gen.max_tokens;
  return p;
}

void Router::Impl::route(http::Request req, std::shared_ptr<http::Exchange> ex, std::shared_ptr<std::atomic<bool>> gone,
                         Clock::time_point arrived) {
  metrics.observe_queue(seconds(Clock::now() - arrived));
  const bool generation = req.path == "/v1/chat/completions" || req.path == "/v1/completions";
  const Policy policy = generation ? options.policy : Policy::kLeastLoaded;
  // Round-robin needs neither keys nor load: it skips the tokenizer.
  const Prompt prompt = policy == Policy::kRoundRobin ? Prompt{} : tokenize(req);
  std::vector<std::string> tried;
  // The request's keys per distinct KV layout (workers of one model share one).
  std::vector<std::pair<WorkerKvInfo, RequestKeys>> keys_by_layout;
  auto keys_for = [&](const WorkerKvInfo& info) -> const RequestKeys& {
    for (const auto& [i, k] : keys_by_layout) {
      if (i == info) return k;
    }
    keys_by_layout.emplace_back(info, compute_request_keys(info, prompt.tokens, prompt.cache_salt));
    return keys_by_layout.back().second;
  };
  for (int attempt = 0; attempt < options.max_attempts && !gone->load(); ++attempt) {
    std::vector<std::shared_ptr<Worker>> eligible;
    for (auto& w : worker_list()) {
      if (w->eligible() && std::find(tried.begin(), tried.end(), w->url()) == tried.end()) eligible.push_back(w);
    }
    if (eligible.empty()) break;
    std::vector<Candidate> candidates;
    std::uint64_t prefix_hash = 0;
    bool hashed = false;
    for (const auto& w : eligible) {
      Candidate c{w->url(), {}, w->load_tokens(), w->in_flight()};
      if (prompt.tokenized && (policy == Policy::kCacheAware || policy == Policy::kPrefixHash)) {
        if (std::optional<WorkerKvInfo> info = w->kv_info()) {
          const RequestKeys& keys = keys_for(*info);
          if (policy == Policy::kCacheAware) c.match = w->index().match(*info, keys);
          if (!hashed) prefix_hash = prefix_hash_of(keys, prompt.tokens, prompt.cache_salt, options.hash_prefix_tokens, info->block_size);
          hashed = true;
        }
      }
      candidates.push_back(std::move(c));
    }
    if (!hashed && prompt.tokenized) prefix_hash = prefix_hash_of({}, prompt.tokens, prompt.cache_salt);
    const Choice choice = choose_worker(policy, options.weights, candidates, turn.fetch_add(1), prefix_hash);
    Worker& worker = *eligible[choice.index];
    const Candidate& chosen = candidates[choice.index];
    const std::int64_t load =
        std::max<std::int64_t>(0, static_cast<std::int64_t>(prompt.tokens.size()) - chosen.match.total()) + prompt.max_tokens;
    worker.begin_request(load);
    metrics.count_request(worker.url(), attempt == 0 ? choice.decision : "retry");
    const Outcome outcome = forward(worker, req, ex, gone, Attempt{chosen.match.total(), arrived});
    worker.end_request(load);
    if (options.log_requests) {
      server::log_line("route " + req.path + " -> " + worker.url() + " (" + choice.decision + ", predicted cached " +
                       std::to_string(chosen.match.total()) + " of " + std::to_string(prompt.tokens.size()) + " tokens)" +
                       (outcome == Outcome::kAnswered ? "" : " failed before the first byte"));
    }
    if (outcome == Outcome::kAnswered) return;
    tried.push_back(worker.url());
    metrics.count_retry();
  }
  metrics.count_failed();
  respond_error(ex, 503, "no worker could take the request (" + std::to_string(tried.size()) + " tried)", "no_worker");
}

Router::Impl::Outcome Router::Impl::forward(Worker& worker, const http::Request& req, const std::shared_ptr<http::Exchange>& ex,
                                            const std::shared_ptr<std::atomic<bool>>& gone, const Attempt& attempt) {
  httplib::Request up;
  up.method = req.method;
  up.path = req.target;
  up.body = req.body;
  std::string content_type = "application/json";
  // The client's Authorization goes on only when the router has no keys of its own.
  const bool replace_auth = !options.worker_api_key.empty() || !options.api_keys.empty();
  for (const http::Header& h : req.headers) {
    const std::string name = lower(h.name);
    if (name == "content-type") content_type = h.value;
    if (replace_auth && name == "authorization") continue;
    if (!hop_by_hop(h.name)) up.headers.emplace(h.name, h.value);
  }
  up.headers.emplace("Content-Type", content_type);
  if (!options.worker_api_key.empty()) up.headers.emplace("Authorization", "Bearer " + options.worker_api_key);
  for (int fresh = 0; fresh < 2; ++fresh) {
    bool reused = false;
    std::unique_ptr<httplib::Client> client = worker.acquire_client(&reused);
    metrics.count_connection(reused);
    bool answered = false, streaming = false;
    int status = 0;
    http::Response head;
    std::string body;
    bench::SseParser parser;
    std::int64_t actual_cached = -1, prompt_tokens = 0;
    const Clock::time_point sent = Clock::now();
    metrics.observe_decision(seconds(sent - attempt.arrived));
    up.response_handler = [&](const httplib::Response& r) {
      const Clock::time_point first_byte = Clock::now();
      answered = true;
      status = r.status;
      head.status = r.status;
      head.content_type = r.get_header_value("Content-Type");
      for (const auto& [name, value] : r.headers) {
        if (!hop_by_hop(name)) head.headers.push_back({name, value});
      }
      head.headers.push_back({"x-kvstash-worker", worker.url()});
      streaming = lower(head.content_type).rfind("text/event-stream", 0) == 0;
      if (streaming) {
        ex->post([ex, h = head]() mutable { ex->begin_stream(std::move(h)); });
        const double back = seconds(Clock::now() - first_byte);
        metrics.observe_return(back);
        metrics.observe_overhead(seconds(sent - attempt.arrived) + back);
      }
      return !gone->load();
    };
    up.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
      if (!streaming) {
        body.append(data, n);
        return !gone->load();
      }
      std::string chunk(data, n);
      parser.feed(chunk, [&](const std::string& event) {
        if (event.find("\"usage\"") == std::string::npos) return;
        if (auto c = bench::parse_stream_chunk(event); c && c->has_usage) {
          actual_cached = c->cached_tokens;
          prompt_tokens = c->prompt_tokens;
        }
      });
      ex->post([ex, chunk = std::move(chunk)]() mutable { ex->write(std::move(chunk)); });
      return !gone->load();
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool ok = client->send(up, res, error);
    if (!ok && !answered) {
      if (gone->load()) return Outcome::kAnswered;  // the client left; nobody to answer
      // A kept-alive connection the worker closed meanwhile: once more on a new one.
      if (reused && (error == httplib::Error::Read || error == httplib::Error::Write)) continue;
      worker.mark_failed();
      return Outcome::kFailedBeforeFirstByte;
    }
    if (streaming) {
      ex->post([ex] { ex->end(); });  // after the last chunk (the strand keeps the order)
    } else if (ok) {
      const Clock::time_point last_byte = Clock::now();
      auto [cached, prompt] = usage_of(json::parse(body, nullptr, false));
      actual_cached = cached;
      prompt_tokens = prompt;
      head.body = std::move(body);
      respond_on_strand(ex, std::move(head));
      const double back = seconds(Clock::now() - last_byte);
      metrics.observe_return(back);
      metrics.observe_overhead(seconds(sent - attempt.arrived) + back);
    } else {
      respond_error(ex, 502, "worker " + worker.url() + " failed in the middle of its answer (" + httplib::to_string(error) + ")",
                    "bad_gateway");
    }
    metrics.count_response(worker.url(), ok ? status : 502);
    metrics.count_cached(worker.url(), attempt.predicted_cached, status == 200 ? actual_cached : -1, prompt_tokens);
    if (ok) worker.release_client(std::move(client));
    return Outcome::kAnswered;
  }
  worker.mark_failed();
  return Outcome::kFailedBeforeFirstByte;
}

}  // namespace kvstash::router
