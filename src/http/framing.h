// The request side of HTTP/1.1 framing, as a connection applies it to the bytes it reads: Beast's
// parser under the server's limits, the RFC 9112 checks Beast leaves to the application, and the
// conversion of a parsed message into a Request. Kept apart from Connection (sockets, strands,
// deadlines) so that a fuzz target (fuzz/http_framing_fuzz.cc) pushes bytes through exactly what
// the server does with them.
//
// Thread safety: pure functions; a parser is used by one thread at a time (a connection's strand).
#pragma once

#include <boost/beast/http.hpp>

#include <cstddef>
#include <optional>
#include <string>

#include "http/http_server.h"

namespace kvstash::http {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Why a request cannot be read; the connection answers `status` and closes.
struct FramingError {
  enum class Kind { kBadRequest, kHeaderTooLarge, kBodyTooLarge };
  Kind kind = Kind::kBadRequest;
  int status = 400;  // 400, 431 or 413
  std::string message;
};

// A fresh parser for the next request, with the header and body limits of `options` set before
// any byte is read.
void configure_request_parser(RequestParser& parser, const HttpServerOptions& options);

// What the parser's error `ec` (not need_more) means for the client.
FramingError parse_failure(const boost::system::error_code& ec, const HttpServerOptions& options);

// The RFC 9112 checks on a complete header that Beast leaves to us: Transfer-Encoding with
// Content-Length, any Transfer-Encoding but one lone "chunked", HTTP/1.1 without Host.
std::optional<FramingError> check_request_framing(const boost::beast::http::request_header<>& header);

// The header asks for "100 Continue" before its body.
bool expects_continue(const boost::beast::http::request_header<>& header);

// The Request a handler gets for a complete message.
Request to_request(boost::beast::http::request<boost::beast::http::string_body>&& message, std::string remote_address);

}  // namespace kvstash::http
