// One connection: reading requests under limits and deadlines, dispatching them, and writing the
// answers in order. Everything here runs on the connection's strand.
#include <cstdio>

#include "http/framing.h"
#include "http/server_impl.h"

namespace kvstash::http {
namespace {

namespace bhttp = beast::http;

// Bytes asked of the socket per read.
constexpr std::size_t kReadChunk = 16 << 10;
// How long a closing connection keeps discarding what the client still sends (see close_gracefully).
constexpr std::chrono::milliseconds kLingerTime{1000};

bool safe_header_text(std::string_view s) { return s.find_first_of("\r\n") == std::string_view::npos; }

}  // namespace

// ---- ExchangeImpl ----

void ExchangeImpl::append_head(const Response& r, bool chunked) {
  char line[64];
  std::snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\n", r.status, reason_phrase(r.status));
  pending_ += line;
  if (!r.content_type.empty() && safe_header_text(r.content_type)) {
    pending_ += "Content-Type: " + r.content_type + "\r\n";
  }
  for (const Header& h : r.headers) {
    if (safe_header_text(h.name) && safe_header_text(h.value)) pending_ += h.name + ": " + h.value + "\r\n";
  }
  if (chunked) {
    pending_ += "Transfer-Encoding: chunked\r\n";
  } else {
    pending_ += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  }
  if (!keep_alive_) pending_ += "Connection: close\r\n";
  pending_ += "\r\n";
}

void ExchangeImpl::respond(Response response) {
  if (gone_ || started_) return;
  started_ = true;
  complete_ = true;
  append_head(response, false);
  if (!head_only_) pending_ += response.body;
  connection_->output_ready();
}

void ExchangeImpl::begin_stream(Response head) {
  if (gone_ || started_) return;
  started_ = true;
  streaming_ = true;
  append_head(head, true);
  connection_->output_ready();
}

bool ExchangeImpl::write(std::string data) {
  if (gone_ || !streaming_ || complete_) return false;
  if (data.empty()) return true;
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  pending_ += size;
  pending_ += data;
  pending_ += "\r\n";
  if (pending_.size() > connection_->options().stream_buffer_limit) {
    connection_->cut_slow_reader(this);
    return false;
  }
  connection_->output_ready();
  return true;
}

void ExchangeImpl::end() {
  if (gone_ || !streaming_ || complete_) return;
  pending_ += "0\r\n\r\n";
  complete_ = true;
  connection_->output_ready();
}

void ExchangeImpl::post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(life_->mutex);
  if (!life_->alive) return;  // the server is gone; `fn` (and what it holds) is dropped here
  asio::post(connection_->strand(), std::move(fn));
}

void ExchangeImpl::connection_closed() {
  if (gone_) return;
  gone_ = true;
  pending_.clear();
  std::function<void()> callback = std::move(on_close_);
  on_close_ = nullptr;
  if (!complete_ && callback) callback();
}

// ---- Connection ----

Connection::Connection(HttpServer::Impl* server, tcp::socket socket, std::string address)
    : server_(server),
      life_(server->life),
      strand_(asio::make_strand(server->io)),
      socket_(std::move(socket)),
      address_(std::move(address)),
      read_timer_(server->io),
      write_timer_(server->io) {}

Connection::~Connection() {
  // A connection that outlives its server (held by a handler past stop()) has nothing to tell it.
  std::lock_guard<std::mutex> lock(life_->mutex);
  if (life_->alive) server_->forget(this, address_);
}

void Connection::start() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->new_parser();
    // A new connection gets header_timeout for its first request (it has nothing to keep alive).
    self->set_read_deadline(self->options().header_timeout, ReadPhase::kHeader);
    self->read_more();
  });
}

void Connection::close_from_outside() {
  asio::post(strand_, [self = shared_from_this()] { self->close(); });
}

void Connection::drain_from_outside() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->closed_) return;
    if (self->exchanges_.empty() && self->phase_ == ReadPhase::kIdle && !self->write_in_flight_) {
      self->close();
    }
    // Otherwise answers in hand finish; write_next() closes once none is left.
  });
}

void Connection::finish_from_outside() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->closed_) return;
    self->read_closed_ = true;
    self->close_after_write_ = true;
    self->write_next();  // closes at once when nothing is queued
  });
}

void Connection::new_parser() {
  parser_.emplace();
  configure_request_parser(*parser_, options());
  sent_continue_ = false;
}

bool Connection::can_read_more() const {
  return !closed_ && !read_closed_ && exchanges_.size() < static_cast<std::size_t>(options().max_pipelined);
}

void Connection::read_more() {
  if (read_in_flight_ || closed_ || (!lingering_ && !can_read_more())) return;
  read_in_flight_ = true;
  socket_.async_read_some(buffer_.prepare(kReadChunk),
                          asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec,
                                                                                   std::size_t n) {
                            self->on_read(ec, n);
                          }));
}

void Connection::on_read(boost::system::error_code ec, std::size_t n) {
  read_in_flight_ = false;
  if (closed_) return;
  if (lingering_) {
    buffer_.consume(buffer_.size());
    if (ec) return close();
    return read_more();
  }
  if (ec) return close();  // the client closed or reset: open answers are cancelled
  buffer_.commit(n);
  if (!parse_buffered()) return;
  read_more();
}

bool Connection::parse_buffered() {
  while (buffer_.size() > 0 && can_read_more()) {
    if (phase_ == ReadPhase::kIdle) set_read_deadline(options().header_timeout, ReadPhase::kHeader);
    boost::system::error_code ec;
    const std::size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec && ec != bhttp::error::need_more) {
      fail_request(parse_failure(ec, options()));
      return false;
    }
    if (parser_->is_header_done() && phase_ == ReadPhase::kHeader) {
      if (!check_framing()) return false;
      set_read_deadline(options().body_timeout, ReadPhase::kBody);
      if (!parser_->is_done() && !sent_continue_ && expects_continue(parser_->get())) {
        control_ += "HTTP/1.1 100 Continue\r\n\r\n";
        sent_continue_ = true;
        output_ready();
      }
    }
    if (parser_->is_done()) {
      dispatch();
      if (closed_) return false;
      continue;
    }
    if (used == 0) break;  // need more bytes
  }
  return !closed_;
}

bool Connection::check_framing() {
  if (auto error = check_request_framing(parser_->get())) {
    fail_request(*error);
    return false;
  }
  return true;
}

void Connection::dispatch() {
  bhttp::request<bhttp::string_body> message = parser_->release();
  new_parser();
  phase_ = ReadPhase::kIdle;
  idle_armed_ = false;
  clear_read_deadline();  // while answers are pending no read deadline runs; write_next() re-arms

  const bool message_keep_alive = message.keep_alive();
  Request request = to_request(std::move(message), address_);
  const bool head_only = request.method == "HEAD";

  const bool draining = server_->draining.load();
  const bool keep_alive = message_keep_alive && !draining;
  auto exchange = std::make_shared<ExchangeImpl>(shared_from_this(), server_->life, head_only, keep_alive);
  exchanges_.push_back(exchange);
  if (!keep_alive) read_closed_ = true;
  if (draining) {
    ++server_->stats.rejected_draining;
    Response r;
    r.status = 503;
    r.headers.push_back({"Retry-After", "1"});
    r.body = server_->options.error_body(503, "the server is shutting down");
    exchange->respond(std::move(r));
    return;
  }
  try {
    server_->handler.handle(std::move(request), exchange);
  } catch (const std::exception& e) {
    Response r;
    r.status = 500;
    r.body = server_->options.error_body(500, std::string("internal error: ") + e.what());
    exchange->respond(std::move(r));
  }
}

void Connection::fail_request(const FramingError& error) {
  std::atomic<std::int64_t>& counter = error.kind == FramingError::Kind::kHeaderTooLarge ? server_->stats.header_too_large
                                       : error.kind == FramingError::Kind::kBodyTooLarge ? server_->stats.body_too_large
                                                                                          : server_->stats.bad_request;
  fail_request(error.status, error.message, counter);
}

void Connection::fail_request(int status, const std::string& message, std::atomic<std::int64_t>& counter) {
  ++counter;
  clear_read_deadline();
  read_closed_ = true;
  phase_ = ReadPhase::kIdle;
  auto exchange = std::make_shared<ExchangeImpl>(shared_from_this(), server_->life, false, /*keep_alive=*/false);
  exchanges_.push_back(exchange);
  Response r;
  r.status = status;
  r.body = server_->options.error_body(status, message);
  exchange->respond(std::move(r));
}

void Connection::set_read_deadline(std::chrono::milliseconds d, ReadPhase phase) {
  phase_ = phase;
  const std::uint64_t generation = ++read_timer_generation_;
  read_timer_.expires_after(d);
  read_timer_.async_wait(asio::bind_executor(
      strand_, [self = shared_from_this(), generation](boost::system::error_code ec) {
        if (ec || generation != self->read_timer_generation_ || self->closed_) return;
        self->on_read_deadline();
      }));
}

void Connection::clear_read_deadline() {
  ++read_timer_generation_;
  read_timer_.cancel();
}

void Connection::on_read_deadline() {
  if (lingering_) return close();
  switch (phase_) {
    case ReadPhase::kIdle:
      if (exchanges_.empty() && !write_in_flight_) {
        ++server_->stats.idle_closed;
        close();
      }
      break;
    case ReadPhase::kHeader:
      if (buffer_.size() == 0 && exchanges_.empty()) {
        // Not a byte of a request arrived (Beast consumes nothing before the header is whole):
        // nothing to answer.
        ++server_->stats.header_timeout;
        close();
      } else {
        fail_request(408, "request header not received in time", server_->stats.header_timeout);
      }
      break;
    case ReadPhase::kBody:
      fail_request(408, "request body not received in time", server_->stats.body_timeout);
      break;
  }
}

void Connection::arm_idle_deadline() {
  if (idle_armed_ || closed_ || read_closed_ || phase_ != ReadPhase::kIdle || buffer_.size() > 0) return;
  idle_armed_ = true;
  set_read_deadline(options().idle_timeout, ReadPhase::kIdle);
}

void Connection::output_ready() {
  if (write_scheduled_ || closed_) return;
  write_scheduled_ = true;
  // Deferred, so that a handler answering inside handle() never re-enters the read path.
  asio::post(strand_, [self = shared_from_this()] {
    self->write_scheduled_ = false;
    self->write_next();
  });
}

void Connection::write_next() {
  if (write_in_flight_ || closed_ || lingering_) return;
  std::string out = std::move(control_);
  control_.clear();
  while (!exchanges_.empty()) {
    ExchangeImpl& front = *exchanges_.front();
    out += front.take_output();
    if (!front.complete()) break;
    const bool closes = front.closes_connection();
    exchanges_.pop_front();
    if (closes) {
      close_after_write_ = true;
      break;
    }
  }
  if (out.empty()) {
    if (close_after_write_ || (server_->draining && exchanges_.empty() && phase_ == ReadPhase::kIdle)) {
      return close_gracefully();
    }
    if (exchanges_.empty()) {
      // Reading may have paused at max_pipelined.
      if (parse_buffered()) read_more();
      if (exchanges_.empty()) arm_idle_deadline();
    }
    return;
  }
  writing_ = std::move(out);
  write_in_flight_ = true;
  write_timer_.expires_after(options().write_timeout);
  write_timer_.async_wait(asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
    if (ec || !self->write_in_flight_ || self->closed_) return;
    ++self->server_->stats.write_timeout;
    self->close();
  }));
  asio::async_write(socket_, asio::buffer(writing_),
                    asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec,
                                                                             std::size_t n) {
                      self->on_write(ec, n);
                    }));
}

void Connection::on_write(boost::system::error_code ec, std::size_t) {
  write_in_flight_ = false;
  write_timer_.cancel();
  if (closed_) return;
  if (ec) return close();
  writing_.clear();
  if (can_read_more()) {
    if (!parse_buffered()) return;
    read_more();
  }
  write_next();
}

void Connection::cut_slow_reader(ExchangeImpl*) {
  ++server_->stats.slow_reader;
  close();
}

void Connection::close_gracefully() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  read_closed_ = true;
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  ++read_timer_generation_;
  const std::uint64_t generation = read_timer_generation_;
  read_timer_.expires_after(kLingerTime);
  read_timer_.async_wait(asio::bind_executor(
      strand_, [self = shared_from_this(), generation](boost::system::error_code e) {
        if (e || generation != self->read_timer_generation_) return;
        self->close();
      }));
  read_more();
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  read_timer_.cancel();
  write_timer_.cancel();
  std::deque<std::shared_ptr<ExchangeImpl>> open = std::move(exchanges_);
  exchanges_.clear();
  for (auto& e : open) e->connection_closed();
}

}  // namespace kvstash::http
