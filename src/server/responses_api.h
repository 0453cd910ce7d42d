// OpenAI's Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}) as a translation
// onto the chat completions path, with the conversation kept for previous_response_id.
//
// A Responses request (`input` as a string or items: messages, function_call and
// function_call_output items; `instructions`; `tools` of type function; `tool_choice`;
// `text.format` json_schema / json_object; `max_output_tokens`, `temperature`, `top_p`; `store`;
// `previous_response_id`; `stream`) becomes the chat request that means the same, its history first:
// the stored conversation of previous_response_id (its chat messages, the answer included), so a
// next turn's prompt starts with the previous turn's tokens and the KV cache serves them. The answer
// comes back through ResponsesExchange: a Response object (output items: message with output_text,
// function_call), or Responses' event stream (response.created, response.output_item.added,
// response.output_text.delta, response.function_call_arguments.delta, ..., response.completed).
//
// A stored response (store: true, the default) keeps its conversation in the ResponseStore for a TTL,
// and its prompt's KV is pinned for as long (prompt_cache_retention, docs/prompt-caching.md). A
// previous_response_id that is unknown, expired, or another tenant's is a 404.
//
// A response's id names the node that stores it: "resp_" + the first 8 hex digits of the node's
// public key + 24 random hex digits (response_owner_tag). `kvstash route` sends previous_response_id
// requests, and GET/DELETE of a response, to the worker whose /v1/kv/info key has that tag, so a
// conversation works through the router without shared state.
//
// Thread safety: ResponseStore is safe from any thread; the translation is pure; a
// ResponsesExchange is used on its exchange's strand.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "http/http_server.h"

namespace kvstash::server {

struct StoredResponse {
  std::string tenant;        // the cache namespace of the key that made it ("" = none)
  nlohmann::json messages;   // the chat messages of its conversation, its own answer last
  nlohmann::json response;   // the Response object as answered
  std::chrono::steady_clock::time_point expires;
};

class ResponseStore {
 public:
  // ttl: how long a response is kept (and its prompt's KV pinned); max_entries: oldest dropped past
  // it; node_tag: 8 hex digits of the node's public key ("" = no identity: untagged ids).
  ResponseStore(std::chrono::seconds ttl, std::size_t max_entries, std::string node_tag = "")
      : ttl_(ttl), max_entries_(max_entries), node_tag_(std::move(node_tag)) {}
  std::chrono::seconds ttl() const { return ttl_; }
  // A new response id, with this node's tag.
  std::string new_id() const;
  void put(const std::string& id, StoredResponse entry);
  // The entry if it exists, has not expired and is `tenant`'s.
  std::optional<StoredResponse> get(const std::string& id, const std::string& tenant);
  bool erase(const std::string& id, const std::string& tenant);
  std::size_t size();

 private:
  void expire_locked(std::chrono::steady_clock::time_point now);
  const std::chrono::seconds ttl_;
  const std::size_t max_entries_;
  const std::string node_tag_;
  std::mutex mu_;
  std::unordered_map<std::string, StoredResponse> entries_;  // guarded by mu_
  std::deque<std::string> order_;                            // guarded by mu_: oldest first
};

struct ResponsesTranslation {
  nlohmann::json chat;        // the chat completions request
  nlohmann::json messages;    // its messages (the history included), to store with the answer
  nlohmann::json echo;        // fields the Response object repeats (instructions, tools, ...)
  std::string model;
  bool stream = false;
  bool store = true;
  std::string previous_response_id;
};

struct ResponsesError {
  int status = 400;
  std::string message;
  std::string param;
};

// The node tag of a response id made by ResponseStore::new_id ("" for an id without one).
std::string response_owner_tag(std::string_view id);
// The tag of a node whose public key is `public_key_hex` (its first 8 hex digits, lowercase).
std::string response_node_tag(std::string_view public_key_hex);

// Translates a Responses request, its previous_response_id looked up in `store` for `tenant`.
std::optional<ResponsesError> translate_responses_request(const std::string& body, ResponseStore& store,
                                                          const std::string& tenant, ResponsesTranslation& out);

// Stands between the chat path and the client: turns what the chat path answers into the
// Responses API's answer or event stream, and stores the conversation when asked.
class ResponsesExchange final : public http::Exchange {
 public:
  ResponsesExchange(std::shared_ptr<http::Exchange> inner, ResponsesTranslation translation, ResponseStore* store,
                    std::string tenant);

  void respond(http::Response response) override;
  void begin_stream(http::Response head) override { inner_->begin_stream(std::move(head)); }
  bool write(std::string data) override;
  void end() override;
  void on_close(std::function<void()> callback) override { inner_->on_close(std::move(callback)); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }
  bool closed() const override { return inner_->closed(); }

 private:
  bool on_chunk(const std::string& data);
  bool send(const nlohmann::json& event);
  bool close_message();
  bool close_call();
  // The Response object for the output so far; stores it (and the conversation) when complete.
  nlohmann::json response_object(const std::string& status);
  void remember(const nlohmann::json& response);

  std::shared_ptr<http::Exchange> inner_;
  ResponsesTranslation t_;
  ResponseStore* store_;
  std::string tenant_;
  std::string id_;
  std::int64_t created_;
  // Streaming state: the output as it arrives.
  std::string pending_;
  int sequence_ = 0;
  bool started_ = false, finished_ = false;
  std::string text_;                 // the message's text
  bool message_open_ = false;
  int message_index_ = -1;
  std::string message_id_;
  nlohmann::json calls_ = nlohmann::json::array();  // function_call items
  bool call_open_ = false;
  std::string finish_reason_;
  nlohmann::json usage_ = nlohmann::json::object();
};

}  // namespace kvstash::server
