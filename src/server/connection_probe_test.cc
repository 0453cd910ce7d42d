// ClientConnection on real loopback TCP connections.
#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return rc == 0 ? ntohs(a.sin_port) : -1;
}

// A listener, a client connected to it and the accepted server end, all on 127.0.0.1.
struct LoopbackPair {
  int listener = -1, client = -1, server = -1;
  LoopbackPair() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(listener, 4), 0);
    a.sin_port = htons(static_cast<uint16_t>(port_of(listener, false)));
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    server = ::accept(listener, nullptr, nullptr);
    EXPECT_GE(server, 0);
  }
  ~LoopbackPair() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

TEST(ClientConnection, FindsTheAcceptedSocketByItsAddressPair) {
  LoopbackPair p;
  auto found = ClientConnection::find("127.0.0.1", port_of(p.server, false), "127.0.0.1", port_of(p.server, true));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->fd(), p.server);
  // The client's end has the mirrored pair.
  auto mirrored = ClientConnection::find("127.0.0.1", port_of(p.client, false), "127.0.0.1", port_of(p.client, true));
  ASSERT_TRUE(mirrored.has_value());
  EXPECT_EQ(mirrored->fd(), p.client);
  // The listener has no peer, and a wrong peer port names no connection.
  EXPECT_FALSE(ClientConnection::find("127.0.0.1", port_of(p.server, false), "127.0.0.1", 1).has_value());
  EXPECT_FALSE(ClientConnection::find("10.1.2.3", port_of(p.server, false), "127.0.0.1", port_of(p.server, true)));
  EXPECT_FALSE(ClientConnection::find("127.0.0.1", -1, "127.0.0.1", -1).has_value());
}

TEST(ClientConnection, SeesThePeerCloseWithoutConsumingData) {
  LoopbackPair p;
  ClientConnection conn(p.server);
  EXPECT_FALSE(conn.peer_closed());
  ASSERT_EQ(::send(p.client, "xy", 2, 0), 2);
  EXPECT_FALSE(conn.peer_closed());  // pending bytes are not a hang-up
  EXPECT_FALSE(conn.peer_closed());
  char buf[4] = {};
  ASSERT_EQ(::recv(p.server, buf, sizeof(buf), 0), 2);  // both bytes still there
  EXPECT_EQ(std::string(buf, 2), "xy");
  ::close(p.client);
  p.client = -1;
  EXPECT_TRUE(conn.peer_closed());
}

}  // namespace
}  // namespace kvstash::server
