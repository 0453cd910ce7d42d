#include "server/tokenize_api.h"

#include <nlohmann/json.hpp>

#include "server/utf8.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

std::optional<ApiError> parse_object(const std::string& body, json* out) {
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) return bad_request("the body is not a JSON object");
  return std::nullopt;
}

std::optional<ApiError> optional_bool(const json& request, const char* key, bool* value) {
  if (!request.contains(key)) return std::nullopt;
  if (!request[key].is_boolean()) return bad_request(std::string("'") + key + "' must be a boolean", key);
  *value = request[key].get<bool>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> tokenize_request(const std::string& body, const Tokenizer& tokenizer, std::string* response) {
  json request;
  if (auto err = parse_object(body, &request)) return err;
  if (!request.contains("content") || !request["content"].is_string()) {
    return bad_request("'content' must be a string", "content");
  }
  bool add_special = false;
  bool parse_special = true;
  bool with_pieces = false;
  if (auto err = optional_bool(request, "add_special", &add_special)) return err;
  if (auto err = optional_bool(request, "parse_special", &parse_special)) return err;
  if (auto err = optional_bool(request, "with_pieces", &with_pieces)) return err;
  const std::vector<TokenId> ids =
      tokenize(tokenizer, request["content"].get<std::string>(), add_special, parse_special);
  json tokens = json::array();
  for (TokenId id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tokenizer.token_to_piece(id);
    json entry = {{"id", id}};
    if (is_valid_utf8(piece)) {
      entry["piece"] = piece;
    } else {
      json bytes = json::array();
      for (unsigned char c : piece) bytes.push_back(c);
      entry["piece"] = bytes;
    }
    tokens.push_back(std::move(entry));
  }
  *response = json{{"tokens", std::move(tokens)}}.dump();
  return std::nullopt;
}

std::optional<ApiError> detokenize_request(const std::string& body, const Tokenizer& tokenizer,
                                           std::string* response) {
  json request;
  if (auto err = parse_object(body, &request)) return err;
  if (!request.contains("tokens") || !request["tokens"].is_array()) {
    return bad_request("'tokens' must be an array of token ids", "tokens");
  }
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i < request["tokens"].size(); ++i) {
    const json& t = request["tokens"][i];
    if (!t.is_number_integer() || t.get<std::int64_t>() < 0 ||
        t.get<std::int64_t>() >= static_cast<std::int64_t>(tokenizer.vocab_size())) {
      return bad_request("'tokens[" + std::to_string(i) + "]' is not a token id of this vocabulary (size " +
                             std::to_string(tokenizer.vocab_size()) + ")",
                         "tokens", "invalid_token");
    }
    ids.push_back(static_cast<TokenId>(t.get<std::int64_t>()));
  }
  // Invalid UTF-8 (a cut multi-byte char) is replaced as JSON needs it to be.
  *response = json{{"content", tokenizer.decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace);
  return std::nullopt;
}

}  // namespace kvstash::server
