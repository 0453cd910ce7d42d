// The bodies of llama-server's POST /tokenize and POST /detokenize, as functions of the request
// body, for the HTTP layer to route (server.cc stays with the HTTP rewrite):
//
//   /tokenize    {"content": "text", "add_special": false, "parse_special": true, "with_pieces": false}
//                -> {"tokens": [ids]}  (with_pieces: {"tokens": [{"id": 1, "piece": "text"}, ...]})
//   /detokenize  {"tokens": [ids]} -> {"content": "text"}
//
// Tokenizing is tokenize() of tokenizer.h, the code `kvstash tokenize` and the prompt builder use.
// Pieces that are not valid UTF-8 (a byte token) are given as byte arrays, as llama-server does.
//
// Thread safety: pure functions (the tokenizer is immutable).
#pragma once

#include <optional>
#include <string>

#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::server {

// On success writes the JSON response to *response; a 400 for a malformed body or an id out of range.
std::optional<ApiError> tokenize_request(const std::string& body, const Tokenizer& tokenizer, std::string* response);
std::optional<ApiError> detokenize_request(const std::string& body, const Tokenizer& tokenizer, std::string* response);

}  // namespace kvstash::server
