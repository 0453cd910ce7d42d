// Helpers for the server's HTTP tests: an in-process server on a free loopback port, SSE body
// parsing, and a raw-socket client that can hang up in the middle of a stream.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/server.h"

namespace kvstash::server::testing {

using nlohmann::json;

// Splits an SSE body into its `data:` payloads; "[DONE]" is kept as the string "[DONE]".
inline std::vector<json> parse_sse(const std::string& body, bool* saw_done) {
  std::vector<json> events;
  *saw_done = false;
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) != 0) continue;
    std::string data = event.substr(6);
    if (data == "[DONE]") {
      *saw_done = true;
      continue;
    }
    events.push_back(json::parse(data));
  }
  return events;
}

// Sends one HTTP/1.1 POST on a raw socket, reads at least `min_bytes` of the response (or
// until the server closes), then closes the connection. Returns what it read.
inline std::string post_and_hang_up(int port, const std::string& path, const std::string& body,
                                    std::size_t min_bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  while (got.size() < min_bytes) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

// Asserts an OpenAI-style error body with the given status and a message containing `mentions`.
inline void expect_api_error(const httplib::Result& r, int status, const std::string& mentions) {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << r->body;
  ASSERT_TRUE(body.contains("error")) << r->body;
  EXPECT_TRUE(body["error"]["message"].is_string());
  EXPECT_TRUE(body["error"]["type"].is_string());
  EXPECT_TRUE(body["error"].contains("param"));
  EXPECT_TRUE(body["error"].contains("code"));
  EXPECT_NE(body["error"]["message"].get<std::string>().find(mentions), std::string::npos) << r->body;
}

}  // namespace kvstash::server::testing
