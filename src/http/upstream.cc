// The upstream client (http/upstream.h): one Call per request, a small state machine on the
// exchange's strand: take or open a connection, write the request, read the head with Beast's
// response parser, then the body in pieces into a fixed buffer (buffer_body), handing each piece
// to the caller as it comes.
#include "http/upstream.h"

#include <array>
#include <cctype>
#include <limits>

#include "http/server_impl.h"

namespace kvstash::http {

namespace bhttp = beast::http;
using Strand = asio::strand<asio::io_context::executor_type>;

namespace {

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

constexpr std::size_t kPiece = 16 << 10;  // body bytes read at once

}  // namespace

std::string UpstreamHead::header(std::string_view name) const {
  for (const Header& h : headers) {
    if (iequal(h.name, name)) return h.value;
  }
  return {};
}

struct UpstreamPool::Conn {
  explicit Conn(const asio::io_context::executor_type& ex) : socket(ex) {}
  tcp::socket socket;
  beast::flat_buffer buffer;  // bytes read past an answer stay here (then the connection is not reused)
};

struct UpstreamPool::Call final : UpstreamCall, std::enable_shared_from_this<UpstreamPool::Call> {
  Call(UpstreamPool& p, Strand s, std::string w, bool head, UpstreamHandlers hs)
      : pool(p), strand(std::move(s)), wire(std::move(w)), head_only(head), h(std::move(hs)), timer(strand.get_inner_executor()) {}

  UpstreamPool& pool;
  Strand strand;
  std::string wire;  // the request's bytes
  bool head_only;
  UpstreamHandlers h;
  UpstreamResult result;
  std::unique_ptr<Conn> conn;
  bool reused = false;  // conn came from the idle list
  std::optional<tcp::resolver> resolver;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  std::array<char, kPiece> piece;
  asio::steady_timer timer;
  std::uint64_t timer_generation = 0;
  const char* timed_out = nullptr;  // what missed its deadline
  bool finished = false;

  template <class F>
  auto bind(F&& f) {
    return asio::bind_executor(strand, std::forward<F>(f));
  }

  void start() {
    if (std::unique_ptr<Conn> idle = pool.take_idle()) {
      conn = std::move(idle);
      reused = true;
      ++result.connections_reused;
      return write_request();
    }
    open_new();
  }

  void open_new() {
    reused = false;
    ++result.connections_new;
    conn = std::make_unique<Conn>(strand.get_inner_executor());
    arm(pool.options_.connect_timeout, "connect");
    boost::system::error_code ec;
    const asio::ip::address address = asio::ip::make_address(pool.host_, ec);
    if (!ec) {
      conn->socket.async_connect(tcp::endpoint(address, static_cast<unsigned short>(pool.port_)),
                                 bind([self = shared_from_this()](boost::system::error_code e) { self->on_connected(e); }));
      return;
    }
    resolver.emplace(strand.get_inner_executor());
    resolver->async_resolve(pool.host_, std::to_string(pool.port_),
                            bind([self = shared_from_this()](boost::system::error_code e, tcp::resolver::results_type r) {
                              if (e || self->finished) return self->fail("resolve " + self->pool.host_, e);
                              asio::async_connect(self->conn->socket, r,
                                                  self->bind([self](boost::system::error_code e2, const tcp::endpoint&) {
                                                    self->on_connected(e2);
                                                  }));
                            }));
  }

  void on_connected(boost::system::error_code ec) {
    if (ec || finished || result.cancelled) return fail("connect", ec);
    conn->socket.set_option(tcp::no_delay(true), ec);
    write_request();
  }

  void write_request() {
    arm(pool.options_.read_timeout, "write");
    asio::async_write(conn->socket, asio::buffer(wire),
                      bind([self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (ec && !self->finished && !self->result.cancelled && !self->timed_out && self->reused) {
                          return self->retry_fresh();  // the upstream closed the kept-alive connection
                        }
                        if (ec || self->finished || self->result.cancelled) return self->fail("write", ec);
                        self->read_head();
                      }));
  }

  void retry_fresh() {
    boost::system::error_code ignored;
    conn->socket.close(ignored);
    conn.reset();
    parser.reset();
    open_new();
  }

  void read_head() {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(pool.options_.header_limit));
    // Streams are as long as the upstream makes them. (Not boost::none: Boost 1.74 compares the
    // Content-Length with the optional, and any length is "more" than none.)
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (head_only) parser->skip(true);
    arm(pool.options_.read_timeout, "the answer's head");
    bhttp::async_read_header(conn->socket, conn->buffer, *parser,
                             bind([self = shared_from_this()](boost::system::error_code ec, std::size_t) { self->on_head(ec); }));
  }

  void on_head(boost::system::error_code ec) {
    if (finished) return;
    if (ec && !result.cancelled && !timed_out && reused && !parser->got_some()) return retry_fresh();
    if (ec || result.cancelled) return fail("read", ec);
    UpstreamHead head;
    head.status = static_cast<int>(parser->get().result_int());
    for (const auto& field : parser->get()) {
      head.headers.push_back({std::string(field.name_string()), std::string(field.value())});
    }
    result.answered = true;
    if (h.on_head && !h.on_head(std::move(head))) return stop();
    read_body();
  }

  void read_body() {
    if (finished) return;
    if (parser->is_done()) return finish(true, "");
    parser->get().body().data = piece.data();
    parser->get().body().size = piece.size();
    arm(pool.options_.read_timeout, "the answer's body");
    bhttp::async_read_some(conn->socket, conn->buffer, *parser,
                           bind([self = shared_from_this()](boost::system::error_code ec, std::size_t) { self->on_body(ec); }));
  }

  void on_body(boost::system::error_code ec) {
    if (finished) return;
    if (ec == bhttp::error::need_buffer) ec = {};
    const std::size_t n = piece.size() - parser->get().body().size;
    if (n > 0 && !result.cancelled && h.on_body && !h.on_body(std::string_view(piece.data(), n))) return stop();
    if (ec || result.cancelled) return fail("read", ec);
    read_body();
  }

  // Deadline for the operation about to start; on expiry the socket closes, which ends it.
  void arm(std::chrono::milliseconds d, const char* what) {
    const std::uint64_t generation = ++timer_generation;
    timer.expires_after(d);
    timer.async_wait(bind([self = shared_from_this(), generation, what](boost::system::error_code ec) {
      if (ec || generation != self->timer_generation || self->finished) return;
      self->timed_out = what;
      self->close_socket();
    }));
  }

  void close_socket() {
    boost::system::error_code ignored;
    if (resolver) resolver->cancel();
    if (conn) conn->socket.close(ignored);
  }

  void stop() {
    result.cancelled = true;
    finish(false, "stopped by the caller");
  }

  void cancel() override {
    if (finished) return;
    result.cancelled = true;
    close_socket();  // the operation in flight ends with an error; its handler finishes
  }

  void fail(const std::string& what, boost::system::error_code ec) {
    if (result.cancelled) return finish(false, "cancelled");
    if (timed_out) return finish(false, std::string(timed_out) + " timed out");
    finish(false, what + ": " + (ec ? ec.message() : std::string("failed")));
  }

  void finish(bool ok, std::string error) {
    if (finished) return;
    finished = true;
    ++timer_generation;
    timer.cancel();
    if (ok && conn && parser && parser->keep_alive() && conn->buffer.size() == 0) {
      pool.give_back(std::move(conn));
    } else {
      close_socket();
      conn.reset();
    }
    result.ok = ok;
    result.error = std::move(error);
    UpstreamHandlers handlers = std::move(h);
    h = {};
    if (handlers.on_done) handlers.on_done(result);
  }
};

UpstreamPool::UpstreamPool(std::string host, int port, UpstreamOptions options)
    : host_(std::move(host)), port_(port), options_(options) {}

UpstreamPool::~UpstreamPool() = default;

std::shared_ptr<UpstreamCall> UpstreamPool::send(const std::shared_ptr<Exchange>& exchange, UpstreamRequest request,
                                                 UpstreamHandlers handlers) {
  auto* impl = dynamic_cast<ExchangeImpl*>(exchange.get());
  if (!impl) {
    UpstreamResult r;
    r.error = "not an exchange of an HttpServer";
    if (handlers.on_done) handlers.on_done(r);
    return nullptr;
  }
  std::string wire = request.method + " " + request.target + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) + "\r\n";
  for (const Header& hd : request.headers) {
    if (hd.name.find_first_of("\r\n") != std::string::npos || hd.value.find_first_of("\r\n") != std::string::npos) continue;
    wire += hd.name + ": " + hd.value + "\r\n";
  }
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT" || request.method == "PATCH") {
    wire += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  wire += "\r\n";
  wire += request.body;
  auto call = std::make_shared<Call>(*this, impl->strand(), std::move(wire), request.method == "HEAD", std::move(handlers));
  call->start();
  return call;
}

std::unique_ptr<UpstreamPool::Conn> UpstreamPool::take_idle() {
  std::lock_guard lock(mu_);
  if (idle_.empty()) return nullptr;
  std::unique_ptr<Conn> c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void UpstreamPool::give_back(std::unique_ptr<Conn> conn) {
  std::lock_guard lock(mu_);
  if (idle_.size() < options_.max_idle) idle_.push_back(std::move(conn));
}

void UpstreamPool::drop_idle() {
  std::vector<std::unique_ptr<Conn>> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.swap(idle_);
  }
  for (auto& c : dropped) {
    boost::system::error_code ignored;
    c->socket.close(ignored);
  }
}

std::size_t UpstreamPool::idle_count() const {
  std::lock_guard lock(mu_);
  return idle_.size();
}

}  // namespace kvstash::http
