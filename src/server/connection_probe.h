// Tells whether the client of an HTTP request is still connected while its handler waits.
//
// cpp-httplib 0.11 (Debian bookworm) gives a handler no access to its connection (newer
// versions have Request::is_connection_closed()), so a non-streaming request whose client hung
// up would otherwise keep the engine busy until it finishes. ClientConnection finds the
// request's socket among the process's descriptors by its address pair (local and peer address
// and port, which name one TCP connection), then peeks at it: a peer that closed its side reads
// as end-of-file. A client that only half-closes (shutdown(SHUT_WR)) after sending its request
// reads the same and is taken as gone, as other servers do.
//
// Thread safety: find() from any thread; one ClientConnection is used by one thread (the
// request's handler), which keeps the descriptor open for as long as it runs.
#pragma once

#include <optional>
#include <string>

namespace kvstash::server {

class ClientConnection {
 public:
  // The connected TCP socket whose local end is local_addr:local_port and whose peer is
  // remote_addr:remote_port (IPv4 or IPv6 numeric addresses, as httplib writes them), or
  // nullopt when no descriptor of this process matches (the probe is then unavailable and
  // callers carry on without it).
  static std::optional<ClientConnection> find(const std::string& local_addr, int local_port,
                                              const std::string& remote_addr, int remote_port);
  // Wraps a descriptor the caller knows (tests).
  explicit ClientConnection(int fd) : fd_(fd) {}

  // True when the peer has closed (end-of-file pending, or a socket error such as a reset).
  // Never blocks and never consumes data: bytes a client pipelined stay for httplib to read.
  bool peer_closed() const;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;  // not owned: httplib closes it after the response
};

}  // namespace kvstash::server
