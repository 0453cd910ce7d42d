#include "server/metrics.h"

#include <charconv>

namespace kvstash::server {
namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += " ";
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += " ";
  out += type;
  out += "\n";
}

std::string number(double v) {
  // Shortest text that reads back as the same double ("0.025", not "0.025000000000000001").
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

void sample(std::string& out, const char* name, double value) {
  out += name;
  out += " ";
  out += number(value);
  out += "\n";
}

}  // namespace

void Metrics::count_request(const std::string& endpoint, int http_status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, http_status}];
}

void Metrics::observe_generation(int prompt_tokens, int cached_tokens, int generated_tokens,
                                 double ttft_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  generated_tokens_ += generated_tokens;
  if (ttft_s < 0) return;
  ++ttft_count_;
  ttft_sum_ += ttft_s;
  for (std::size_t i = 0; i < kTtftBuckets.size(); ++i) {
    if (ttft_s <= kTtftBuckets[i]) {
      ++ttft_counts_[i];
      break;
    }
  }
}

std::string Metrics::render(const EngineStats& engine) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  header(out, "kvstash_requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [key, count] : requests_) {
    out += "kvstash_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  }
  header(out, "kvstash_prompt_tokens_total", "counter", "Prompt tokens of finished generations.");
  sample(out, "kvstash_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  header(out, "kvstash_cached_tokens_total", "counter", "Prompt tokens served from the prefix cache.");
  sample(out, "kvstash_cached_tokens_total", static_cast<double>(cached_tokens_));
  header(out, "kvstash_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "kvstash_generated_tokens_total", static_cast<double>(generated_tokens_));

  header(out, "kvstash_ttft_seconds", "histogram", "Time from request to first token.");
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < kTtftBuckets.size(); ++i) {
    cumulative += ttft_counts_[i];
    out += "kvstash_ttft_seconds_bucket{le=\"" + number(kTtftBuckets[i]) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += "kvstash_ttft_seconds_bucket{le=\"+Inf\"} " + std::to_string(ttft_count_) + "\n";
  sample(out, "kvstash_ttft_seconds_sum", ttft_sum_);
  sample(out, "kvstash_ttft_seconds_count", static_cast<double>(ttft_count_));

  header(out, "kvstash_prefill_seconds_total", "counter", "Engine time spent in prefill.");
  sample(out, "kvstash_prefill_seconds_total", engine.prefill_seconds);
  header(out, "kvstash_decode_seconds_total", "counter", "Engine time spent in decode.");
  sample(out, "kvstash_decode_seconds_total", engine.decode_seconds);
  header(out, "kvstash_requests_running", "gauge", "Sequences in the running batch.");
  sample(out, "kvstash_requests_running", engine.running);
  header(out, "kvstash_requests_waiting", "gauge", "Requests queued for the running batch.");
  sample(out, "kvstash_requests_waiting", engine.waiting);
  header(out, "kvstash_kv_blocks", "gauge", "KV blocks of the engine's pool by state.");
  std::int64_t free_blocks = engine.kv_blocks_total - engine.kv_blocks_used;
  out += "kvstash_kv_blocks{state=\"used\"} " + std::to_string(engine.kv_blocks_used) + "\n";
  out += "kvstash_kv_blocks{state=\"free\"} " + std::to_string(free_blocks) + "\n";
  out += "kvstash_kv_blocks{state=\"cached\"} " + std::to_string(engine.kv_blocks_cached) + "\n";
  header(out, "kvstash_kv_blocks_total", "gauge", "KV blocks in the engine's pool.");
  sample(out, "kvstash_kv_blocks_total", static_cast<double>(engine.kv_blocks_total));
  return out;
}

}  // namespace kvstash::server
