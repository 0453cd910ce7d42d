#include "bench/stream_collector.h"

namespace kvstash::bench {
namespace {

double seconds(StreamCollector::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

bool StreamCollector::on_bytes(std::string_view bytes, Clock::time_point now) {
  if (failed()) return false;
  parser_.feed(bytes, [&](const std::string& data) { on_event(data, now); });
  return !failed();
}

void StreamCollector::on_event(const std::string& data, Clock::time_point now) {
  if (failed()) return;
  if (done_) {
    // Anything after [DONE] breaks the protocol.
    error_ = error_kind::kMalformedSse;
    error_detail_ = "data after [DONE]";
    return;
  }
  auto chunk = parse_stream_chunk(data);
  if (!chunk) {
    error_ = error_kind::kMalformedSse;
    error_detail_ = chunk.status().message();
    return;
  }
  if (!chunk->error.empty()) {
    error_ = error_kind::kServerError;
    error_detail_ = chunk->error;
    return;
  }
  if (chunk->done) {
    done_ = true;
    return;
  }
  if (!chunk->content.empty()) {
    if (content_chunks_ == 0) {
      ttft_s_ = seconds(now - sent_);
    } else {
      itl_s_.push_back(seconds(now - last_content_));
    }
    last_content_ = now;
    ++content_chunks_;
    text_ += chunk->content;
  }
  if (chunk->has_usage) usage_ = *chunk;
}

void StreamCollector::finish(RequestRecord& record, Clock::time_point end) const {
  record.ttft_s = ttft_s_;
  record.itl_s = itl_s_;
  record.e2e_s = seconds(end - sent_);
  record.output_text = text_;
  record.usage_reported = usage_.has_usage;
  if (usage_.has_usage) {
    record.prompt_tokens = usage_.prompt_tokens;
    record.output_tokens = usage_.completion_tokens;
    record.cached_tokens = usage_.cached_tokens;
  } else {
    record.output_tokens = content_chunks_;
  }
  if (failed()) {
    record.error = error_;
    record.error_detail = error_detail_;
  } else if (!done_) {
    record.error = error_kind::kTruncated;
    record.error_detail = parser_.has_partial_event() ? "stream ended inside an event" : "stream ended before [DONE]";
  } else if (content_chunks_ == 0) {
    record.error = error_kind::kEmptyOutput;
    record.error_detail = "the stream finished without content";
  }
}

}  // namespace kvstash::bench
