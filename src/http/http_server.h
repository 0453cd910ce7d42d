// An event-driven HTTP/1.1 server (Boost.Beast's parser on Boost.Asio), independent of what it
// serves: the OpenAI API (server module) and, later, the router plug in a Handler.
//
// Model: a fixed set of I/O threads runs every connection; no thread per connection or per
// request. Each connection is a Connection object on its own strand (so its state needs no lock)
// that reads requests with Beast's parser under limits set before reading, hands each complete
// request to the Handler, and writes the answers in request order (pipelining). Bytes a handler
// produces wait in a per-request buffer; a streamed answer whose buffer outgrows
// `stream_buffer_limit` (a reader slower than the producer) is cut and counted, so a slow reader
// never makes its producer wait.
//
// Limits (HttpServerOptions): the header section (431), the body by every framing (413), a
// deadline for receiving a request's header and one for its body (408), an idle keep-alive
// timeout, a deadline for every write, connections in total and per client address (503 with
// Retry-After), strict framing per RFC 9112 (400 and close: conflicting or malformed
// Content-Length, Transfer-Encoding other than a lone "chunked", Transfer-Encoding with
// Content-Length, bad chunk framing). See docs/http-layer.md.
//
// Thread safety: HttpServer's methods may be called from any thread. The Handler is called on I/O
// threads; an Exchange's methods (except post()) must run on its connection's strand: inside
// Handler::handle() or in a function given to Exchange::post().
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::http {

struct Header {
  std::string name;
  std::string value;
};

struct Request {
  std::string method;           // "GET", "POST", ... as sent
  std::string target;           // path and query as sent
  std::string path;             // target before '?'
  std::string query;            // target after '?', "" when none
  std::vector<Header> headers;  // in arrival order, names as sent
  std::string body;             // de-chunked
  std::string remote_address;   // the peer's IP address
  // The value of the first header named `name` (case-insensitive), or "" when absent.
  std::string_view header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<Header> headers;  // extra headers; the layer writes Content-Length / Transfer-Encoding / Connection
  std::string body;
};

// One request's answer. Exactly one of respond() or begin_stream() is called; after
// begin_stream(), write() any number of times, then end(). Calls after the connection closed are
// ignored. Thread safety: see the file comment.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // The whole answer.
  virtual void respond(Response response) = 0;
  // Starts a chunked answer with `head`'s status, content type and headers (its body is ignored).
  virtual void begin_stream(Response head) = 0;
  // Queues `data` as the next chunk. Returns false when the stream is gone: the client closed,
  // a write timed out, or the queued bytes passed stream_buffer_limit (the exchange is then
  // closed and its close callback runs). The producer should stop.
  virtual bool write(std::string data) = 0;
  // Ends the chunked answer.
  virtual void end() = 0;
  // `callback` runs once, on the strand, if the connection closes before this exchange's answer
  // is complete (client gone, timeout, slow reader, server stop). Set it inside handle().
  virtual void on_close(std::function<void()> callback) = 0;
  // Runs `fn` on this exchange's strand. Safe from any thread, also after the connection closed
  // (then `fn` still runs, and the exchange's methods are no-ops).
  virtual void post(std::function<void()> fn) = 0;
  // True once the connection is gone.
  virtual bool closed() const = 0;
};

class Handler {
 public:
  virtual ~Handler() = default;
  // Called on the connection's strand for each complete request, in order. Must not block:
  // long work answers later through `exchange` (see Exchange::post()).
  virtual void handle(Request request, std::shared_ptr<Exchange> exchange) = 0;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";                   // address to listen on
  int port = 8080;                                  // 0 = any free port
  int io_threads = 2;                               // I/O threads for all connections
  std::size_t header_limit = 16 << 10;              // bytes of request line + headers; more = 431
  std::size_t body_limit = 8 << 20;                 // body bytes by any framing; more = 413
  std::chrono::milliseconds header_timeout{10000};  // first byte to end of header; else 408
  std::chrono::milliseconds body_timeout{60000};    // end of header to end of body; else 408
  std::chrono::milliseconds idle_timeout{60000};    // keep-alive wait for a next request
  std::chrono::milliseconds write_timeout{30000};   // each write; a reader that takes longer is cut
  int max_connections = 10000;                      // open at once; beyond: 503 + Retry-After
  int max_connections_per_client = 1000;            // per client IP address; 0 = no bound
  std::size_t stream_buffer_limit = 1 << 20;        // unsent bytes of one answer; beyond: cut
  int max_pipelined = 16;                           // requests read ahead on one connection
  int socket_send_buffer = 0;                       // SO_SNDBUF of client sockets, bytes; 0 = the system's
  // The body of the answers the layer makes itself (400, 408, 413, 431, 503), as JSON; the
  // default is {"error": {"message": ...}}. The OpenAI server passes its own error shape.
  std::function<std::string(int status, const std::string& message)> error_body;
};

// Counters of the HTTP layer, for /metrics.
struct HttpStats {
  std::int64_t connections_open = 0;
  std::int64_t connections_accepted = 0;
  std::int64_t rejected_total_limit = 0;       // 503: max_connections
  std::int64_t rejected_per_client_limit = 0;  // 503: max_connections_per_client
  std::int64_t rejected_draining = 0;          // 503: a request arrived while draining
  std::int64_t bad_request = 0;                // 400: framing
  std::int64_t header_too_large = 0;           // 431
  std::int64_t body_too_large = 0;             // 413
  std::int64_t header_timeout = 0;             // 408 (header)
  std::int64_t body_timeout = 0;               // 408 (body)
  std::int64_t idle_closed = 0;                // keep-alive connections closed when idle
  std::int64_t write_timeout = 0;              // writes that missed their deadline
  std::int64_t slow_reader = 0;                // answers cut: stream_buffer_limit passed
};

class HttpServer {
 public:
  // Binds and starts the I/O threads. Errors: kIoError when the address cannot be bound,
  // kInvalidArgument for bad options. `handler` must outlive the server.
  static Expected<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options, Handler& handler);
  ~HttpServer();  // stop()

  int port() const;
  // Graceful: stops accepting, closes idle connections, answers 503 (and closes) to requests that
  // arrive from now on; answers in progress continue. Idempotent.
  void stop_accepting();
  // Closes every connection (open exchanges' close callbacks run) and joins the I/O threads.
  // Idempotent.
  void stop();
  HttpStats stats() const;

  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of a status code ("Not Found"), "" for unknown codes.
const char* reason_phrase(int status);

// The value of parameter `name` in a query string ("a=1&b=2"), percent-decoded ('+' is a space);
// "" when absent.
std::string query_param(std::string_view query, std::string_view name);

}  // namespace kvstash::http
