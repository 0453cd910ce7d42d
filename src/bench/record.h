// What kvstash bench remembers about one request: when it started, when each piece of content
// arrived, the token counts the server reported, and how it failed if it did. Records are the
// raw data; every number of a Summary is computed from them (metrics.h), and --out writes them.
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvstash::bench {

// The error kinds a record can carry; "" means the request succeeded.
namespace error_kind {
inline constexpr const char* kConnect = "connect";            // no connection (refused, unreachable)
inline constexpr const char* kHttp4xx = "http_4xx";           // the server answered 400..499
inline constexpr const char* kHttp5xx = "http_5xx";           // the server answered 500..599
inline constexpr const char* kHttpOther = "http_other";       // any other non-200 status
inline constexpr const char* kTimeout = "timeout";            // no answer, or the stream stalled, within --timeout
inline constexpr const char* kMalformedSse = "malformed_sse";  // an event that is not a valid chunk
inline constexpr const char* kTruncated = "truncated";        // the stream ended before [DONE]
inline constexpr const char* kRead = "read";                  // the connection broke mid-response
inline constexpr const char* kServerError = "server_error";   // an {"error": ...} event in the stream
inline constexpr const char* kEmptyOutput = "empty_output";   // a finished stream with no content
inline constexpr const char* kOther = "other";                // anything else the HTTP client reported
}  // namespace error_kind

struct RequestRecord {
  std::int64_t index = 0;       // position in the order requests were sent
  std::int64_t session_id = 0;  // the workload session it belongs to
  std::string label;            // its session's traffic class (mixed: "stream", "arrival"); "" = none
  int round = 0;                // 0-based turn within its session (multi-turn rounds, agent steps)
  double start_s = 0;           // when it was sent, seconds after the measured run began
  double ttft_s = 0;            // to the first chunk with content; 0 when none arrived
  std::vector<double> itl_s;    // gaps between consecutive content chunks
  double e2e_s = 0;             // to the end of the response (or the error)
  std::int64_t prompt_tokens = 0;   // from usage; the local estimate when !usage_reported
  std::int64_t output_tokens = 0;   // from usage; the number of content chunks when !usage_reported
  std::int64_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens; -1 = not reported
  bool usage_reported = false;
  int http_status = 0;          // 0 when no response arrived
  std::string error;            // an error_kind, "" = ok
  std::string error_detail;     // a human-readable explanation
  std::string output_text;      // what the server generated (kept in memory, not written to --out)
  std::string worker;           // the x-kvstash-worker header (a kvstash router's choice); "" = none
  std::string cache;            // the x-kvstash-cache response header (hit, miss, bypass, ...); "" = none
  double ttfb_s = 0;            // to the response's status line and headers (its first byte)
  // Through a kvstash router: how long the router waited on the worker for its first byte (the
  // x-kvstash-upstream-ms header); -1 = not routed. ttfb_s - upstream_s is what the router added.
  double upstream_s = -1;

  bool ok() const { return error.empty(); }
};

}  // namespace kvstash::bench
