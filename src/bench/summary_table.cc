#include "bench/summary_table.h"

#include <map>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace kvstash::bench {
namespace {

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

void add_distribution(std::vector<SummaryRow>& rows, const std::string& name, const Distribution& d) {
  rows.push_back({name + " mean", d.mean, "ms"});
  rows.push_back({name + " p50", d.p50, "ms"});
  rows.push_back({name + " p90", d.p90, "ms"});
  rows.push_back({name + " p99", d.p99, "ms"});
  rows.push_back({name + " max", d.max, "ms"});
}

std::string format_value(double value, const std::string& unit) {
  if (std::isnan(value)) return "-";
  char buffer[64];
  if (unit.empty()) {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
  } else if (unit == "%") {
    std::snprintf(buffer, sizeof buffer, "%.1f %%", value);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f %s", value, unit.c_str());
  }
  return buffer;
}

std::string pad(const std::string& text, std::size_t width, bool right) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return right ? fill + text : text + fill;
}

}  // namespace

std::vector<SummaryRow> summary_rows(const Summary& s) {
  std::vector<SummaryRow> rows = {
      {"requests", static_cast<double>(s.requests), ""},
      {"completed", static_cast<double>(s.completed), ""},
      {"failed", static_cast<double>(s.failed), ""},
      {"duration", s.duration_s, "s"},
      {"prompt tokens", static_cast<double>(s.prompt_tokens), ""},
      {"output tokens", static_cast<double>(s.output_tokens), ""},
      {"request throughput", s.request_throughput, "req/s"},
      {"output token throughput", s.output_throughput, "tok/s"},
      {"total token throughput", s.total_token_throughput, "tok/s"},
  };
  add_distribution(rows, "TTFT", s.ttft_ms);
  add_distribution(rows, "TPOT", s.tpot_ms);
  add_distribution(rows, "ITL", s.itl_ms);
  add_distribution(rows, "E2E", s.e2e_ms);
  rows.push_back({"cached token ratio", s.cached_token_ratio < 0 ? kMissing : 100 * s.cached_token_ratio, "%"});
  if (s.slo.any()) rows.push_back({"goodput", s.goodput, "req/s"});
  for (const auto& r : s.rounds) {
    rows.push_back({"round " + std::to_string(r.round + 1) + " TTFT mean", r.mean_ttft_ms, "ms"});
  }
  return rows;
}

std::string format_summary(const Summary& s) {
  std::string out;
  const std::size_t width = 28;
  out += "============ kvstash bench ============\n";
  for (const auto& row : summary_rows(s)) {
    out += pad(row.label, width, false) + pad(format_value(row.value, row.unit), 16, true) + "\n";
  }
  if (s.router_added_ms.count > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "router-added time to first byte, per request: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
                  s.router_added_ms.p50, s.router_added_ms.p99, s.router_added_ms.max);
    out += line;
  }
  if (!s.per_worker.empty()) {
    out += "requests per worker:";
    for (const auto& [worker, count] : s.per_worker) out += " " + worker + "=" + std::to_string(count);
    out += "\n";
  }
  if (!s.errors.empty()) {
    out += "errors:";
    for (const auto& [kind, count] : s.errors) out += " " + kind + "=" + std::to_string(count);
    out += "\n";
  }
  out += "=======================================\n";
  return out;
}

std::string format_comparison(const Summary& a, const Summary& b, const std::string& name_a,
                              const std::string& name_b) {
  const auto rows_a = summary_rows(a);
  const auto rows_b = summary_rows(b);
  // Columns as wide as the file names, so that long paths stay apart.
  const std::size_t w = std::max<std::size_t>(18, std::max(name_a.size(), name_b.size()) + 2);
  std::string out = pad("metric", 28, false) + pad(name_a, w, true) + pad(name_b, w, true) + pad("b/a", 10, true) + "\n";
  for (const auto& ra : rows_a) {
    double vb = kMissing;
    for (const auto& rb : rows_b) {
      if (rb.label == ra.label) vb = rb.value;
    }
    std::string ratio = "-";
    if (!std::isnan(ra.value) && !std::isnan(vb) && ra.value != 0) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.3fx", vb / ra.value);
      ratio = buffer;
    }
    out += pad(ra.label, 28, false) + pad(format_value(ra.value, ra.unit), w, true) +
           pad(format_value(vb, ra.unit), w, true) + pad(ratio, 10, true) + "\n";
  }
  // Rows only b has (more multi-turn rounds).
  for (const auto& rb : rows_b) {
    bool in_a = false;
    for (const auto& ra : rows_a) in_a = in_a || ra.label == rb.label;
    if (!in_a) out += pad(rb.label, 28, false) + pad("-", w, true) + pad(format_value(rb.value, rb.unit), w, true) + pad("-", 10, true) + "\n";
  }
  return out;
}

}  // namespace kvstash::bench

namespace kvstash::bench {

std::string format_class_summaries(const std::map<std::string, Summary>& classes) {
  if (classes.empty()) return "";
  std::string out = "By class\n";
  char line[320];
  for (const auto& [label, s] : classes) {
    std::snprintf(line, sizeof line,
                  "  %-8s %4lld req  TTFT p50 %9.2f p90 %9.2f p99 %9.2f ms  ITL p50 %8.2f p90 %8.2f p99 %8.2f max %8.2f ms",
                  label.c_str(), static_cast<long long>(s.requests), s.ttft_ms.p50, s.ttft_ms.p90, s.ttft_ms.p99,
                  s.itl_ms.p50, s.itl_ms.p90, s.itl_ms.p99, s.itl_ms.max);
    out += line;
    if (s.slo.any()) {
      std::snprintf(line, sizeof line, "  met the SLO %lld/%lld", static_cast<long long>(s.good_requests),
                    static_cast<long long>(s.requests));
      out += line;
    }
    out += "\n";
  }
  return out;
}

std::string format_cache_summary(const std::vector<RequestRecord>& records) {
  std::map<std::string, std::vector<double>> e2e_by_result;
  std::int64_t with_header = 0, ok = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok()) continue;
    ++ok;
    if (r.cache.empty()) continue;
    ++with_header;
    e2e_by_result[r.cache].push_back(r.e2e_s);
  }
  if (with_header == 0) return "";
  const auto count = [&](const std::string& k) {
    auto it = e2e_by_result.find(k);
    return it == e2e_by_result.end() ? std::size_t{0} : it->second.size();
  };
  char line[256];
  std::string out = "Response cache (x-kvstash-cache)\n";
  std::snprintf(line, sizeof line, "  hits %zu  misses %zu  bypasses %zu  of %lld ok requests  hit ratio %.3f\n",
                count("hit"), count("miss"), count("bypass"), static_cast<long long>(ok),
                ok > 0 ? static_cast<double>(count("hit")) / static_cast<double>(ok) : 0.0);
  out += line;
  for (const char* k : {"hit", "miss", "bypass"}) {
    auto it = e2e_by_result.find(k);
    if (it == e2e_by_result.end()) continue;
    const Distribution d = distribution(it->second, 1000.0);
    std::snprintf(line, sizeof line, "  e2e %-6s p50 %9.2f ms  p99 %9.2f ms  mean %9.2f ms\n", k, d.p50, d.p99, d.mean);
    out += line;
  }
  return out;
}

}  // namespace kvstash::bench
