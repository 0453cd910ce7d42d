// OpenAI response bodies: chat.completion, chat.completion.chunk, text_completion (also its
// streamed chunks), usage, and the two logprobs shapes (chat: {content: [{token, logprob,
// bytes, top_logprobs}]}; completions, the legacy one: {tokens, token_logprobs, top_logprobs
// (one dict per token), text_offset}).
//
// Token texts come from the tokenizer's pieces; a piece that is not valid UTF-8 on its own (part
// of a character) is shown with U+FFFD in `token` while `bytes` carries its exact bytes.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::server {

struct ResponseMeta {
  std::string id;          // "chatcmpl-…" or "cmpl-…"
  std::int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh id: prefix + 24 random hex digits.
std::string new_response_id(const std::string& prefix);

nlohmann::json usage_json(const Outcome& outcome);
nlohmann::json chat_logprobs_json(const std::vector<LogprobEntry>& entries, const Tokenizer& tok);
nlohmann::json completion_logprobs_json(const std::vector<LogprobEntry>& entries, const Tokenizer& tok);

// finish_reason as OpenAI names it: "stop", "length", "tool_calls", "content_filter"; any other
// outcome (an answer cut short, which the server answers with an error anyway) reads "length".
nlohmann::json finish_reason_json(const std::string& reason);

// Non-streaming bodies. `logprobs` is null when not requested.
nlohmann::json chat_completion_json(const ResponseMeta& meta, const std::string& text,
                                    const Outcome& outcome, nlohmann::json logprobs);
nlohmann::json text_completion_json(const ResponseMeta& meta, const std::string& text,
                                    const Outcome& outcome, nlohmann::json logprobs);

// Streaming chunks. `finish_reason` "" = null. The chat chunk carries role "assistant" when
// `first`.
nlohmann::json chat_chunk_json(const ResponseMeta& meta, bool first, const std::string& text,
                               const std::string& finish_reason, nlohmann::json logprobs);
nlohmann::json text_chunk_json(const ResponseMeta& meta, const std::string& text,
                               const std::string& finish_reason, nlohmann::json logprobs);
// The final usage chunk of stream_options.include_usage: choices [] and usage.
nlohmann::json usage_chunk_json(const ResponseMeta& meta, bool chat, const Outcome& outcome);

// "data: <json>\n\n"; JSON dumped with invalid UTF-8 replaced, never throwing.
std::string sse_event(const nlohmann::json& payload);
std::string dump_json(const nlohmann::json& payload);

}  // namespace kvstash::server
