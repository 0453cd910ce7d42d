#include "bench/server_metrics.h"

#include <cstdio>
#include <cstdlib>

namespace kvstash::bench {
namespace {

double counter_delta(const MetricSamples& before, const MetricSamples& after, const std::string& name) {
  const auto a = after.find(name);
  if (a == after.end()) return 0;
  const auto b = before.find(name);
  // A counter that went down was reset (the server restarted during the run): count from zero.
  if (b == before.end() || b->second > a->second) return a->second;
  return a->second - b->second;
}

}  // namespace

MetricSamples parse_prometheus_text(std::string_view text) {
  MetricSamples samples;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (line.empty() || line.front() == '#') continue;
    // The value follows the name (and its labels, which may hold spaces inside quotes).
    std::size_t name_end = line.find_first_of(" {");
    if (name_end == std::string_view::npos) continue;
    if (line[name_end] == '{') {
      const std::size_t close = line.rfind('}');
      if (close == std::string_view::npos || close < name_end) continue;
      name_end = close + 1;
    }
    const std::string name(line.substr(0, name_end));
    std::string rest(line.substr(name_end));
    const char* begin = rest.c_str();
    char* parsed_end = nullptr;
    const double value = std::strtod(begin, &parsed_end);
    if (parsed_end == begin) continue;
    samples[name] = value;
  }
  return samples;
}

nlohmann::json server_counters_delta(const MetricSamples& before, const MetricSamples& after) {
  nlohmann::json out = nlohmann::json::object();
  const auto d = [&](const char* name) { return counter_delta(before, after, name); };
  if (after.count("kvstash_spec_drafts_total") != 0 && d("kvstash_spec_drafts_total") > 0) {
    const double drafts = d("kvstash_spec_drafts_total"), drafted = d("kvstash_spec_draft_tokens_total"),
                 accepted = d("kvstash_spec_draft_tokens_accepted_total");
    out["speculative"] = {{"drafts", drafts},
                          {"draft_tokens", drafted},
                          {"accepted_tokens", accepted},
                          {"acceptance", drafted > 0 ? accepted / drafted : 0.0},
                          {"mean_accepted_length", accepted / drafts},
                          {"draft_seconds", d("kvstash_spec_draft_seconds_total")}};
  }
  if (after.count("kvstash_prompt_tokens_total") != 0) {
    out["prompt_cache"] = {{"prompt_tokens", d("kvstash_prompt_tokens_total")},
                           {"cached_tokens", d("kvstash_cached_tokens_total")},
                           {"from_pool", d("kvstash_prompt_tokens_from_pool_total")},
                           {"from_store", d("kvstash_prompt_tokens_from_store_total")}};
  }
  return out;
}

std::string format_server_counters(const nlohmann::json& delta) {
  if (!delta.is_object() || delta.empty()) return "";
  std::string out = "Server (/metrics, this run)\n";
  char line[256];
  if (delta.contains("speculative")) {
    const nlohmann::json& s = delta["speculative"];
    std::snprintf(line, sizeof line,
                  "  speculative decoding: %.0f drafts  %.0f tokens drafted  %.0f accepted  acceptance %.3f  "
                  "mean accepted length %.2f  drafting %.3f s\n",
                  s.value("drafts", 0.0), s.value("draft_tokens", 0.0), s.value("accepted_tokens", 0.0),
                  s.value("acceptance", 0.0), s.value("mean_accepted_length", 0.0), s.value("draft_seconds", 0.0));
    out += line;
  }
  if (delta.contains("prompt_cache")) {
    const nlohmann::json& p = delta["prompt_cache"];
    const double prompt = p.value("prompt_tokens", 0.0), cached = p.value("cached_tokens", 0.0);
    std::snprintf(line, sizeof line,
                  "  prompt tokens %.0f  cached %.0f (%.3f)  from the engine's pool %.0f  from the KV store %.0f\n", prompt,
                  cached, prompt > 0 ? cached / prompt : 0.0, p.value("from_pool", 0.0), p.value("from_store", 0.0));
    out += line;
  }
  return out;
}

}  // namespace kvstash::bench
