// Internals of HttpServer shared by http_server.cc (listener, registry, counters),
// connection.cc (one connection's reads, writes and deadlines) and upstream.cc (the proxies'
// upstream client, on a connection's strand). Only these files include Boost; the rest of the
// project sees http_server.h and upstream.h.
//
// Lock order: Impl::mutex guards `connections` and `per_client`; it is never held while calling
// into a Connection (which only runs on its own strand).
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility> (fixed in later
// Boost); include it first.
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "http/http_server.h"

namespace kvstash::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

class Connection;
struct FramingError;  // http/framing.h

// Counters as atomics (HttpStats is their snapshot).
struct AtomicStats {
  std::atomic<std::int64_t> connections_open{0}, connections_accepted{0}, rejected_total_limit{0},
      rejected_per_client_limit{0}, rejected_draining{0}, bad_request{0}, header_too_large{0},
      body_too_large{0}, header_timeout{0}, body_timeout{0}, idle_closed{0}, write_timeout{0},
      slow_reader{0};
};

// An io_context whose services can be shut down before it is destroyed: shutdown() destroys every
// handler still queued (and what it holds) but keeps the services, which the sockets, timers and
// strands of a late Connection still call into when they are destroyed.
class SharedIoContext : public asio::io_context {
 public:
  using asio::io_context::shutdown;
};

// What a Connection or an Exchange may outlive the server with: whether the server still runs,
// for Exchange::post() from threads that outlive it (an engine callback that fires after the
// server stopped), and the io_context itself. A handler may hold the last reference to a
// connection past stop() (a generation the engine has not yet dropped), and a connection's
// strand, socket and timers need the io_context's services when they are destroyed, so the
// io_context lives until the last of them is gone, on whichever thread lets go of it.
struct LifeGuard {
  std::mutex mutex;
  bool alive = true;  // guarded by mutex
  SharedIoContext io;
};

struct HttpServer::Impl {
  Impl(const HttpServerOptions& o, Handler& h)
      : options(o), handler(h), acceptor(io), acceptor_strand(asio::make_strand(io)), retry_timer(io) {}
  // Marks the guard dead and shuts the io_context's services down (the handlers left queued are
  // destroyed here); the io_context itself goes with the last Connection or Exchange.
  ~Impl();

  HttpServerOptions options;
  Handler& handler;
  AtomicStats stats;
  std::shared_ptr<LifeGuard> life = std::make_shared<LifeGuard>();
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  int port = 0;

  std::mutex mutex;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;  // guarded by mutex
  std::map<std::string, int> per_client;                                  // guarded by mutex
  int open_count = 0;                                                      // guarded by mutex

  asio::io_context& io = life->io;
  tcp::acceptor acceptor;                                  // used on acceptor_strand only
  asio::strand<asio::io_context::executor_type> acceptor_strand;
  asio::steady_timer retry_timer;                          // after accept fails for lack of descriptors
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;

  void accept_next();
  void on_accept(boost::system::error_code ec, tcp::socket socket);
  // Registers a connection from `address`, or says why it may not open.
  enum class Admit { kOk, kTotal, kPerClient };
  Admit admit(const std::string& address);  // counts the connection in when kOk
  void track(const std::shared_ptr<Connection>& c);
  void reject(tcp::socket socket, const char* why);
  void forget(Connection* c, const std::string& address);
  std::vector<std::shared_ptr<Connection>> live_connections();
};

// One answer in a connection's queue (pipelined requests answer in order).
class ExchangeImpl;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl* server, tcp::socket socket, std::string address);
  ~Connection();
  void start();
  // From any thread: closes the connection now (server stop).
  void close_from_outside();
  // From any thread: the server is draining; close if idle, else close after the answers in hand.
  void drain_from_outside();
  // From any thread: read nothing more; close once what is queued is written.
  void finish_from_outside();

  // On the strand (called by ExchangeImpl):
  void output_ready();               // an exchange has new bytes or finished
  void cut_slow_reader(ExchangeImpl* exchange);
  asio::strand<asio::io_context::executor_type>& strand() { return strand_; }
  bool is_closed() const { return closed_; }
  const HttpServerOptions& options() const { return server_->options; }

 private:
  enum class ReadPhase { kIdle, kHeader, kBody };

  void read_more();
  void on_read(boost::system::error_code ec, std::size_t n);
  // Feeds buffered bytes to the parser; dispatches complete requests. False when the connection
  // was closed (an error answered).
  bool parse_buffered();
  bool check_framing();  // RFC 9112 checks Beast leaves to us; answers 400 when they fail
  void dispatch();
  void new_parser();
  void fail_request(int status, const std::string& message, std::atomic<std::int64_t>& counter);
  void fail_request(const FramingError& error);  // counted by its kind
  void set_read_deadline(std::chrono::milliseconds d, ReadPhase phase);
  void clear_read_deadline();
  void on_read_deadline();
  void write_next();
  void on_write(boost::system::error_code ec, std::size_t n);
  void close();
  // Sends what is queued, then half-closes and discards what the client still sends for a
  // moment, so that a reset does not destroy the last answer before the client reads it.
  void close_gracefully();
  bool can_read_more() const;
  void arm_idle_deadline();

  HttpServer::Impl* server_;  // valid while life_->alive
  std::shared_ptr<LifeGuard> life_;  // declared before the io objects below: it outlives them
  asio::strand<asio::io_context::executor_type> strand_;
  tcp::socket socket_;
  std::string address_;
  beast::flat_buffer buffer_;
  std::optional<beast::http::request_parser<beast::http::string_body>> parser_;
  ReadPhase phase_ = ReadPhase::kIdle;
  bool read_in_flight_ = false;
  bool read_closed_ = false;     // no more requests will be read (close after answers)
  bool closed_ = false;
  bool sent_continue_ = false;   // "100 Continue" sent for the request being read
  bool idle_armed_ = false;      // the idle deadline runs
  bool write_scheduled_ = false; // a write_next() is posted
  bool close_after_write_ = false;
  bool lingering_ = false;       // half-closed, discarding input until EOF or the deadline
  asio::steady_timer read_timer_;
  std::uint64_t read_timer_generation_ = 0;
  asio::steady_timer write_timer_;
  std::deque<std::shared_ptr<ExchangeImpl>> exchanges_;  // answers in request order
  std::string writing_;          // bytes of the write in flight
  bool write_in_flight_ = false;
  std::string control_;          // bytes the connection itself must send first (100 Continue)
};

class ExchangeImpl final : public Exchange, public std::enable_shared_from_this<ExchangeImpl> {
 public:
  ExchangeImpl(std::shared_ptr<Connection> connection, std::shared_ptr<LifeGuard> life, bool head_only,
               bool keep_alive)
      : connection_(std::move(connection)), life_(std::move(life)), head_only_(head_only), keep_alive_(keep_alive) {}

  void respond(Response response) override;
  void begin_stream(Response head) override;
  bool write(std::string data) override;
  void end() override;
  void on_close(std::function<void()> callback) override { on_close_ = std::move(callback); }
  void post(std::function<void()> fn) override;
  bool closed() const override { return gone_; }
  // The connection's strand (for http/upstream.h, which runs its socket there).
  asio::strand<asio::io_context::executor_type> strand() const { return connection_->strand(); }

  // For the connection (on the strand):
  std::string take_output() { return std::exchange(pending_, {}); }
  bool has_output() const { return !pending_.empty(); }
  bool complete() const { return complete_; }  // every byte of the answer is in `pending_` or sent
  bool closes_connection() const { return !keep_alive_; }
  void set_closes_connection() { keep_alive_ = false; }
  void connection_closed();                     // runs on_close_ once if incomplete

 private:
  void append_head(const Response& r, bool chunked);

  std::shared_ptr<Connection> connection_;
  std::shared_ptr<LifeGuard> life_;
  bool head_only_;
  bool keep_alive_;
  bool started_ = false;
  bool streaming_ = false;
  bool complete_ = false;
  bool gone_ = false;
  std::string pending_;
  std::function<void()> on_close_;
};

}  // namespace kvstash::http
