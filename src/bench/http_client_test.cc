#include "bench/http_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace kvstash::bench {
namespace {

TEST(ParseUrlTest, AcceptsHostPortAndPrefixes) {
  auto e = parse_url("http://127.0.0.1:8080");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->scheme_host_port, "http://127.0.0.1:8080");
  EXPECT_EQ(e->base_path, "");
  e = parse_url("http://host:9/v1/");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->base_path, "");
  e = parse_url("https://host/proxy/");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->scheme_host_port, "https://host");
  EXPECT_EQ(e->base_path, "/proxy");
  for (const char* bad : {"", "127.0.0.1:80", "ftp://x", "http://", "http://:80"}) {
    EXPECT_FALSE(parse_url(bad).has_value()) << bad;
  }
}

TEST(RequestBodyTest, ChatAndCompletions) {
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi?"}};
  ClientOptions options;
  options.model = "tiny";
  options.ignore_eos = true;
  OpenAiClient chat(*parse_url("http://127.0.0.1:1"), options);
  const auto body = nlohmann::json::parse(chat.request_body(messages, 12));
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["max_tokens"], 12);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  ASSERT_EQ(body["messages"].size(), 2u);
  EXPECT_EQ(body["messages"][1]["content"], "Hi?");
  EXPECT_FALSE(body.contains("prompt_cache_key"));
  EXPECT_EQ(nlohmann::json::parse(chat.request_body(messages, 12, "user-7"))["prompt_cache_key"], "user-7");

  options.api = "completions";
  options.ignore_eos = false;
  OpenAiClient completions(*parse_url("http://127.0.0.1:1"), options);
  const auto body2 = nlohmann::json::parse(completions.request_body(messages, 3));
  EXPECT_EQ(body2["prompt"], "Be brief.\n\nHi?");
  EXPECT_FALSE(body2.contains("messages"));
  EXPECT_FALSE(body2.contains("ignore_eos"));
}

TEST(OpenAiClientTest, UnreachableServerIsAConnectErrorRecord) {
  // Port 1 on loopback: nothing listens there, the connection is refused at once.
  ClientOptions options;
  options.timeout_s = 5;
  OpenAiClient client(*parse_url("http://127.0.0.1:1"), options);
  const auto start = std::chrono::steady_clock::now();
  const RequestRecord r = client.stream({{"user", "hello"}}, 4, start);
  EXPECT_EQ(r.error, error_kind::kConnect) << r.error_detail;
  EXPECT_EQ(r.http_status, 0);
  EXPECT_GT(r.prompt_tokens, 0);  // estimated locally
  EXPECT_FALSE(client.first_model().has_value());
  EXPECT_EQ(client.first_model().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvstash::bench

namespace kvstash::bench {
namespace {

// Fault injection at the socket level (not an OpenAI server): a listener that answers every
// connection with `response` and then either closes or holds the connection open silently.
class RawSocketServer {
 public:
  RawSocketServer(std::string response, bool stall) : response_(std::move(response)), stall_(stall) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 4);
    thread_ = std::thread([this] { serve_one(); });
  }
  ~RawSocketServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve_one() {
    const int client = accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    char buffer[4096];
    (void)!read(client, buffer, sizeof buffer);  // the request; its content does not matter
    (void)!write(client, response_.data(), response_.size());
    if (!stall_) {
      // End our side, then read what is left of the request until the client closes: closing with
      // unread bytes would send a reset, which the client may see before our data (a flaky
      // "read" error instead of the truncation the test expects).
      shutdown(client, SHUT_WR);
    }
    // Stall: hold the connection until the client gives up and closes it.
    timeval limit{10, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    while (read(client, buffer, sizeof buffer) > 0) {
    }
    close(client);
  }

  std::string response_;
  bool stall_;
  int fd_;
  int port_ = 0;
  std::thread thread_;
};

const char* kSseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

RequestRecord one_request(const std::string& url, double timeout_s) {
  ClientOptions options;
  options.timeout_s = timeout_s;
  OpenAiClient client(*parse_url(url), options);
  return client.stream({{"user", "hello"}}, 4, std::chrono::steady_clock::now());
}

TEST(OpenAiClientFaultTest, StalledStreamIsATimeout) {
  RawSocketServer server(std::string(kSseHead) + "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
                         /*stall=*/true);
  const RequestRecord r = one_request(server.url(), 1.0);
  EXPECT_EQ(r.error, error_kind::kTimeout) << r.error_detail;
  EXPECT_EQ(r.http_status, 200);
  EXPECT_GT(r.ttft_s, 0);  // the first chunk did arrive
}

TEST(OpenAiClientFaultTest, ServerErrorStatusIsHttp5xx) {
  RawSocketServer server(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 21\r\n"
      "Connection: close\r\n\r\n{\"error\":{\"m\":\"x\"}}\n\n",
      /*stall=*/false);
  const RequestRecord r = one_request(server.url(), 5.0);
  EXPECT_EQ(r.error, error_kind::kHttp5xx) << r.error_detail;
  EXPECT_EQ(r.http_status, 503);
}

TEST(OpenAiClientFaultTest, MalformedSseOverTheWire) {
  RawSocketServer server(std::string(kSseHead) + "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
                             "data: <html>oops</html>\n\n",
                         /*stall=*/false);
  const RequestRecord r = one_request(server.url(), 5.0);
  EXPECT_EQ(r.error, error_kind::kMalformedSse) << r.error_detail;
}

TEST(OpenAiClientFaultTest, StreamCutBeforeDoneIsTruncated) {
  RawSocketServer server(std::string(kSseHead) + "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
                         /*stall=*/false);
  const RequestRecord r = one_request(server.url(), 5.0);
  EXPECT_EQ(r.error, error_kind::kTruncated) << r.error_detail;
}

// A server that answers one request per connection as keep-alive (no "Connection: close"), then
// takes the next request and closes without a byte of answer, as a server that ends keep-alive
// connections early does when the close crosses the client's next request.
class EarlyCloser {
 public:
  explicit EarlyCloser(int connections) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 4);
    thread_ = std::thread([this, connections] {
      const std::string body = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n";
      const std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body;
      for (int i = 0; i < connections; ++i) {
        const int client = accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        // The whole first request, however many reads it takes (on a loaded machine its body can
        // come after the first read; a close then would land before the client's next request).
        if (!read_request(client)) {
          close(client);
          continue;
        }
        (void)!write(client, answer.data(), answer.size());
        char buffer[4096];
        (void)!read(client, buffer, sizeof buffer);  // the next request: dropped
        close(client);
      }
    });
  }
  ~EarlyCloser() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  // Reads one request: the head up to its blank line, then Content-Length bytes of body.
  static bool read_request(int client) {
    std::string got;
    char buffer[4096];
    std::size_t head_end = std::string::npos;
    std::size_t body_bytes = 0;
    for (;;) {
      if (head_end == std::string::npos) {
        head_end = got.find("\r\n\r\n");
        if (head_end != std::string::npos) {
          head_end += 4;
          std::string head = got.substr(0, head_end);
          for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          const std::size_t at = head.find("content-length:");
          if (at != std::string::npos) body_bytes = std::strtoul(head.c_str() + at + 15, nullptr, 10);
        }
      }
      if (head_end != std::string::npos && got.size() >= head_end + body_bytes) return true;
      const ssize_t n = read(client, buffer, sizeof buffer);
      if (n <= 0) return false;
      got.append(buffer, static_cast<std::size_t>(n));
    }
  }

  int fd_;
  int port_ = 0;
  std::thread thread_;
};

TEST(OpenAiClientFaultTest, KeepAliveClosedEarlyIsRetriedNotAnError) {
  constexpr int kRequests = 4;
  EarlyCloser server(kRequests + 1);
  ClientOptions options;
  options.timeout_s = 5;
  OpenAiClient client(*parse_url(server.url()), options);
  for (int i = 0; i < kRequests; ++i) {
    const RequestRecord r = client.stream({{"user", "hello"}}, 4, std::chrono::steady_clock::now());
    EXPECT_EQ(r.error, "") << "request " << i << ": " << r.error_detail;
    EXPECT_EQ(r.http_status, 200);
  }
  EXPECT_GE(client.retries(), 1);  // the dropped requests were sent again, none was lost
}

}  // namespace
}  // namespace kvstash::bench
