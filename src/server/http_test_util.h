// Helpers for the server's HTTP tests: SSE body parsing, OpenAI error checks, and a raw-socket
// client that can hang up in the middle of a request.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/server.h"

namespace kvstash::server::testing {

using nlohmann::json;

// OpenAI requires `model` in generation requests; tests that are not about it name the served
// model through this. A body that is not a JSON object, or already names a model, is sent as written.
// The field goes in as text, in front: the rest keeps its key order (a schema's property order is
// the order of generation, and json would sort it).
inline std::string naming_model(const std::string& body, const std::string& model) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.contains("model")) return body;
  const std::size_t open = body.find('{');
  const std::string field = "\"model\":" + json(model).dump();
  return body.substr(0, open + 1) + field + (j.empty() ? "" : ",") + body.substr(open + 1);
}

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

// One HTTP/1.1 POST sent on a raw socket that the test can read from and hang up on at a
// moment it chooses (httplib's client cannot close in the middle of a request).
class RawRequest {
 public:
  RawRequest(int port, const std::string& path, const std::string& body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout{30, 0};  // bounds every read: a server that never answers fails the test
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      hang_up();
      return;
    }
    std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ::send(fd_, request.data(), request.size(), MSG_NOSIGNAL);
  }
  ~RawRequest() { hang_up(); }
  RawRequest(const RawRequest&) = delete;
  RawRequest& operator=(const RawRequest&) = delete;

  // Reads until at least `min_bytes` of the response arrived in all (or the server closed);
  // returns everything read so far.
  const std::string& read_at_least(std::size_t min_bytes) {
    char buf[4096];
    while (fd_ >= 0 && got_.size() < min_bytes) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got_.append(buf, static_cast<std::size_t>(n));
    }
    return got_;
  }
  void hang_up() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string got_;
};

// Sends a POST, reads at least `min_bytes` of the response, then hangs up. Returns what it read.
inline std::string post_and_hang_up(int port, const std::string& path, const std::string& body,
                                    std::size_t min_bytes) {
  RawRequest request(port, path, body);
  return request.read_at_least(min_bytes);
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
