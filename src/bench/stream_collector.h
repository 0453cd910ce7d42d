// Turns the bytes of one streamed (SSE) completion, with the times they arrived, into the timing
// and token fields of a RequestRecord. Kept apart from the HTTP client so that every path through
// it (content, usage, [DONE], error events, malformed data, a cut stream) is tested without a
// server.
//
// Thread safety: one collector per request, used from the thread that reads the response.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "bench/record.h"
#include "bench/sse.h"

namespace kvstash::bench {

class StreamCollector {
 public:
  using Clock = std::chrono::steady_clock;

  // `sent` is when the request left: TTFT and E2E are measured from it.
  explicit StreamCollector(Clock::time_point sent) : sent_(sent), last_content_(sent) {}

  // Feeds bytes that arrived at `now`. Returns false once the stream is known bad (malformed
  // data or an error event): the caller should stop reading; finish() reports why.
  bool on_bytes(std::string_view bytes, Clock::time_point now);

  // Fills ttft_s, itl_s, e2e_s, output tokens, usage and output_text of `record`, and its error
  // when the stream itself was bad: malformed_sse, server_error, truncated (no [DONE]) or
  // empty_output. prompt_tokens is set only from usage; the caller estimates it otherwise.
  void finish(RequestRecord& record, Clock::time_point end) const;

  bool saw_done() const { return done_; }
  bool failed() const { return !error_.empty(); }

 private:
  void on_event(const std::string& data, Clock::time_point now);

  Clock::time_point sent_;
  Clock::time_point last_content_;
  SseParser parser_;
  double ttft_s_ = 0;
  std::vector<double> itl_s_;
  std::int64_t content_chunks_ = 0;
  std::string text_;
  StreamChunk usage_;  // the last chunk that carried usage
  bool done_ = false;
  std::string error_;         // an error_kind
  std::string error_detail_;
};

}  // namespace kvstash::bench
