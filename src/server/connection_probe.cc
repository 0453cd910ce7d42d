#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kvstash::server {
namespace {

// The numeric address and port of a socket address, or false when it is not IPv4/IPv6.
bool to_numeric(const sockaddr_storage& addr, std::string& host, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    if (!inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf))) return false;
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    if (!inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf))) return false;
    port = ntohs(a.sin6_port);
  } else {
    return false;
  }
  host = buf;
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string host;
  int port = 0;
  // Non-sockets fail getsockname() with ENOTSOCK: cheap to skip.
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (!to_numeric(addr, host, port) || port != local_port || host != local_addr) return false;
  len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;  // a listener
  return to_numeric(addr, host, port) && port == remote_port && host == remote_addr;
}

}  // namespace

std::optional<ClientConnection> ClientConnection::find(const std::string& local_addr, int local_port,
                                                       const std::string& remote_addr, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return std::nullopt;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return std::nullopt;
  std::optional<ClientConnection> found;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    if (matches(static_cast<int>(fd), local_addr, local_port, remote_addr, remote_port)) {
      found = ClientConnection(static_cast<int>(fd));
      break;
    }
  }
  ::closedir(dir);
  return found;
}

bool ClientConnection::peer_closed() const {
  pollfd p{};
  p.fd = fd_;
  p.events = POLLIN;
  if (::poll(&p, 1, 0) <= 0) return false;  // nothing pending: still connected
  if (p.revents & (POLLERR | POLLNVAL)) return true;
  char byte;
  ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // pipelined bytes: the client is there
  if (n == 0) return true;  // end-of-file: the peer closed
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace kvstash::server
