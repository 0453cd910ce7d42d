// The HTTP side of kvstash bench: one streamed chat or completions request to an
// OpenAI-compatible server, timed chunk by chunk, turned into a RequestRecord. Every failure
// (no connection, an HTTP error status, a stalled or cut stream, malformed SSE) becomes the
// record's error kind rather than an exception or an abort, so a run always continues.
//
// Thread safety: an OpenAiClient holds one keep-alive connection; use one per worker thread.
// parse_url is pure.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/record.h"
#include "bench/workload.h"
#include "kvstash/status.h"

namespace kvstash::bench {

struct Endpoint {
  std::string scheme_host_port;  // "http://127.0.0.1:8080"
  std::string base_path;         // "" or "/proxy" (a path prefix before /v1/...), no trailing slash
};

// Parses "http://HOST:PORT[/prefix]" (also https and a trailing /v1, which is dropped).
// kInvalidArgument for anything else.
Expected<Endpoint> parse_url(const std::string& url);

struct ClientOptions {
  std::string model;        // the "model" field of every request
  std::string api = "chat";  // "chat" (/v1/chat/completions) or "completions" (/v1/completions)
  bool ignore_eos = false;  // sends "ignore_eos": true (vLLM, llama.cpp, kvstash accept it)
  double timeout_s = 60;    // per request: to connect, between bytes, and in total
  std::string api_key;      // sent as "Authorization: Bearer ..." when not empty
  double temperature = -1;  // >= 0: sent as "temperature" (0 = deterministic); < 0: not sent (server default)
  // Sends "prompt_cache_key": "<prefix><session id>" with every request of a session (OpenAI's
  // routing hint: a kvstash router keeps a key's requests on one worker); "" = not sent.
  std::string prompt_cache_key_prefix;
};

class OpenAiClient {
 public:
  OpenAiClient(Endpoint endpoint, ClientOptions options);
  ~OpenAiClient();
  OpenAiClient(const OpenAiClient&) = delete;
  OpenAiClient& operator=(const OpenAiClient&) = delete;

  // The id of the first model GET /v1/models lists. kUnavailable when the server cannot be
  // reached or answers with an error; kCorrupt when the list is malformed or empty.
  Expected<std::string> first_model();
  // The HTTP status of GET `path` (e.g. "/health"); kUnavailable without an answer.
  Expected<int> get_status(const std::string& path);
  // The body of GET `path` (e.g. "/metrics"): kUnavailable without an answer or for a status other
  // than 200.
  Expected<std::string> get_text(const std::string& path);

  // Sends one streamed request and waits for its end. start_s in the record is measured from
  // `run_start`; index, session_id and round are left for the caller. A non-empty
  // `prompt_cache_key` is sent as OpenAI's routing hint of that name.
  RequestRecord stream(const std::vector<ChatMessage>& messages, int max_tokens,
                       std::chrono::steady_clock::time_point run_start, const std::string& prompt_cache_key = "");

  // The request body `stream` sends (exposed for tests).
  std::string request_body(const std::vector<ChatMessage>& messages, int max_tokens,
                           const std::string& prompt_cache_key = "") const;

 private:
  // Requests sent again after the server closed a kept-alive connection before answering.
 public:
  int retries() const { return retries_; }
  const ClientOptions& options() const { return options_; }

 private:
  struct Impl;
  bool reused_connection_ = false;  // the last request left a connection that may be reused
  int retries_ = 0;
  Endpoint endpoint_;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The text a completions request sends for a message history: the contents, in order,
// separated by blank lines (there is no chat template on the client side).
std::string flatten_messages(const std::vector<ChatMessage>& messages);

}  // namespace kvstash::bench
