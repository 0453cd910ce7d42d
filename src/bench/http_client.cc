// The only file of the bench module that includes cpp-httplib (a heavy header).
#include "bench/http_client.h"

#include <httplib.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "bench/stream_collector.h"
#include "bench/text_gen.h"

namespace kvstash::bench {
namespace {

using Clock = std::chrono::steady_clock;

// How much of an error response's body a record keeps.
constexpr std::size_t kMaxErrorBodyBytes = 300;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void set_timeouts(httplib::Client& client, double timeout_s) {
  const auto micros = std::chrono::microseconds(static_cast<std::int64_t>(timeout_s * 1e6));
  client.set_connection_timeout(micros);
  client.set_read_timeout(micros);
  client.set_write_timeout(micros);
}

const char* kind_for_status(int status) {
  if (status >= 400 && status < 500) return error_kind::kHttp4xx;
  if (status >= 500 && status < 600) return error_kind::kHttp5xx;
  return error_kind::kHttpOther;
}

}  // namespace

Expected<Endpoint> parse_url(const std::string& url) {
  std::string rest;
  std::string scheme;
  for (const char* s : {"http://", "https://"}) {
    if (url.rfind(s, 0) == 0) {
      scheme = s;
      rest = url.substr(scheme.size());
    }
  }
  if (scheme.empty() || rest.empty()) return invalid_argument("--url must be http://HOST:PORT, not '" + url + "'");
  Endpoint endpoint;
  const auto slash = rest.find('/');
  const std::string host_port = rest.substr(0, slash);
  if (host_port.empty() || host_port[0] == ':') return invalid_argument("--url has no host: '" + url + "'");
  endpoint.scheme_host_port = scheme + host_port;
  if (slash != std::string::npos) endpoint.base_path = rest.substr(slash);
  while (!endpoint.base_path.empty() && endpoint.base_path.back() == '/') endpoint.base_path.pop_back();
  // People paste the OpenAI base URL ("http://host:port/v1"); requests add /v1 themselves.
  if (endpoint.base_path.size() >= 3 && endpoint.base_path.compare(endpoint.base_path.size() - 3, 3, "/v1") == 0) {
    endpoint.base_path.resize(endpoint.base_path.size() - 3);
  }
  return endpoint;
}

std::string flatten_messages(const std::vector<ChatMessage>& messages) {
  std::string text;
  for (const auto& m : messages) {
    if (!text.empty()) text += "\n\n";
    text += m.content;
  }
  return text;
}

struct OpenAiClient::Impl {
  explicit Impl(const std::string& scheme_host_port) : client(scheme_host_port) {}
  httplib::Client client;
};

OpenAiClient::OpenAiClient(Endpoint endpoint, ClientOptions options)
    : endpoint_(std::move(endpoint)), options_(std::move(options)),
      impl_(std::make_unique<Impl>(endpoint_.scheme_host_port)) {
  impl_->client.set_keep_alive(true);
  // cpp-httplib writes a request's headers and body in separate sends; with Nagle's algorithm on,
  // the body waited for the server's delayed ACK (~40 ms on Linux), which every short request's
  // measured TTFT used to include.
  impl_->client.set_tcp_nodelay(true);
  set_timeouts(impl_->client, options_.timeout_s);
  if (!options_.api_key.empty()) impl_->client.set_bearer_token_auth(options_.api_key);
}

OpenAiClient::~OpenAiClient() = default;

Expected<int> OpenAiClient::get_status(const std::string& path) {
  auto result = impl_->client.Get(endpoint_.base_path + path);
  if (!result) return unavailable("GET " + path + ": " + httplib::to_string(result.error()));
  return result->status;
}

Expected<std::string> OpenAiClient::get_text(const std::string& path) {
  auto result = impl_->client.Get(endpoint_.base_path + path);
  if (!result) return unavailable("GET " + path + ": " + httplib::to_string(result.error()));
  if (result->status != 200) return unavailable("GET " + path + ": HTTP " + std::to_string(result->status));
  return result->body;
}

Expected<std::string> OpenAiClient::first_model() {
  auto result = impl_->client.Get(endpoint_.base_path + "/v1/models");
  if (!result) return unavailable("GET /v1/models: " + httplib::to_string(result.error()));
  if (result->status != 200) return unavailable("GET /v1/models: HTTP " + std::to_string(result->status));
  const auto json = nlohmann::json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("data") || !json["data"].is_array() || json["data"].empty() ||
      !json["data"][0].is_object() || !json["data"][0].contains("id") || !json["data"][0]["id"].is_string()) {
    return corrupt("GET /v1/models: no model listed");
  }
  return json["data"][0]["id"].get<std::string>();
}

std::string OpenAiClient::request_body(const std::vector<ChatMessage>& messages, int max_tokens,
                                       const std::string& prompt_cache_key) const {
  nlohmann::json body = {{"model", options_.model},
                         {"max_tokens", max_tokens},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (options_.api == "completions") {
    body["prompt"] = flatten_messages(messages);
  } else {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
    body["messages"] = std::move(list);
  }
  if (options_.ignore_eos) body["ignore_eos"] = true;
  if (options_.temperature >= 0) body["temperature"] = options_.temperature;
  if (!prompt_cache_key.empty()) body["prompt_cache_key"] = prompt_cache_key;
  return body.dump();
}

RequestRecord OpenAiClient::stream(const std::vector<ChatMessage>& messages, int max_tokens,
                                   Clock::time_point run_start, const std::string& prompt_cache_key) {
  httplib::Request request;
  request.method = "POST";
  request.path = endpoint_.base_path + (options_.api == "completions" ? "/v1/completions" : "/v1/chat/completions");
  request.body = request_body(messages, max_tokens, prompt_cache_key);
  request.headers.emplace("Content-Type", "application/json");
  request.headers.emplace("Accept", "text/event-stream");

  const Clock::time_point sent = Clock::now();
  const Clock::time_point deadline = sent + std::chrono::microseconds(static_cast<std::int64_t>(options_.timeout_s * 1e6));
  StreamCollector collector(sent);
  int status = 0;
  bool answered = false;  // a status line came back
  std::string error_body;
  bool past_deadline = false;
  std::string worker;
  std::string cache_status;
  double ttfb_s = 0, upstream_s = -1;
  request.response_handler = [&](const httplib::Response& response) {
    ttfb_s = seconds(Clock::now() - sent);
    if (const std::string up = response.get_header_value("x-kvstash-upstream-ms"); !up.empty()) {
      char* end = nullptr;
      const double ms = std::strtod(up.c_str(), &end);
      if (end != up.c_str() && ms >= 0) upstream_s = ms / 1000.0;
    }
    status = response.status;
    cache_status = response.get_header_value("x-kvstash-cache");
    answered = true;
    worker = response.get_header_value("x-kvstash-worker");
    return true;
  };
  request.content_receiver = [&](const char* data, std::size_t length, std::uint64_t, std::uint64_t) {
    const Clock::time_point now = Clock::now();
    if (status != 200) {
      if (error_body.size() < kMaxErrorBodyBytes) error_body.append(data, std::min(length, kMaxErrorBodyBytes));
      return true;
    }
    if (!collector.on_bytes(std::string_view(data, length), now)) return false;
    if (now > deadline) {
      past_deadline = true;
      return false;
    }
    return true;
  };

  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  bool sent_ok = impl_->client.send(request, response, error);
  if (!sent_ok && !answered && (error == httplib::Error::Read || error == httplib::Error::Write) &&
      reused_connection_) {
    // The server closed the kept-alive connection while the request was on its way (servers on
    // cpp-httplib close one after a few requests or a short idle time): nothing came back, so
    // the request was not served. Send it once more on a new connection, as curl and urllib do.
    ++retries_;
    impl_->client.stop();
    response = httplib::Response();
    error = httplib::Error::Success;
    sent_ok = impl_->client.send(request, response, error);
  }
  reused_connection_ = sent_ok;  // the next request may find this connection closed
  const Clock::time_point end = Clock::now();

  RequestRecord record;
  record.start_s = seconds(sent - run_start);
  record.http_status = status;
  record.worker = std::move(worker);
  record.ttfb_s = ttfb_s;
  record.upstream_s = upstream_s;
  record.cache = cache_status;
  collector.finish(record, end);
  if (!record.usage_reported) record.prompt_tokens = approx_token_count(flatten_messages(messages));
  if (!sent_ok && !collector.failed()) {
    // A transport failure outranks what the collector concluded from a partial stream.
    record.error_detail = httplib::to_string(error);
    if (past_deadline || end >= deadline) {
      record.error = error_kind::kTimeout;
      record.error_detail = "no complete answer within " + std::to_string(options_.timeout_s) + " s";
    } else if (error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout ||
               error == httplib::Error::BindIPAddress || error == httplib::Error::SSLConnection) {
      record.error = error_kind::kConnect;
    } else if (error == httplib::Error::Read || error == httplib::Error::Write) {
      // A read that timed out shows as a Read error after read_timeout of silence.
      record.error = seconds(end - sent) >= options_.timeout_s * 0.99 ? error_kind::kTimeout : error_kind::kRead;
    } else {
      record.error = error_kind::kOther;
    }
  } else if (sent_ok && status != 200) {
    record.error = kind_for_status(status);
    record.error_detail = "HTTP " + std::to_string(status) + ": " + error_body;
  }
  if (record.error == error_kind::kConnect || record.error == error_kind::kHttp4xx ||
      record.error == error_kind::kHttp5xx || record.error == error_kind::kHttpOther) {
    // No stream was timed: leave TTFT and ITL empty rather than partial.
    record.ttft_s = 0;
    record.itl_s.clear();
  }
  return record;
}

}  // namespace kvstash::bench
