// One HTTP/1.1 request to a peer with a single wall-clock deadline and a single byte cap (the
// peer client's wire, share/peer_client.h). The deadline covers resolving the host, connecting,
// sending the request and reading the whole answer; the cap covers every byte read, the status
// line and headers included. Either one passed ends the request at once (socket closed): nothing
// past the cap is buffered (an answer is read in pieces of at most 64 KiB, and a Content-Length
// above what is left of the cap is refused before its body is read).
//
// Not cpp-httplib: its timeouts are per read, so a peer sending one byte per read timeout holds a
// request forever. Not http/upstream.h: that client runs on an HttpServer's strand, while peer
// fetches run on the store's plain threads.
//
// Thread safety: bounded_request() is a pure function of its arguments; call it from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/chunk_codec.h"
#include "kvstash/status.h"

namespace kvstash::share {

struct BoundedAnswer {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  cache::Bytes body;  // empty unless status is 2xx
  std::string header(std::string_view lower_name) const;  // "" when absent
};

// How a request ended when it did not get an answer.
enum class BoundedEnd { kAnswered, kDeadline, kCap, kError };

struct BoundedCall {
  std::string host;
  int port = 0;
  std::string method;  // "GET", "PUT"
  std::string target;  // path
  std::vector<std::pair<std::string, std::string>> headers;  // sent as given
  std::string_view body;                                     // sent with a Content-Length when non-empty or PUT
  std::chrono::steady_clock::time_point deadline;
  std::uint64_t max_bytes = 0;
};

// The answer (any status; the body is read only for 2xx), or kUnavailable with `end` saying why
// (deadline, cap, connection error or a malformed answer).
Expected<BoundedAnswer> bounded_request(const BoundedCall& call, BoundedEnd* end);

}  // namespace kvstash::share
