// An error the HTTP API reports to its client, in OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "messages", "code": null}}
// Request parsing and validation produce ApiErrors as values; the HTTP layer turns them into
// responses with `http_status`.
//
// Thread safety: plain values.
#pragma once

#include <string>

#include "kvstash/status.h"

namespace kvstash::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("messages[1].role"); "" = null
  std::string code;   // a machine-readable code ("context_length_exceeded"); "" = null

  // The JSON body: {"error": {...}}.
  std::string to_json() const;
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");
// Maps an engine Status: kInvalidArgument → 400, kResourceExhausted → 429, else → 500.
ApiError from_status(const Status& status);

}  // namespace kvstash::server
