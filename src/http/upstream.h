// An asynchronous HTTP/1.1 client for proxies built on HttpServer (the router): it sends a
// request to one upstream server and hands the answer's head and body, piece by piece, to the
// caller on the strand of the Exchange it serves. It runs on the server's own I/O threads and
// io_context (no thread of its own, no hand-off between threads): the caller, the upstream socket
// and the client's connection all run on that one strand.
//
// Connections: an UpstreamPool keeps kept-alive connections to its upstream (up to max_idle). A
// request takes an idle one, or opens a new one (connect_timeout); after an answer read in full
// on a connection the upstream keeps alive, the connection goes back. A kept-alive connection the
// upstream closed meanwhile (the request cannot be written, or the connection ends before a byte
// of the answer) is replaced by a new one, once, without the caller seeing it.
//
// Deadlines: connect_timeout to connect; read_timeout for the answer's head and between pieces of
// its body. A missed deadline fails the request (UpstreamResult::error says which).
//
// Thread safety: an UpstreamPool is safe from any thread (the idle list is guarded by a mutex; a
// connection is used by one request at a time). send() must be called on the exchange's strand
// (inside Handler::handle() or a function given to Exchange::post(), or in one of the handlers);
// UpstreamCall::cancel() likewise. The pool must not outlive the server whose exchanges it served
// unless drop_idle() was called after that server stopped.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_server.h"

namespace kvstash::http {

struct UpstreamOptions {
  std::chrono::milliseconds connect_timeout{1000};  // to open a new connection
  std::chrono::milliseconds read_timeout{600000};   // for the answer's head, and between its body's pieces
  std::size_t max_idle = 64;                        // kept-alive connections kept
  std::size_t header_limit = 64 << 10;              // bytes of the answer's status line and headers
};

struct UpstreamRequest {
  std::string method;           // "POST", ...
  std::string target;           // path and query
  std::vector<Header> headers;  // sent as given; the client adds Host and Content-Length
  std::string body;
};

// The answer's status line and headers (names as sent; the framing headers included).
struct UpstreamHead {
  int status = 0;
  std::vector<Header> headers;
  std::string header(std::string_view name) const;  // first header named `name` (case-insensitive), "" when absent
};

struct UpstreamResult {
  bool ok = false;        // the answer was read in full
  bool answered = false;  // its head arrived (on_head ran): a failure before that is "before the first byte"
  bool cancelled = false; // cancel() or a handler returned false
  std::string error;      // why it failed ("" when ok)
  int connections_new = 0, connections_reused = 0;  // connections this request used
};

// Called on the exchange's strand, in this order: on_head once (when the head arrives), on_body
// for each piece of the de-chunked body, on_done once at the end, whatever happened (also after a
// failure before the head). on_head or on_body returning false stops the request (the connection
// is closed; on_done reports cancelled).
struct UpstreamHandlers {
  std::function<bool(UpstreamHead head)> on_head;
  std::function<bool(std::string_view piece)> on_body;
  std::function<void(const UpstreamResult& result)> on_done;
};

// One request in flight; cancel() ends it (on_done runs with cancelled = true, unless it already
// ran). On the exchange's strand only.
class UpstreamCall {
 public:
  virtual ~UpstreamCall() = default;
  virtual void cancel() = 0;
};

class UpstreamPool {
 public:
  // `host`: an IP address or a name (resolved for each new connection).
  UpstreamPool(std::string host, int port, UpstreamOptions options);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // Starts `request` for `exchange` (an exchange of an HttpServer; another kind gets on_done with
  // an error at once). The pool must outlive the call.
  std::shared_ptr<UpstreamCall> send(const std::shared_ptr<Exchange>& exchange, UpstreamRequest request,
                                     UpstreamHandlers handlers);
  // Closes the idle connections.
  void drop_idle();
  std::size_t idle_count() const;

  struct Conn;  // a connection (upstream.cc)
  struct Call;

 private:
  friend struct Call;
  std::unique_ptr<Conn> take_idle();
  void give_back(std::unique_ptr<Conn> conn);

  const std::string host_;
  const int port_;
  const UpstreamOptions options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_;  // guarded by mu_
};

}  // namespace kvstash::http
