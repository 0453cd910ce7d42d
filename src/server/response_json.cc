#include "server/response_json.h"

#include <random>

#include "server/utf8.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

json bytes_json(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

std::string display_text(const std::string& piece) {
  std::string raw = piece;
  return take_utf8(raw, /*final=*/true);
}

}  // namespace

std::string new_response_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

json usage_json(const Outcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

json chat_logprobs_json(const std::vector<LogprobEntry>& entries, const Tokenizer& tok) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    std::string piece = tok.token_to_piece(e.token);
    json top = json::array();
    for (const auto& [id, lp] : e.top) {
      std::string alt = tok.token_to_piece(id);
      top.push_back({{"token", display_text(alt)}, {"logprob", lp}, {"bytes", bytes_json(alt)}});
    }
    content.push_back({{"token", display_text(piece)},
                       {"logprob", e.logprob},
                       {"bytes", bytes_json(piece)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs_json(const std::vector<LogprobEntry>& entries, const Tokenizer& tok) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(display_text(tok.token_to_piece(e.token)));
    token_logprobs.push_back(e.logprob);
    json top = json::object();
    for (const auto& [id, lp] : e.top) top[display_text(tok.token_to_piece(id))] = lp;
    top_logprobs.push_back(top);
    offsets.push_back(e.text_offset);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

// Only OpenAI's finish reasons leave the server. An answer the server cut short (shutdown, time
// limit) ends with an error instead (generation_task.cc), so what is left here is defensive: a
// cut answer reads as "length" (incomplete), never as a complete one ("stop").
json finish_reason_json(const std::string& reason) {
  if (reason.empty()) return nullptr;
  if (reason == "length" || reason == "stop" || reason == "tool_calls" || reason == "content_filter") return reason;
  return "length";
}

json chat_completion_json(const ResponseMeta& meta, const std::string& text, const Outcome& outcome,
                          json logprobs) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", text}}},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", finish_reason_json(outcome.finish_reason)}};
  return {{"id", meta.id},           {"object", "chat.completion"},
          {"created", meta.created}, {"model", meta.model},
          {"choices", json::array({choice})},     {"usage", usage_json(outcome)}};
}

json text_completion_json(const ResponseMeta& meta, const std::string& text, const Outcome& outcome,
                          json logprobs) {
  json choice = {{"index", 0},
                 {"text", text},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", finish_reason_json(outcome.finish_reason)}};
  return {{"id", meta.id},           {"object", "text_completion"},
          {"created", meta.created}, {"model", meta.model},
          {"choices", json::array({choice})},     {"usage", usage_json(outcome)}};
}

json chat_chunk_json(const ResponseMeta& meta, bool first, const std::string& text,
                     const std::string& finish_reason, json logprobs) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
  json choice = {{"index", 0},
                 {"delta", delta},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", finish_reason_json(finish_reason)}};
  return {{"id", meta.id},           {"object", "chat.completion.chunk"},
          {"created", meta.created}, {"model", meta.model},
          {"choices", json::array({choice})}};
}

json text_chunk_json(const ResponseMeta& meta, const std::string& text,
                     const std::string& finish_reason, json logprobs) {
  json choice = {{"index", 0},
                 {"text", text},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", finish_reason_json(finish_reason)}};
  return {{"id", meta.id},           {"object", "text_completion"},
          {"created", meta.created}, {"model", meta.model},
          {"choices", json::array({choice})}};
}

json usage_chunk_json(const ResponseMeta& meta, bool chat, const Outcome& outcome) {
  return {{"id", meta.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array()},
          {"usage", usage_json(outcome)}};
}

std::string dump_json(const json& payload) {
  return payload.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

}  // namespace kvstash::server
