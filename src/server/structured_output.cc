#include "server/structured_output.h"

#include <cctype>

namespace kvstash::server {
namespace {

using ojson = nlohmann::ordered_json;

ApiError format_error(const std::string& message, const std::string& param, const std::string& code = "invalid_value") {
  return bad_request(message, param, code);
}

// OpenAI: a-z, A-Z, 0-9, underscores and dashes, at most 64.
bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

}  // namespace

std::optional<ApiError> parse_response_format(const ojson& body, ResponseFormat& out) {
  out = ResponseFormat{};
  auto rf = body.find("response_format");
  auto top_schema = body.find("json_schema");
  const bool has_rf = rf != body.end() && !rf->is_null();
  const bool has_top = top_schema != body.end() && !top_schema->is_null() && !(top_schema->is_object() && top_schema->empty());
  if (has_rf && has_top) return format_error("give either 'response_format' or 'json_schema', not both", "json_schema");
  auto gbnf = body.find("grammar");
  if (gbnf != body.end() && !gbnf->is_null() && !(gbnf->is_string() && gbnf->get<std::string>().empty())) {
    if (has_rf || has_top) return format_error("'grammar' cannot be combined with 'response_format' or 'json_schema'", "grammar");
    if (!gbnf->is_string()) return format_error("'grammar' must be a string (GBNF)", "grammar", "invalid_type");
    out.kind = ResponseFormat::Kind::kGbnf;
    out.schema = gbnf->get<std::string>();
    return std::nullopt;
  }
  if (has_top) {
    if (!top_schema->is_object()) return format_error("'json_schema' must be a JSON Schema object", "json_schema", "invalid_type");
    out.kind = ResponseFormat::Kind::kJsonSchema;
    out.schema = top_schema->dump();
    return std::nullopt;
  }
  if (!has_rf) return std::nullopt;
  if (!rf->is_object()) return format_error("'response_format' must be an object", "response_format", "invalid_type");
  auto type = rf->find("type");
  if (type == rf->end() || !type->is_string()) {
    return format_error("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"", "response_format.type");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out.kind = ResponseFormat::Kind::kJsonObject;
    return std::nullopt;
  }
  if (t != "json_schema") {
    return format_error("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"" + t + "\"",
                        "response_format.type");
  }
  auto js = rf->find("json_schema");
  if (js == rf->end() || !js->is_object()) {
    return format_error("'response_format.json_schema' must be an object with 'name' and 'schema'", "response_format.json_schema",
                        "invalid_type");
  }
  auto name = js->find("name");
  if (name == js->end() || !name->is_string() || !valid_name(name->get<std::string>())) {
    return format_error("'response_format.json_schema.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -",
                        "response_format.json_schema.name");
  }
  auto strict = js->find("strict");
  if (strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
    return format_error("'response_format.json_schema.strict' must be a boolean", "response_format.json_schema.strict", "invalid_type");
  }
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    out.kind = ResponseFormat::Kind::kJsonObject;  // OpenAI: without a schema, any JSON object
  } else if (!schema->is_object() && !schema->is_boolean()) {
    return format_error("'response_format.json_schema.schema' must be a JSON Schema object", "response_format.json_schema.schema",
                        "invalid_type");
  } else {
    out.kind = ResponseFormat::Kind::kJsonSchema;
    out.schema = schema->dump();
  }
  out.name = name->get<std::string>();
  return std::nullopt;
}

std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer) {
  const std::size_t n = tokenizer.vocab_size();
  std::vector<std::string> bytes(n);
  std::vector<grammar::TokenIndex> eog;
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    bytes[i] = tokenizer.token_to_piece(id);
    if (tokenizer.is_end_of_generation(id)) eog.push_back(id);
  }
  return grammar::TokenVocabulary::create(std::move(bytes), std::move(eog));
}

StructuredOutputs::StructuredOutputs(const Tokenizer* tokenizer, grammar::GrammarCacheOptions options)
    : tokenizer_(tokenizer), options_(options) {}

grammar::GrammarCache& StructuredOutputs::cache() {
  std::call_once(built_, [this] { cache_ = std::make_unique<grammar::GrammarCache>(grammar_vocabulary(*tokenizer_), options_); });
  return *cache_;
}

std::optional<ApiError> StructuredOutputs::apply(const ResponseFormat& format, SamplingParams& sampling) {
  if (format.kind == ResponseFormat::Kind::kText) return std::nullopt;
  if (!tokenizer_) return bad_request("this server has no tokenizer to constrain decoding with", "response_format", "unsupported_parameter");
  auto compiled = format.kind == ResponseFormat::Kind::kJsonObject ? cache().json_object()
                  : format.kind == ResponseFormat::Kind::kGbnf     ? cache().gbnf(format.schema)
                                                                   : cache().json_schema(format.schema);
  if (!compiled && format.kind == ResponseFormat::Kind::kGbnf) {
    return bad_request("invalid 'grammar': " + compiled.status().message(), "grammar", "invalid_grammar");
  }
  if (!compiled) {
    const bool unsupported = compiled.status().code() == StatusCode::kUnsupported;
    return bad_request(std::string(unsupported ? "unsupported" : "invalid") + " schema in 'response_format': " + compiled.status().message(),
                       "response_format", unsupported ? "unsupported_schema" : "invalid_schema");
  }
  sampling.grammar = std::move(*compiled);
  return std::nullopt;
}

std::optional<ApiError> StructuredOutputs::apply_tool_choice(const ToolRequest& tools, ToolCallFormat format,
                                                             const ResponseFormat& response_format, SamplingParams& sampling) {
  if (tools.choice != ToolChoice::kRequired && tools.choice != ToolChoice::kNamed) return std::nullopt;
  // A response_format shapes a text answer; a required or named call leaves none, so the calls'
  // grammar replaces the format's (which was still compiled: a bad schema is still a 400). Agent
  // SDKs send both when an agent has an output type and its first turn must call a tool.
  (void)response_format;
  if (format != ToolCallFormat::kHermes && format != ToolCallFormat::kLlama3 && format != ToolCallFormat::kMistral) {
    return bad_request(std::string("tool_choice \"required\" or a named function is enforced only for models that write "
                                   "calls in the hermes syntax (Qwen2.5, Qwen3, Hermes), Llama 3.x's JSON or Mistral's "
                                   "[TOOL_CALLS] list; this model's template writes ") +
                           tool_call_format_name(format) + "; send tool_choice \"auto\"",
                       "tool_choice", "unsupported_parameter");
  }
  if (!tokenizer_) return bad_request("this server has no tokenizer to constrain decoding with", "tool_choice", "unsupported_parameter");
  // Hermes: each call is <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>, calls one per
  // line. Llama 3.x: the answer is one call's JSON, {"name": .., "parameters": {..}} (its JSON tool
  // calling is one call per turn; its templates refuse a history with several). Mistral (v3, the
  // list its templates render in a history): [TOOL_CALLS] then a JSON list of {"name", "arguments"},
  // one item unless several may be made; "[TOOL_CALLS]" is the vocabulary's control token where it
  // has one (its piece is that text), else the same text in ordinary tokens, which the parser reads
  // alike.
  const bool hermes = format == ToolCallFormat::kHermes;
  const bool many = tools.choice == ToolChoice::kRequired && tools.parallel;
  auto compiled = [&]() -> Expected<std::shared_ptr<const grammar::CompiledGrammar>> {
    if (format == ToolCallFormat::kMistral) {
      nlohmann::ordered_json list = {{"type", "array"}, {"items", tool_call_schema(tools)}, {"minItems", 1}};
      if (!many) list["maxItems"] = 1;
      return cache().framed_json_schema(list.dump(), "[TOOL_CALLS]", "", "", false);
    }
    if (hermes) return cache().framed_json_schema(tool_call_schema(tools).dump(), "<tool_call>\n", "\n</tool_call>", "\n", many);
    return cache().framed_json_schema(tool_call_schema(tools, "parameters").dump(), "", "", "; ", false);
  }();
  if (!compiled) {
    const bool unsupported = compiled.status().code() == StatusCode::kUnsupported;
    return bad_request(std::string(unsupported ? "unsupported" : "invalid") + " schema in 'tools' (a function's parameters): " +
                           compiled.status().message(),
                       "tools", unsupported ? "unsupported_schema" : "invalid_schema");
  }
  sampling.grammar = std::move(*compiled);
  return std::nullopt;
}

}  // namespace kvstash::server
