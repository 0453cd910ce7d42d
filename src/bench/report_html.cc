#include "bench/report_html.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "bench/report_script.h"
#include "bench/summary_table.h"

namespace kvstash::bench {
namespace {

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON that is safe inside <script>: no "</script>" or "<!--" can appear in it.
std::string script_safe_json(const nlohmann::json& json) {
  std::string text = json.dump(-1, ' ', /*ensure_ascii=*/true);
  std::string out;
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else out += c;
  }
  return out;
}

std::string summary_table_html(const Summary& s) {
  std::string html = "<table class=\"summary\"><tbody>\n";
  for (const auto& row : summary_rows(s)) {
    char value[64];
    if (std::isnan(row.value)) std::snprintf(value, sizeof value, "&ndash;");
    else if (row.unit.empty()) std::snprintf(value, sizeof value, "%.0f", row.value);
    else std::snprintf(value, sizeof value, "%.2f %s", row.value, row.unit.c_str());
    html += "<tr><th>" + escape_html(row.label) + "</th><td>" + value + "</td></tr>\n";
  }
  for (const auto& [kind, count] : s.errors) {
    html += "<tr class=\"err\"><th>errors: " + escape_html(kind) + "</th><td>" + std::to_string(count) + "</td></tr>\n";
  }
  return html + "</tbody></table>\n";
}

// What the charts need per request, smaller than the full records.
nlohmann::json chart_data(const BenchResult& result) {
  nlohmann::json points = nlohmann::json::array();
  nlohmann::json itls = nlohmann::json::array();
  for (const auto& r : result.records) {
    points.push_back({r.start_s, r.ttft_s * 1000, r.e2e_s * 1000, r.round, r.ok() ? 1 : 0});
    for (double gap : r.itl_s) itls.push_back(gap * 1000);
  }
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& r : result.summary.rounds) rounds.push_back({r.round + 1, r.mean_ttft_ms, r.p50_ttft_ms});
  return {{"points", points}, {"itl_ms", itls}, {"rounds", rounds}};
}

}  // namespace

std::string render_report_html(const BenchResult& result) {
  const auto& config = result.config;
  const std::string title = "kvstash bench: " + config.value("workload", std::string("run")) + " on " +
                            config.value("model", std::string("?"));
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + escape_html(title) +
          "</title>\n<style>\n" + std::string(kReportCss) + "</style></head>\n<body>\n";
  html += "<header><h1>" + escape_html(title) + "</h1>\n<p class=\"meta\">" +
          escape_html(config.value("url", std::string(""))) + " &middot; " +
          escape_html(config.value("started_at", std::string(""))) + "</p></header>\n";
  html += "<p id=\"kvstash-report-status\">drawing&hellip;</p>\n";
  html += "<main><section class=\"table\"><h2>Summary</h2>\n" + summary_table_html(result.summary);
  html += "<h2>Configuration</h2><pre>" + escape_html(config.dump(1)) + "</pre></section>\n";
  html += "<section class=\"charts\" id=\"charts\"></section></main>\n";
  html += "<script>\nconst KVSTASH_DATA = " + script_safe_json(chart_data(result)) + ";\n" +
          std::string(kReportScript) + "</script>\n</body></html>\n";
  return html;
}

Status write_report_html(const std::string& path, const BenchResult& result) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("cannot write " + path);
  out << render_report_html(result);
  out.close();
  if (!out) return io_error("error writing " + path);
  return Status::ok();
}

}  // namespace kvstash::bench
