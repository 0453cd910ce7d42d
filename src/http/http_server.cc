// The listener, the connection registry (caps in total and per client address), the I/O threads
// and start/drain/stop. Connections live in connection.cc.
#include <boost/beast/http/status.hpp>

#include <cerrno>

#include "http/server_impl.h"

namespace kvstash::http {
namespace {

// Accepting again after running out of descriptors waits this long, so that a full table does
// not spin the listener.
constexpr std::chrono::milliseconds kAcceptRetry{50};
// stop(): how long queued answers get to go out before connections are cut, and the poll step.
constexpr std::chrono::milliseconds kStopFlush{2000};
constexpr std::chrono::milliseconds kStopPoll{10};

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string default_error_body(int, const std::string& message) {
  return "{\"error\":{\"message\":\"" + json_escape(message) + "\"}}";
}

}  // namespace

std::string_view Request::header(std::string_view name) const {
  for (const Header& h : headers) {
    if (beast::iequals(h.name, beast::string_view(name.data(), name.size()))) return h.value;
  }
  return {};
}

const char* reason_phrase(int status) {
  auto s = beast::http::obsolete_reason(static_cast<beast::http::status>(status));
  return s.empty() || s == "<unknown-status>" ? "" : s.data();
}

HttpServer::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(life->mutex);
    life->alive = false;
  }
  // Not under the guard's mutex: a queued handler may hold the last reference to a Connection,
  // whose destructor takes it.
  life->io.shutdown();
}

HttpServer::Impl::Admit HttpServer::Impl::admit(const std::string& address) {
  std::lock_guard<std::mutex> lock(mutex);
  if (open_count >= options.max_connections) return Admit::kTotal;
  int& mine = per_client[address];
  if (options.max_connections_per_client > 0 && mine >= options.max_connections_per_client) return Admit::kPerClient;
  ++mine;
  ++open_count;
  ++stats.connections_open;
  return Admit::kOk;
}

void HttpServer::Impl::track(const std::shared_ptr<Connection>& c) {
  std::lock_guard<std::mutex> lock(mutex);
  connections.emplace(c.get(), c);
}

void HttpServer::Impl::forget(Connection* c, const std::string& address) {
  std::lock_guard<std::mutex> lock(mutex);
  connections.erase(c);
  --open_count;
  --stats.connections_open;
  auto it = per_client.find(address);
  if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
}

std::vector<std::shared_ptr<Connection>> HttpServer::Impl::live_connections() {
  std::vector<std::shared_ptr<Connection>> out;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& [raw, weak] : connections) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

void HttpServer::Impl::accept_next() {
  acceptor.async_accept(asio::bind_executor(acceptor_strand, [this](boost::system::error_code ec, tcp::socket socket) {
    on_accept(ec, std::move(socket));
  }));
}

void HttpServer::Impl::reject(tcp::socket socket, const char* why) {
  // A fresh socket's send buffer takes this at once; the client reads it or not, then we close.
  auto s = std::make_shared<tcp::socket>(std::move(socket));
  Response r;
  r.status = 503;
  r.body = options.error_body(503, why);
  auto text = std::make_shared<std::string>(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n\r\n" + r.body);
  asio::async_write(*s, asio::buffer(*text), [s, text](boost::system::error_code, std::size_t) {
    boost::system::error_code ec;
    s->shutdown(tcp::socket::shutdown_both, ec);
    s->close(ec);
  });
}

void HttpServer::Impl::on_accept(boost::system::error_code ec, tcp::socket socket) {
  if (!acceptor.is_open() || ec == asio::error::operation_aborted) return;
  if (ec) {
    if (ec.value() == EMFILE || ec.value() == ENFILE || ec == asio::error::no_buffer_space) {
      retry_timer.expires_after(kAcceptRetry);
      retry_timer.async_wait(asio::bind_executor(acceptor_strand, [this](boost::system::error_code e) {
        if (!e && acceptor.is_open()) accept_next();
      }));
      return;
    }
    return accept_next();
  }
  boost::system::error_code addr_ec;
  const tcp::endpoint peer = socket.remote_endpoint(addr_ec);
  if (addr_ec) return accept_next();  // already gone
  socket.set_option(tcp::no_delay(true), addr_ec);
  if (options.socket_send_buffer > 0) socket.set_option(asio::socket_base::send_buffer_size(options.socket_send_buffer), addr_ec);
  const std::string address = peer.address().to_string();
  ++stats.connections_accepted;
  switch (admit(address)) {
    case Admit::kOk: {
      auto connection = std::make_shared<Connection>(this, std::move(socket), address);
      track(connection);
      connection->start();
      break;
    }
    case Admit::kTotal:
      ++stats.rejected_total_limit;
      reject(std::move(socket), "too many open connections; retry later");
      break;
    case Admit::kPerClient:
      ++stats.rejected_per_client_limit;
      reject(std::move(socket), "too many open connections from this address; retry later");
      break;
  }
  accept_next();
}

Expected<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options, Handler& handler) {
  if (options.io_threads < 1 || options.max_connections < 1 || options.max_pipelined < 1 || options.header_limit < 64) {
    return invalid_argument("http: io_threads, max_connections and max_pipelined must be >= 1, header_limit >= 64");
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>(options, handler);
  Impl& s = *server->impl_;
  if (!s.options.error_body) s.options.error_body = default_error_body;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec) return invalid_argument("http: bad listen address '" + options.host + "': " + ec.message());
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return io_error("cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " + ec.message());
  s.port = s.acceptor.local_endpoint().port();
  s.work.emplace(s.io.get_executor());
  asio::dispatch(s.acceptor_strand, [&s] { s.accept_next(); });
  for (int i = 0; i < options.io_threads; ++i) s.threads.emplace_back([&s] { s.io.run(); });
  return server;
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop_accepting() {
  Impl& s = *impl_;
  if (s.draining.exchange(true)) return;
  asio::post(s.acceptor_strand, [&s] {
    boost::system::error_code ec;
    s.acceptor.close(ec);
    s.retry_timer.cancel();
  });
  for (auto& c : s.live_connections()) c->drain_from_outside();
}

void HttpServer::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  stop_accepting();
  // Queued answers go out first (bounded), then every connection closes.
  for (auto& c : s.live_connections()) c->finish_from_outside();
  for (int i = 0; i < kStopFlush / kStopPoll && s.stats.connections_open.load() > 0; ++i) {
    std::this_thread::sleep_for(kStopPoll);
  }
  for (auto& c : s.live_connections()) c->close_from_outside();
  s.work.reset();
  // With every connection closed (their exchanges' close callbacks run, so handlers let go of
  // them) and the listener shut, the I/O threads run out of work and return. The io_context is
  // stopped by force only if that takes too long (bounded).
  for (int i = 0; i < kStopFlush / kStopPoll && !s.io.stopped(); ++i) std::this_thread::sleep_for(kStopPoll);
  s.io.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

HttpStats HttpServer::stats() const {
  const AtomicStats& a = impl_->stats;
  HttpStats out;
  out.connections_open = a.connections_open;
  out.connections_accepted = a.connections_accepted;
  out.rejected_total_limit = a.rejected_total_limit;
  out.rejected_per_client_limit = a.rejected_per_client_limit;
  out.rejected_draining = a.rejected_draining;
  out.bad_request = a.bad_request;
  out.header_too_large = a.header_too_large;
  out.body_too_large = a.body_too_large;
  out.header_timeout = a.header_timeout;
  out.body_timeout = a.body_timeout;
  out.idle_closed = a.idle_closed;
  out.write_timeout = a.write_timeout;
  out.slow_reader = a.slow_reader;
  return out;
}

std::string query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    if (part.size() > name.size() && part.substr(0, name.size()) == name && part[name.size()] == '=') {
      const std::string_view raw = part.substr(name.size() + 1);
      std::string out;
      for (std::size_t i = 0; i < raw.size(); ++i) {
        const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
        if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
          out += static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
          i += 2;
        } else {
          out += raw[i] == '+' ? ' ' : raw[i];
        }
      }
      return out;
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return "";
}

}  // namespace kvstash::http
