// Parsing and validating the JSON bodies of POST /v1/chat/completions and POST /v1/completions
// (OpenAI's request shapes) into a ParsedRequest. Everything that can be checked without the
// model is checked here: JSON syntax and UTF-8, field types, ranges, roles, n >= 1 (its upper bound is
// the server's, ServerOptions::max_n). Checks that
// need the model (token ids in range, prompt length against the context) are in prompt_builder.
//
// Accepted fields: model (any string; responses name the served model), messages / prompt,
// max_tokens, max_completion_tokens, temperature [0, 2], top_p (0, 1], top_k >= 0, seed, stop
// (string or up to 4 strings), n (choices, >= 1; engine/fork.cc), stream, stream_options.include_usage,
// logprobs + top_logprobs (chat: bool + 0..20; completions: logprobs 0..20), cache_salt,
// ignore_eos (an extension that vLLM and llama.cpp's server share; benchmarks use it so that
// every output runs to max_tokens), response_cache (a kvstash extension: false = neither answer
// from nor store into the response cache; default true).
// Sampling knobs (engine/sampler.h defines them): logit_bias ({"id": bias} as OpenAI, or
// llama-server's [[id, bias]] with false for a ban; [-100, 100], -100 bans; at most 1024 tokens),
// presence_penalty and frequency_penalty [-2, 2] (OpenAI, over generated tokens),
// repetition_penalty / repeat_penalty (0, 10] (vLLM's / llama-server's name for one knob, with
// llama.cpp's semantics) over repeat_last_n tokens (>= -1, default 64), min_p [0, 1],
// typical_p (0, 1], top_n_sigma [0, 100] (negative: off). Structured outputs: response_format
// (json_schema, json_object, text), llama-server's top-level json_schema and GBNF grammar
// (server/structured_output.h); not with ignore_eos.
// Defaults are OpenAI's: temperature 1, and a request without a seed gets a fresh random one
// (so two unseeded sampled requests differ; the same seed reproduces).
// Chat only: tools, tool_choice, parallel_tool_calls and the messages' tool fields (tool_calls,
// tool_call_id, name), parsed by tool_request.h.
// Fields of OpenAI's API this server does not implement (functions, function_call, best_of, ...) and
// llama-server's or vLLM's samplers it does not implement (mirostat, dry_*, xtc_*,
// tfs_z, dynatemp_*, ...) get a 400 with code "unsupported_parameter"
// naming the field, unless their value means "off" (null, 0 or the server's default, {}, []).
// Fields no server defines (foo_bar), and those that do not change the output (user, metadata,
// store), are ignored, as llama-server and vLLM ignore them.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/chat_template.h"
#include "server/structured_output.h"
#include "server/tool_request.h"

namespace kvstash::server {

enum class Endpoint { kChatCompletions, kCompletions };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;                  // as sent; "" when absent
  std::vector<ChatMessage> messages;  // chat only; never empty there
  std::string prompt_text;            // completions with a string prompt
  std::vector<TokenId> prompt_tokens; // completions with a token-id prompt (not yet range-checked)
  bool prompt_is_tokens = false;
  std::optional<int> max_tokens;      // max_completion_tokens wins over max_tokens
  SamplingParams sampling;
  bool seed_given = false;            // the request named its seed (else sampling.seed is fresh)
  int n = 1;                          // choices to generate (choice i > 0 seeded engine's choice_seed)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;               // alternatives per token
  std::string cache_salt;
  bool ignore_eos = false;            // generate through end-of-generation tokens
  bool response_cache = true;         // "response_cache": false opts out of the response cache
  // "kvstash_store_sync": the answer leaves only once the KV store's write-behind queues are
  // flushed, so that another node finds every chunk of the prompt (the router's prefill hop,
  // docs/router.md). Not with stream. Without a KV store: nothing to wait for.
  bool store_sync = false;
  int kv_budget = -1;                 // KV budget in tokens: -1 the server's, 0 none (kvstash extension)
  // Tool calling (chat only; tool_request.h).
  ToolRequest tools;
  ResponseFormat response_format;     // structured outputs (server/structured_output.h)
  // Prompt caching (docs/prompt-caching.md). prompt_cache_key: OpenAI's routing hint (the router
  // keeps one key on one worker; never part of any cache key). Pins: the prompt through its first
  // `messages` chat messages (an Anthropic cache_control breakpoint, "kvstash_pins"), or the whole
  // prompt (OpenAI's prompt_cache_retention, messages = -1), kept in the store's tiers for `ttl`.
  std::string prompt_cache_key;
  struct PinPoint {
    int messages = -1;  // -1 = the whole prompt
    std::chrono::seconds ttl{0};
  };
  std::vector<PinPoint> pins;
};

// Upper bound on alternatives per token, as OpenAI's chat API.
inline constexpr int kMaxTopLogprobs = 20;
// OpenAI's default temperature (the `kvstash run` CLI keeps its own, greedy, default).
inline constexpr float kDefaultTemperature = 1.0f;
// logit_bias entries at most (OpenAI documents no limit; this bounds the work per token).
inline constexpr std::size_t kMaxLogitBias = 1024;
// OpenAI allows up to 4 stop sequences.
inline constexpr std::size_t kMaxStopStrings = 4;

// Parses `body`. On error returns the ApiError (400) naming the problem and its param.
std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body,
                                      ParsedRequest& out);

}  // namespace kvstash::server
