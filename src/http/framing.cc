// Request framing: see framing.h. Moved out of connection.cc unchanged in behaviour.
#include "http/framing.h"

#include <cctype>
#include <string_view>

namespace kvstash::http {
namespace {

namespace bhttp = boost::beast::http;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

FramingError bad_request(std::string message) {
  return {FramingError::Kind::kBadRequest, 400, std::move(message)};
}

}  // namespace

void configure_request_parser(RequestParser& parser, const HttpServerOptions& options) {
  parser.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(options.header_limit, UINT32_MAX)));
  parser.body_limit(options.body_limit);
  parser.eager(true);
}

FramingError parse_failure(const boost::system::error_code& ec, const HttpServerOptions& options) {
  if (ec == bhttp::error::header_limit) {
    return {FramingError::Kind::kHeaderTooLarge, 431,
            "request header section too large (limit " + std::to_string(options.header_limit) + " bytes)"};
  }
  if (ec == bhttp::error::body_limit) {
    return {FramingError::Kind::kBodyTooLarge, 413,
            "request body too large (limit " + std::to_string(options.body_limit) + " bytes)"};
  }
  return bad_request("malformed HTTP request: " + ec.message());
}

std::optional<FramingError> check_request_framing(const bhttp::request_header<>& h) {
  int transfer_encodings = 0;
  std::string_view coding;
  for (const auto& field : h) {
    if (field.name() == bhttp::field::transfer_encoding) {
      ++transfer_encodings;
      coding = trim(view(field.value()));
    }
  }
  if (transfer_encodings > 0) {
    if (h.find(bhttp::field::content_length) != h.end()) {
      return bad_request("Transfer-Encoding together with Content-Length (RFC 9112 section 6.1)");
    }
    if (transfer_encodings > 1 || !iequals(coding, "chunked")) {
      return bad_request("unsupported Transfer-Encoding (only a lone \"chunked\" is accepted)");
    }
  }
  if (h.version() == 11 && h.find(bhttp::field::host) == h.end()) {
    return bad_request("HTTP/1.1 request without a Host header (RFC 9112 section 3.2)");
  }
  return std::nullopt;
}

bool expects_continue(const bhttp::request_header<>& header) {
  return iequals(trim(view(header[bhttp::field::expect])), "100-continue");
}

Request to_request(bhttp::request<bhttp::string_body>&& message, std::string remote_address) {
  Request request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  const auto q = request.target.find('?');
  request.path = request.target.substr(0, q);
  if (q != std::string::npos) request.query = request.target.substr(q + 1);
  for (const auto& field : message) {
    request.headers.push_back({std::string(field.name_string()), std::string(field.value())});
  }
  request.body = std::move(message.body());
  request.remote_address = std::move(remote_address);
  return request;
}

}  // namespace kvstash::http
