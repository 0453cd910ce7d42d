// Turns a stream of generated tokens' bytes into text that is safe to send: never a broken
// UTF-8 character (a character split across tokens waits for its last byte), and never any part
// of a stop string (text that may be the start of one is held back until it is decided).
//
// Usage: push() each token's bytes and send what it returns; once stopped() is true, end the
// request (cancel the engine's side) and send nothing more; when generation ends without a stop
// string, send finish().
//
// Thread safety: not thread-safe; one request's thread owns it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvstash::server {

class TextStream {
 public:
  // `stop`: strings that end the output (not included in it); empty strings are ignored.
  explicit TextStream(std::vector<std::string> stop = {});

  // Adds one token's bytes and returns the text that can be sent now (possibly "").
  std::string push(std::string_view bytes);
  // Ends the stream: returns everything still held (an incomplete character becomes U+FFFD).
  // Returns "" after a stop string matched.
  std::string finish();

  bool stopped() const { return stopped_; }
  // Total bytes returned so far (offset of the next text), for completions' text_offset.
  std::size_t emitted_bytes() const { return emitted_bytes_; }
  // Offset in the output text at which the next push()'s bytes will start.
  std::size_t next_offset() const { return emitted_bytes_ + held_.size() + raw_.size(); }

 private:
  std::string release(std::size_t n);  // sends held_[0, n) and drops it

  std::vector<std::string> stop_;
  std::string raw_;   // bytes of an incomplete UTF-8 character
  std::string held_;  // valid text not yet sent (a possible stop-string start)
  bool stopped_ = false;
  std::size_t emitted_bytes_ = 0;
};

}  // namespace kvstash::server
