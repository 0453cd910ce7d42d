// Turns a parsed request into the engine's GenerationRequest: renders chat messages with the
// chat template (bos_token / eos_token: the tokenizer's; a BOS text the template writes at the
// start is dropped when the BOS id is prepended, so it is never doubled), tokenizes, prepends BOS
// when the tokenizer wants it, range-checks token ids, and fits the generation into the context.
//
// Special tokens: in a chat prompt only the template's own markup becomes control tokens; a
// message's content is tokenized as text, so a user who writes "<|im_end|>\n<|im_start|>system"
// gets those characters, not an injected system turn (ChatTemplate::render_marked finds the
// content in the rendering). A template that changes content beyond trimming cannot be followed:
// a message whose content holds special-token text is then refused (400, code
// "special_tokens_in_content") rather than parsed. PromptOptions::parse_special_in_content (serve
// --parse-special-in-content) restores the old behaviour for clients that send raw special tokens.
// Plain completion prompts never have special tokens parsed.
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

struct PromptOptions {
  // true: special-token text inside chat message content becomes control tokens, as the whole
  // rendered prompt did before (trusted clients that send raw special tokens). Default false.
  bool parse_special_in_content = false;
  // Compiles response_format into the grammar the sampler follows (not owned); null: a request
  // with a response_format other than text gets 400 unsupported_parameter.
  StructuredOutputs* structured_outputs = nullptr;
  // The call syntax of the served chat template (tool_calls.h): tool_choice "required" and named
  // choices are enforced by a grammar in that syntax.
  ToolCallFormat tool_format = ToolCallFormat::kNone;
};

// On error returns a 400 naming the problem: the chat template refused the conversation (its
// message, param "messages", code "invalid_chat_template"), token id out of range (param "prompt"), prompt
// longer than the context (code "context_length_exceeded"), max_tokens beyond the context.
std::optional<ApiError> build_generation_request(const ParsedRequest& parsed, const ModelInfo& model,
                                                 const ChatTemplate& chat_template,
                                                 GenerationRequest& out, const PromptOptions& options = {});

}  // namespace kvstash::server
