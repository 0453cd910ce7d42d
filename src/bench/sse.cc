#include "bench/sse.h"

#include <nlohmann/json.hpp>

namespace kvstash::bench {

void SseParser::feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data) {
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = (c == '\r');
    if (c == '\n' || c == '\r') {
      end_line(on_data);
    } else {
      line_ += c;
    }
  }
}

void SseParser::end_line(const std::function<void(const std::string&)>& on_data) {
  if (line_.empty()) {
    if (has_data_) {
      // Copy first: on_data may be long and the parser's state must be clean if it feeds again.
      std::string data = std::move(data_);
      data_.clear();
      has_data_ = false;
      on_data(data);
    }
    return;
  }
  if (line_[0] != ':') {
    const std::size_t colon = line_.find(':');
    std::string_view field = std::string_view(line_).substr(0, colon);
    std::string_view value;
    if (colon != std::string::npos) {
      value = std::string_view(line_).substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

namespace {

std::int64_t int_or(const nlohmann::json& object, const char* key, std::int64_t fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<std::int64_t>() : fallback;
}

void read_usage(const nlohmann::json& usage, StreamChunk& chunk) {
  chunk.has_usage = true;
  chunk.prompt_tokens = int_or(usage, "prompt_tokens", 0);
  chunk.completion_tokens = int_or(usage, "completion_tokens", 0);
  auto details = usage.find("prompt_tokens_details");
  if (details != usage.end()) chunk.cached_tokens = int_or(*details, "cached_tokens", -1);
  // Some servers put it at the top level of usage.
  if (chunk.cached_tokens < 0) chunk.cached_tokens = int_or(usage, "cached_tokens", -1);
}

// Appends a string field of `object` to `out` if it is a string (null and absent mean none).
void append_text(const nlohmann::json& object, const char* key, std::string& out) {
  if (!object.is_object()) return;
  auto it = object.find(key);
  if (it != object.end() && it->is_string()) out += it->get_ref<const std::string&>();
}

}  // namespace

Expected<StreamChunk> parse_stream_chunk(const std::string& data) {
  StreamChunk chunk;
  if (data == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  const auto json = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return corrupt("SSE data is not a JSON object: " + data.substr(0, 80));
  if (auto error = json.find("error"); error != json.end()) {
    chunk.error = error->is_object() && error->contains("message") && (*error)["message"].is_string()
                      ? (*error)["message"].get<std::string>()
                      : error->dump();
    if (chunk.error.empty()) chunk.error = "error";
    return chunk;
  }
  const auto choices = json.find("choices");
  const auto usage = json.find("usage");
  const bool has_usage = usage != json.end() && usage->is_object();
  if (choices == json.end() && !has_usage) return corrupt("SSE chunk has neither choices nor usage");
  if (choices != json.end()) {
    if (!choices->is_array()) return corrupt("SSE chunk's \"choices\" is not an array");
    for (const auto& choice : *choices) {
      if (!choice.is_object()) return corrupt("SSE chunk's choice is not an object");
      if (auto delta = choice.find("delta"); delta != choice.end()) {
        append_text(*delta, "reasoning_content", chunk.content);
        append_text(*delta, "content", chunk.content);
      }
      append_text(choice, "text", chunk.content);  // completions API
      if (auto fr = choice.find("finish_reason"); fr != choice.end() && fr->is_string()) {
        chunk.finish_reason = fr->get<std::string>();
      }
    }
  }
  if (has_usage) read_usage(*usage, chunk);
  return chunk;
}

}  // namespace kvstash::bench
