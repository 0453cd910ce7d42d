// Turns a parsed request into the engine's GenerationRequest: renders chat messages with the
// chat template (bos_token / eos_token: the tokenizer's; a BOS text the template writes at the
// start is dropped when the BOS id is prepended, so it is never doubled), tokenizes (special tokens parsed in rendered chat text, not in plain
// completion prompts), prepends BOS when the tokenizer wants it, range-checks token ids, and
// fits the generation into the context.
//
// max_tokens default: the rest of the context, capped at kDefaultMaxTokens, so that a client
// that forgets it does not occupy the engine for thousands of tokens.
//
// Thread safety: pure functions (the tokenizer is immutable).
#pragma once

#include <optional>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/chat_template.h"
#include "server/request_parser.h"

namespace kvstash::server {

inline constexpr int kDefaultMaxTokens = 256;

// On error returns a 400 naming the problem: the chat template refused the conversation (its
// message, param "messages", code "invalid_chat_template"), token id out of range (param "prompt"), prompt
// longer than the context (code "context_length_exceeded"), max_tokens beyond the context.
std::optional<ApiError> build_generation_request(const ParsedRequest& parsed, const ModelInfo& model,
                                                 const ChatTemplate& chat_template,
                                                 GenerationRequest& out);

}  // namespace kvstash::server
