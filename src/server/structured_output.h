// Structured outputs (issue 33): the request's response_format as a grammar the sampler follows.
//
//   response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}
//   response_format: {"type": "json_object"}       any JSON object
//   response_format: {"type": "text"} or absent     no constraint
//   json_schema: {...}                             llama-server's top-level form of the first
//   grammar: "root ::= ..."                         llama-server's GBNF (grammar/gbnf.h)
//
// parse_response_format() checks the shape (a 400 naming the field); the schema itself is
// compiled later, by StructuredOutputs, against the served model's vocabulary, once per schema
// (grammar/grammar_cache.h): an unsupported keyword is a 400 with code "unsupported_schema" naming
// it, a malformed schema "invalid_schema". The schema's canonical text (its JSON with the
// properties in the order given: the order in which they are generated) keys the compiled grammar
// and the response cache. strict: false is accepted and decodes the same (what is generated
// always validates). ignore_eos cannot be combined with a format (the output must end where the
// grammar does).
//
// Thread safety: parse_response_format is pure; StructuredOutputs is safe from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "server/api_error.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::server {

struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema, kGbnf };
  Kind kind = Kind::kText;
  std::string name;    // json_schema.name
  std::string schema;  // the schema's canonical text (json_schema), the grammar's text (gbnf)
};

// Reads response_format (or llama-server's json_schema or grammar; one of them) from the request body, parsed with its
// keys in order. On error the 400 names the field.
std::optional<ApiError> parse_response_format(const nlohmann::ordered_json& body, ResponseFormat& out);

class StructuredOutputs {
 public:
  // The tokenizer must outlive this; its vocabulary is read on the first constrained request.
  explicit StructuredOutputs(const Tokenizer* tokenizer, grammar::GrammarCacheOptions options = {});
  // Sets sampling.grammar for `format` (nothing for kText). Errors: 400 unsupported_schema /
  // invalid_schema, param "response_format".
  std::optional<ApiError> apply(const ResponseFormat& format, SamplingParams& sampling);
  // tool_choice "required" or a named function: sets sampling.grammar to calls of the declared
  // functions (of the named one) in the model's call syntax, whose arguments follow each
  // function's parameter schema; with parallel_tool_calls and "required", one or more calls.
  // Nothing for "auto"/"none". Enforced for the hermes syntax (Qwen2.5, Qwen3, Hermes, built-in
  // chatml), Llama 3.x's JSON calls and Mistral's [TOOL_CALLS] list; other syntaxes (DeepSeek's,
  // Command R's, gpt-oss's channels) get 400 unsupported_parameter naming tool_choice (never a
  // choice silently not enforced). With a response_format too, the call is what is enforced: the
  // format shapes text, and a required call leaves none.
  std::optional<ApiError> apply_tool_choice(const ToolRequest& tools, ToolCallFormat format, const ResponseFormat& response_format,
                                            SamplingParams& sampling);

 private:
  grammar::GrammarCache& cache();
  const Tokenizer* tokenizer_;
  grammar::GrammarCacheOptions options_;
  std::once_flag built_;
  std::unique_ptr<grammar::GrammarCache> cache_;
};

// The vocabulary a grammar matches against: every token's bytes (control tokens none) and the
// end-of-generation tokens.
std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer);

}  // namespace kvstash::server
