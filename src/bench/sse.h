// Server-sent events as OpenAI-compatible servers stream them, and the chunk JSON they carry.
//
// SseParser splits a byte stream (arriving in arbitrary pieces) into events per the WHATWG
// event-stream rules that matter here: lines end in \n, \r\n or \r; "data:" lines of one event
// are joined with \n; a blank line ends the event; ":" comments and other fields are ignored.
// parse_stream_chunk then reads one event's data: "[DONE]", a chat or completions chunk, a usage
// chunk, or an {"error": ...} object.
//
// Thread safety: an SseParser is used by one request on one thread; parse_stream_chunk is pure.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "kvstash/status.h"

namespace kvstash::bench {

class SseParser {
 public:
  // Parses `bytes` and calls on_data(data) for every event completed by them, in order.
  void feed(std::string_view bytes, const std::function<void(const std::string& data)>& on_data);
  // True when bytes of an unfinished line or event are buffered (a stream that ends here was cut).
  bool has_partial_event() const { return !line_.empty() || has_data_; }

 private:
  void end_line(const std::function<void(const std::string&)>& on_data);

  std::string line_;     // the current, unterminated line
  std::string data_;     // data of the current event so far
  bool has_data_ = false;
  bool last_was_cr_ = false;  // a \r ended the previous line; a \n right after it is the same end
};

struct StreamChunk {
  bool done = false;             // the "[DONE]" sentinel
  std::string content;           // generated text in this chunk (may be empty)
  std::string finish_reason;     // "stop", "length", ... or ""
  bool has_usage = false;        // a usage object was present
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens; -1 = not reported
  std::string error;             // the message of an {"error": ...} event; "" = none
};

// Parses one event's data. kCorrupt when it is neither "[DONE]" nor a JSON object of the
// expected shape (a chunk must have "choices" as an array, or "usage", or "error").
Expected<StreamChunk> parse_stream_chunk(const std::string& data);

}  // namespace kvstash::bench
