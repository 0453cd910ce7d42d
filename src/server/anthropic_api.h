// Anthropic's Messages API (POST /v1/messages) as a translation onto the chat completions path.
//
// A Messages request is translated into the OpenAI chat request that means the same (system
// blocks into a system message, tool_result blocks into tool messages, assistant tool_use blocks
// into tool_calls, tools and tool_choice into their OpenAI forms, stop_sequences into stop), which
// the server then runs as any chat request: same templates, tool-call parsing, constrained
// decoding, caches. Its answer is translated back by AnthropicExchange, which stands between the
// chat path and the client's exchange: a JSON answer becomes a Messages answer (content blocks,
// stop_reason, usage with the cache fields), an SSE stream becomes Anthropic's event stream
// (message_start, ping, content_block_start/delta/stop, message_delta, message_stop), an error
// Anthropic's error shape.
//
// cache_control breakpoints (on system blocks, tools, and message content blocks) become pin
// points: the chat request carries "kvstash_pins": [{"messages": N, "ttl_s": S}], the prompt
// through its first N chat messages (tools count with the system message) pinned for S seconds
// (request_parser.cc turns that into GenerationRequest::pins). Anthropic's usage fields come from
// the engine's cached-token count: cache_read_input_tokens = the prompt tokens read from the KV
// cache, cache_creation_input_tokens = the rest of the pinned prefix, written now,
// input_tokens = the remainder (docs/prompt-caching.md).
//
// What Messages has and this does not run is refused with a 400 naming it: image and document
// blocks, thinking, server tools; unknown fields are refused like the chat API refuses them.
//
// Thread safety: the functions are pure; an AnthropicExchange is used on its exchange's strand.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/http_server.h"

namespace kvstash::server {

struct MessagesTranslation {
  nlohmann::json chat;       // the OpenAI chat completions request
  std::string model;         // echoed in the answer
  bool stream = false;
  int pin_messages = 0;      // the longest pinned prefix, in chat messages (0 = no breakpoint)
};

// An Anthropic error body: {"type": "error", "error": {"type": ..., "message": ...}}, its type
// from the HTTP status (400 invalid_request_error, 401 authentication_error, 404 not_found_error,
// 413 request_too_large, 429 rate_limit_error, 503 overloaded_error, else api_error).
std::string anthropic_error_body(int status, const std::string& message);

// Translates a Messages request body. On error: the message for a 400.
struct MessagesError {
  std::string message;
};
std::optional<MessagesError> translate_messages_request(const std::string& body, MessagesTranslation& out);

// An OpenAI chat completion (non-streaming answer) as a Messages answer. `has_breakpoint`: the
// request had a cache_control breakpoint (else cache_creation_input_tokens is 0).
nlohmann::json chat_to_message(const nlohmann::json& completion, const std::string& model, bool has_breakpoint);

// Stands between the chat path and the client: translates what the chat path answers.
class AnthropicExchange final : public http::Exchange {
 public:
  AnthropicExchange(std::shared_ptr<http::Exchange> inner, std::string model, bool has_breakpoint);

  void respond(http::Response response) override;
  void begin_stream(http::Response head) override;
  bool write(std::string data) override;
  void end() override;
  void on_close(std::function<void()> callback) override { inner_->on_close(std::move(callback)); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }
  bool closed() const override { return inner_->closed(); }

 private:
  // One SSE event of the chat stream ("data: ..." without the prefix).
  bool on_chunk(const std::string& data);
  bool send(const char* event, const nlohmann::json& data);
  bool close_block();
  bool finish_message();

  std::shared_ptr<http::Exchange> inner_;
  std::string model_;
  bool has_breakpoint_;
  std::string pending_;        // bytes of an SSE event not complete yet
  bool started_ = false;       // message_start sent
  int block_index_ = -1;       // the last content block started (Anthropic's index)
  bool block_open_ = false;    // content_block_stop not sent yet for it
  bool block_is_text_ = false;
  std::string stop_reason_;    // from the finish_reason, sent with the usage
  nlohmann::json usage_;       // from the usage chunk
  bool finished_ = false;      // message_stop sent
};

}  // namespace kvstash::server
