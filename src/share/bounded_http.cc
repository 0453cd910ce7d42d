#include "share/bounded_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <optional>
#include <mutex>
#include <thread>

namespace kvstash::share {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kPiece = 64 << 10;  // bytes read at once
constexpr int kMaxResolving = 16;          // host-name lookups running at once (see resolve())

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// One request's socket and accounting: every wait is bounded by the deadline, every byte read
// counts against the cap.
class Wire {
 public:
  Wire(Clock::time_point deadline, std::uint64_t max_bytes) : deadline_(deadline), max_bytes_(max_bytes) {}
  ~Wire() {
    if (fd_ >= 0) ::close(fd_);
  }

  BoundedEnd end = BoundedEnd::kError;
  std::string why;

  bool connect(const std::string& host, int port) {
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (!resolve(host, port, &addr, &len)) return false;
    fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return fail("socket: " + std::string(std::strerror(errno)));
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
      if (errno != EINPROGRESS) return fail("connect: " + std::string(std::strerror(errno)));
      if (!wait(POLLOUT)) return false;
      int err = 0;
      socklen_t err_len = sizeof err;
      ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &err_len);
      if (err != 0) return fail("connect: " + std::string(std::strerror(err)));
    }
    return true;
  }

  bool send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail("send: " + std::string(std::strerror(errno)));
      }
      if (!wait(POLLOUT)) return false;
    }
    return true;
  }

  // Appends what the peer sends next (at most one piece, never past the cap) to `in`; false at
  // the end of the stream (eof set), the deadline, the cap or an error.
  bool read_more(cache::Bytes& in) {
    // Checked on every call, not only when recv would block: a peer that keeps data flowing (a
    // body of one-byte chunks) must not outlast the deadline either.
    if (Clock::now() >= deadline_) return deadline_passed();
    if (read_ >= max_bytes_) return cap();
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, max_bytes_ - read_));
    for (;;) {
      const std::size_t old = in.size();
      in.resize(old + want);
      const ssize_t n = ::recv(fd_, in.data() + old, want, 0);
      in.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
      if (n > 0) {
        read_ += static_cast<std::uint64_t>(n);
        return true;
      }
      if (n == 0) {
        eof = true;
        return fail("connection closed");
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return fail("recv: " + std::string(std::strerror(errno)));
      if (!wait(POLLIN)) return false;
    }
  }

  std::uint64_t left() const { return max_bytes_ - std::min(read_, max_bytes_); }
  bool cap() {
    end = BoundedEnd::kCap;
    why = "answer larger than " + std::to_string(max_bytes_) + " bytes";
    return false;
  }
  bool fail(std::string message) {
    end = BoundedEnd::kError;
    why = std::move(message);
    return false;
  }
  bool eof = false;

 private:
  bool deadline_passed() {
    end = BoundedEnd::kDeadline;
    why = "deadline passed";
    return false;
  }
  bool wait(short events) {
    for (;;) {
      const auto now = Clock::now();
      if (now >= deadline_) return deadline_passed();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now).count() + 1;
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(ms, 60000)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return fail("poll: " + std::string(std::strerror(errno)));
    }
  }
  // A numeric address at once; a name through getaddrinfo on a thread of its own, waited for
  // until the deadline (getaddrinfo itself has no timeout).
  bool resolve(const std::string& host, int port, sockaddr_storage* addr, socklen_t* len) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const std::string service = std::to_string(port);
    addrinfo* found = nullptr;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) == 0 && found) {
      std::memcpy(addr, found->ai_addr, found->ai_addrlen);
      *len = found->ai_addrlen;
      ::freeaddrinfo(found);
      return true;
    }
    struct Lookup {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      sockaddr_storage addr{};
      socklen_t len = 0;
    };
    // getaddrinfo cannot be cancelled, so a name runs on a thread of its own that may outlive the
    // deadline. Host names come from DHT values anyone can write: with a DNS server that never
    // answers, those threads would pile up. At most kMaxResolving run at once; more fail at once.
    static std::atomic<int> resolving{0};
    if (resolving.fetch_add(1, std::memory_order_relaxed) >= kMaxResolving) {
      resolving.fetch_sub(1, std::memory_order_relaxed);
      return fail("cannot resolve " + host + ": " + std::to_string(kMaxResolving) + " name lookups already running");
    }
    auto lookup = std::make_shared<Lookup>();
    std::thread([lookup, host, service] {
      struct Done {
        ~Done() { resolving.fetch_sub(1, std::memory_order_relaxed); }
      } done;
      addrinfo h{};
      h.ai_family = AF_UNSPEC;
      h.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      const bool ok = ::getaddrinfo(host.c_str(), service.c_str(), &h, &res) == 0 && res;
      std::lock_guard lock(lookup->mu);
      if (ok) {
        std::memcpy(&lookup->addr, res->ai_addr, res->ai_addrlen);
        lookup->len = res->ai_addrlen;
      }
      if (res) ::freeaddrinfo(res);
      lookup->done = true;
      lookup->cv.notify_all();
    }).detach();
    std::unique_lock lock(lookup->mu);
    if (!lookup->cv.wait_until(lock, deadline_, [&] { return lookup->done; })) return deadline_passed();
    if (lookup->len == 0) return fail("cannot resolve " + host);
    *addr = lookup->addr;
    *len = lookup->len;
    return true;
  }

  const Clock::time_point deadline_;
  const std::uint64_t max_bytes_;
  std::uint64_t read_ = 0;
  int fd_ = -1;
};

// Parses a hex chunk-size line's value; -1 when malformed.
long long chunk_size(std::string_view line) {
  const auto semi = line.find(';');
  line = trim(line.substr(0, semi));
  if (line.empty() || line.size() > 15) return -1;
  long long n = 0;
  for (char c : line) {
    const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                              : -1;
    if (d < 0) return -1;
    n = n * 16 + d;
  }
  return n;
}

}  // namespace

std::string BoundedAnswer::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

Expected<BoundedAnswer> bounded_request(const BoundedCall& call, BoundedEnd* end) {
  Wire wire(call.deadline, call.max_bytes);
  auto failed = [&]() -> Expected<BoundedAnswer> {
    if (end) *end = wire.end;
    return unavailable(wire.why);
  };
  if (!wire.connect(call.host, call.port)) return failed();
  std::string request = call.method + " " + call.target + " HTTP/1.1\r\nHost: " + call.host + ":" +
                        std::to_string(call.port) + "\r\nConnection: close\r\n";
  for (const auto& [name, value] : call.headers) request += name + ": " + value + "\r\n";
  if (!call.body.empty() || call.method == "PUT" || call.method == "POST") {
    request += "Content-Length: " + std::to_string(call.body.size()) + "\r\n";
  }
  request += "\r\n";
  if (!wire.send_all(request) || !wire.send_all(call.body)) return failed();

  // The head: up to the blank line.
  cache::Bytes in;
  std::size_t head_end = 0;
  for (std::size_t scanned = 0;;) {
    const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
    const auto at = text.find("\r\n\r\n", scanned > 3 ? scanned - 3 : 0);
    if (at != std::string_view::npos) {
      head_end = at + 4;
      break;
    }
    scanned = in.size();
    if (!wire.read_more(in)) return failed();
  }
  BoundedAnswer answer;
  {
    const std::string_view head(reinterpret_cast<const char*>(in.data()), head_end - 4);
    const auto first_end = head.find("\r\n");
    const std::string_view status_line = head.substr(0, first_end);
    if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12) {
      wire.fail("not an HTTP/1.x answer");
      return failed();
    }
    answer.status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
    std::string_view rest = first_end == std::string_view::npos ? std::string_view{} : head.substr(first_end + 2);
    while (!rest.empty()) {
      const auto eol = rest.find("\r\n");
      const std::string_view line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 2);
      const auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      answer.headers.emplace_back(lower(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
    }
  }
  if (end) *end = BoundedEnd::kAnswered;
  if (answer.status < 200 || answer.status >= 300 || call.method == "HEAD") return answer;

  // The body, by its framing; `in` keeps what came after the head.
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(head_end));
  const std::string encoding = lower(answer.header("transfer-encoding"));
  const std::string length_text = answer.header("content-length");
  if (encoding.find("chunked") != std::string::npos) {
    // Decoded in place: the data of each chunk moves forward to `out` (output never longer than
    // input, and `in` never holds more than the capped bytes read), read at `pos`; nothing is
    // erased until the end, so each byte moves once.
    std::size_t out = 0, pos = 0;
    // A chunk-size line (size and extensions) longer than this is refused: scanning it again after
    // every read would cost time quadratic in its length.
    constexpr std::size_t kMaxChunkLine = 4096;
    auto line_at = [&](std::size_t from, std::size_t* next) -> std::optional<std::string_view> {
      std::size_t search = from;
      for (;;) {
        const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
        const auto eol = text.find("\r\n", search);
        if (eol != std::string_view::npos) {
          *next = eol + 2;
          return text.substr(from, eol - from);
        }
        if (in.size() - from > kMaxChunkLine) {
          wire.fail("chunk size line longer than " + std::to_string(kMaxChunkLine) + " bytes");
          return std::nullopt;
        }
        search = in.size() > from ? in.size() - 1 : from;  // a CR may end what came so far
        if (!wire.read_more(in)) return std::nullopt;
      }
    };
    for (;;) {
      std::size_t next = 0;
      auto line = line_at(pos, &next);
      if (!line) return failed();
      const long long n = chunk_size(*line);
      if (n < 0) {
        wire.fail("bad chunk size");
        return failed();
      }
      if (static_cast<std::uint64_t>(n) > wire.left() + (in.size() - next)) {
        wire.cap();
        return failed();
      }
      if (n == 0) break;  // trailers, if any, are not read
      while (in.size() < next + static_cast<std::size_t>(n) + 2) {
        if (!wire.read_more(in)) return failed();
      }
      std::memmove(in.data() + out, in.data() + next, static_cast<std::size_t>(n));
      out += static_cast<std::size_t>(n);
      pos = next + static_cast<std::size_t>(n) + 2;
    }
    in.resize(out);
  } else if (!length_text.empty()) {
    char* stop = nullptr;
    const unsigned long long n = std::strtoull(length_text.c_str(), &stop, 10);
    if (stop == length_text.c_str() || *stop != '\0') {
      wire.fail("bad Content-Length");
      return failed();
    }
    if (n > in.size() + wire.left()) {
      wire.cap();
      return failed();
    }
    in.reserve(static_cast<std::size_t>(n));
    while (in.size() < n) {
      if (!wire.read_more(in)) return failed();
    }
    in.resize(static_cast<std::size_t>(n));
  } else {
    // Delimited by the end of the connection.
    while (wire.read_more(in)) {
    }
    if (!wire.eof) return failed();
  }
  answer.body = std::move(in);
  return answer;
}

}  // namespace kvstash::share
