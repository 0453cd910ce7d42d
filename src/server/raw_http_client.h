// For tests: a raw HTTP/1.1 client on a loopback socket that sends exactly the bytes a test gives
// (malformed framing, half headers, pipelined requests) and reads answers one by one (by
// Content-Length or chunked framing) or until the server closes. Every read is bounded by a
// receive timeout, so a server that never answers fails the test instead of hanging it.
//
// Thread safety: one thread per RawHttpClient.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace kvstash::server::testing {

struct RawResponse {
  int status = 0;            // 0 = no answer (closed or timed out)
  std::string head;          // status line and headers
  std::string body;          // de-chunked
  bool closed_after = false; // the server closed right after this answer (filled by read_until_closed)
  std::string header(const std::string& name) const {
    std::string lower_head, lower_name = name;
    for (char c : head) lower_head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : lower_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto at = lower_head.find("\r\n" + lower_name + ":");
    if (at == std::string::npos) return "";
    auto start = at + 3 + name.size();
    while (start < head.size() && head[start] == ' ') ++start;
    return head.substr(start, head.find("\r\n", start) - start);
  }
};

class RawHttpClient {
 public:
  // receive_buffer > 0 sets SO_RCVBUF before connecting (a reader that holds little).
  explicit RawHttpClient(int port, int timeout_s = 20, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout{timeout_s, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) close();
  }
  ~RawHttpClient() { close(); }
  RawHttpClient(const RawHttpClient&) = delete;
  RawHttpClient& operator=(const RawHttpClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Sends all of `bytes`; false when the connection is gone.
  bool send(const std::string& bytes) {
    std::size_t sent = 0;
    while (fd_ >= 0 && sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return fd_ >= 0;
  }
  // Reads the next answer (skipping "100 Continue"); status 0 when none came.
  RawResponse read_response() {
    for (;;) {
      RawResponse r = read_one();
      if (r.status != 100) return r;
    }
  }
  // True when the server has closed: a read returns end-of-file (or a reset) before the timeout.
  bool closed_by_server() {
    if (!buffer_.empty()) return false;
    return !fill();
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }

  static std::string post(const std::string& path, const std::string& body,
                          const std::string& extra_headers = "Content-Type: application/json\r\n") {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  static std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"; }

 private:
  bool fill() {
    if (fd_ < 0) return false;
    char buf[16384];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  // Takes `n` bytes or a line from buffer_, reading as needed.
  bool take_line(std::string& line) {
    std::size_t at;
    while ((at = buffer_.find("\r\n")) == std::string::npos) {
      if (!fill()) return false;
    }
    line = buffer_.substr(0, at);
    buffer_.erase(0, at + 2);
    return true;
  }
  bool take(std::size_t n, std::string& out) {
    while (buffer_.size() < n) {
      if (!fill()) return false;
    }
    out += buffer_.substr(0, n);
    buffer_.erase(0, n);
    return true;
  }
  RawResponse read_one() {
    RawResponse r;
    std::string line;
    if (!take_line(line)) return r;
    r.head = line;
    while (take_line(line) && !line.empty()) r.head += "\r\n" + line;
    if (line.size() > 0) return r;
    r.head += "\r\n";
    if (r.head.size() > 12) r.status = std::atoi(r.head.c_str() + 9);
    if (r.status == 100 || r.status == 204) return r;
    if (r.header("Transfer-Encoding") == "chunked") {
      for (;;) {
        if (!take_line(line)) return r;
        const std::size_t size = std::strtoul(line.c_str(), nullptr, 16);
        if (size == 0) {
          take_line(line);
          return r;
        }
        if (!take(size, r.body) || !take_line(line)) return r;
      }
    }
    take(std::strtoul(r.header("Content-Length").c_str(), nullptr, 10), r.body);
    return r;
  }

  int fd_ = -1;
  std::string buffer_;
};

}  // namespace kvstash::server::testing
