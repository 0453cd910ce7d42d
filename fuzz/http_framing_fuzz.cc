// Fuzzes the HTTP/1.1 request framing (src/http/framing.h): the bytes of one connection go through
// exactly what Connection::parse_buffered() does with them, without the sockets and deadlines:
// Beast's parser under the server's limits, the RFC 9112 checks, "100 Continue", the conversion to
// a Request, and the next parser for pipelined requests. The first input byte picks how the rest
// is split into reads (1 byte at a time up to everything at once), since a request that arrives in
// pieces takes other paths through the parser. The limits are the server's defaults, scaled down
// (header 2 KiB, body 64 KiB) so that the fuzzer reaches them with small inputs.
#include <boost/asio/buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "http/framing.h"

namespace bhttp = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  kvstash::http::HttpServerOptions options;
  options.header_limit = 2 << 10;
  options.body_limit = 64 << 10;
  const std::size_t piece = std::size_t{1} << (data[0] % 16);  // 1 byte .. 32 KiB per read
  const std::string input(reinterpret_cast<const char*>(data + 1), size - 1);

  std::optional<kvstash::http::RequestParser> parser;
  parser.emplace();
  kvstash::http::configure_request_parser(*parser, options);
  bool header_checked = false;
  std::string buffer;  // bytes read and not yet taken by the parser, as the connection's flat_buffer
  int requests = 0;
  for (std::size_t read = 0; read < input.size();) {
    const std::size_t n = std::min(piece, input.size() - read);
    buffer.append(input, read, n);
    read += n;
    while (!buffer.empty()) {
      boost::system::error_code ec;
      const std::size_t used = parser->put(boost::asio::buffer(buffer), ec);
      if (used > buffer.size()) std::abort();
      buffer.erase(0, used);
      if (ec && ec != bhttp::error::need_more) {
        const auto failure = kvstash::http::parse_failure(ec, options);
        if (failure.status != 400 && failure.status != 413 && failure.status != 431) std::abort();
        return 0;  // the connection answers and closes
      }
      if (parser->is_header_done() && !header_checked) {
        header_checked = true;
        if (kvstash::http::check_request_framing(parser->get())) return 0;
        (void)kvstash::http::expects_continue(parser->get());
      }
      if (parser->is_done()) {
        const bool keep_alive = parser->get().keep_alive();
        kvstash::http::Request request = kvstash::http::to_request(parser->release(), "127.0.0.1");
        if (request.body.size() > options.body_limit) std::abort();
        (void)request.header("content-type");
        (void)request.header("authorization");
        (void)kvstash::http::query_param(request.query, "stream");
        (void)kvstash::http::query_param(request.query, "limit");
        ++requests;
        if (!keep_alive || requests >= 64) return 0;
        parser.emplace();
        kvstash::http::configure_request_parser(*parser, options);
        header_checked = false;
        continue;
      }
      if (used == 0) break;  // needs more bytes
    }
  }
  return 0;
}
