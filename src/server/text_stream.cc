#include "server/text_stream.h"

#include <algorithm>

#include "server/utf8.h"

namespace kvstash::server {

TextStream::TextStream(std::vector<std::string> stop) {
  for (std::string& s : stop) {
    if (!s.empty()) stop_.push_back(std::move(s));
  }
}

std::string TextStream::release(std::size_t n) {
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  emitted_bytes_ += out.size();
  return out;
}

std::string TextStream::push(std::string_view bytes) {
  if (stopped_) return {};
  raw_.append(bytes);
  held_ += take_utf8(raw_, /*final=*/false);

  // Every byte already sent was checked not to start a stop string, so a match lies in held_.
  std::size_t first_match = std::string::npos;
  for (const std::string& s : stop_) first_match = std::min(first_match, held_.find(s));
  if (first_match != std::string::npos) {
    stopped_ = true;
    std::string out = release(first_match);
    held_.clear();
    raw_.clear();
    return out;
  }

  // Hold back the longest tail of held_ that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const std::string& s : stop_) {
    std::size_t max_len = std::min(s.size() - 1, held_.size());
    for (std::size_t len = max_len; len > hold; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  // A held tail that starts a stop string starts at a character boundary: stop strings are
  // valid UTF-8, so their first byte is never a continuation byte.
  return release(held_.size() - hold);
}

std::string TextStream::finish() {
  if (stopped_) return {};
  held_ += take_utf8(raw_, /*final=*/true);
  return release(held_.size());
}

}  // namespace kvstash::server
