#include "bench/result_io.h"

#include <fstream>
#include <sstream>

namespace kvstash::bench {
namespace {

using nlohmann::json;

constexpr int kFormatVersion = 1;

json distribution_to_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}};
}

json ratio_to_json(double ratio) { return ratio < 0 ? json(nullptr) : json(ratio); }

json slo_value(double ms) { return ms < 0 ? json(nullptr) : json(ms); }

// Reads fields with type checks; the first failure is remembered and reported once.
class Reader {
 public:
  explicit Reader(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) fail("is not an object");
  }
  double number(const char* key) {
    const json* v = find(key);
    if (v == nullptr) return 0;
    if (!v->is_number()) return fail(std::string(key) + " is not a number"), 0.0;
    return v->get<double>();
  }
  std::int64_t integer(const char* key) {
    const json* v = find(key);
    if (v == nullptr) return 0;
    if (!v->is_number_integer()) return fail(std::string(key) + " is not an integer"), 0;
    return v->get<std::int64_t>();
  }
  // A number, or `if_null` when the value is null.
  double number_or_null(const char* key, double if_null) {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return if_null;
    return number(key);
  }
  const json& child(const char* key) {
    static const json kNull;
    const json* v = find(key);
    return v == nullptr ? kNull : *v;
  }
  Distribution distribution(const char* key) {
    Reader r(child(key), where_ + "." + key);
    Distribution d;
    d.count = r.integer("count");
    d.mean = r.number("mean");
    d.p50 = r.number("p50");
    d.p90 = r.number("p90");
    d.p99 = r.number("p99");
    d.max = r.number("max");
    absorb(r);
    return d;
  }
  void absorb(const Reader& other) {
    if (error_.empty()) error_ = other.error_;
  }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = where_ + ": " + message;
  }
  const std::string& error() const { return error_; }

 private:
  const json* find(const char* key) {
    if (!object_.is_object()) return nullptr;
    auto it = object_.find(key);
    if (it == object_.end()) {
      fail(std::string("missing ") + key);
      return nullptr;
    }
    return &*it;
  }

  const json& object_;
  std::string where_;
  std::string error_;
};

}  // namespace

json summary_to_json(const Summary& s) {
  json rounds = json::array();
  for (const auto& r : s.rounds) {
    rounds.push_back({{"round", r.round}, {"count", r.count}, {"mean_ttft_ms", r.mean_ttft_ms},
                      {"p50_ttft_ms", r.p50_ttft_ms}, {"cached_token_ratio", ratio_to_json(r.cached_token_ratio)}});
  }
  return {{"requests", s.requests}, {"completed", s.completed}, {"failed", s.failed},
          {"duration_s", s.duration_s}, {"prompt_tokens", s.prompt_tokens}, {"output_tokens", s.output_tokens},
          {"request_throughput", s.request_throughput}, {"output_throughput", s.output_throughput},
          {"total_token_throughput", s.total_token_throughput},
          {"ttft_ms", distribution_to_json(s.ttft_ms)}, {"tpot_ms", distribution_to_json(s.tpot_ms)},
          {"itl_ms", distribution_to_json(s.itl_ms)}, {"e2e_ms", distribution_to_json(s.e2e_ms)},
          {"errors", s.errors}, {"cached_tokens", s.cached_tokens},
          {"cached_token_ratio", ratio_to_json(s.cached_token_ratio)},
          {"slo", {{"ttft_ms", slo_value(s.slo.ttft_ms)}, {"tpot_ms", slo_value(s.slo.tpot_ms)},
                   {"e2e_ms", slo_value(s.slo.e2e_ms)}, {"itl_ms", slo_value(s.slo.itl_ms)}}},
          {"good_requests", s.good_requests}, {"goodput", s.goodput}, {"rounds", rounds},
          {"per_worker", s.per_worker}, {"router_added_ms", distribution_to_json(s.router_added_ms)}};
}

Expected<Summary> summary_from_json(const json& j) {
  Reader r(j, "summary");
  Summary s;
  s.requests = r.integer("requests");
  s.completed = r.integer("completed");
  s.failed = r.integer("failed");
  s.duration_s = r.number("duration_s");
  s.prompt_tokens = r.integer("prompt_tokens");
  s.output_tokens = r.integer("output_tokens");
  s.request_throughput = r.number("request_throughput");
  s.output_throughput = r.number("output_throughput");
  s.total_token_throughput = r.number("total_token_throughput");
  s.ttft_ms = r.distribution("ttft_ms");
  s.tpot_ms = r.distribution("tpot_ms");
  s.itl_ms = r.distribution("itl_ms");
  s.e2e_ms = r.distribution("e2e_ms");
  const json& errors = r.child("errors");
  if (errors.is_object()) {
    for (const auto& [kind, count] : errors.items()) {
      if (!count.is_number_integer()) return corrupt("summary.errors." + kind + " is not an integer");
      s.errors[kind] = count.get<std::int64_t>();
    }
  }
  if (const json& per_worker = r.child("per_worker"); per_worker.is_object()) {
    for (const auto& [worker, count] : per_worker.items()) {
      if (count.is_number_integer()) s.per_worker[worker] = count.get<std::int64_t>();
    }
  }
  s.cached_tokens = r.integer("cached_tokens");
  s.cached_token_ratio = r.number_or_null("cached_token_ratio", -1);
  Reader slo(r.child("slo"), "summary.slo");
  s.slo.ttft_ms = slo.number_or_null("ttft_ms", -1);
  s.slo.tpot_ms = slo.number_or_null("tpot_ms", -1);
  s.slo.e2e_ms = slo.number_or_null("e2e_ms", -1);
  if (r.child("slo").is_object() && r.child("slo").contains("itl_ms")) {  // optional: results before it lack it
    s.slo.itl_ms = slo.number_or_null("itl_ms", -1);
  }
  r.absorb(slo);
  s.good_requests = r.integer("good_requests");
  s.goodput = r.number("goodput");
  const json& rounds = r.child("rounds");
  if (rounds.is_array()) {
    for (const auto& item : rounds) {
      Reader rr(item, "summary.rounds[]");
      RoundStats stats;
      stats.round = static_cast<int>(rr.integer("round"));
      stats.count = rr.integer("count");
      stats.mean_ttft_ms = rr.number("mean_ttft_ms");
      stats.p50_ttft_ms = rr.number("p50_ttft_ms");
      stats.cached_token_ratio = rr.number_or_null("cached_token_ratio", -1);
      r.absorb(rr);
      s.rounds.push_back(stats);
    }
  }
  if (!r.error().empty()) return corrupt(r.error());
  return s;
}

json record_to_json(const RequestRecord& rec) {
  json out = {{"index", rec.index}, {"session_id", rec.session_id}, {"round", rec.round},
          {"start_s", rec.start_s}, {"ttft_s", rec.ttft_s}, {"itl_s", rec.itl_s}, {"e2e_s", rec.e2e_s},
          {"prompt_tokens", rec.prompt_tokens}, {"output_tokens", rec.output_tokens},
          {"cached_tokens", rec.cached_tokens < 0 ? json(nullptr) : json(rec.cached_tokens)},
          {"usage_reported", rec.usage_reported}, {"http_status", rec.http_status},
          {"error", rec.error.empty() ? json(nullptr) : json(rec.error)}, {"error_detail", rec.error_detail},
          {"worker", rec.worker}, {"ttfb_s", rec.ttfb_s}, {"upstream_s", rec.upstream_s < 0 ? json(nullptr) : json(rec.upstream_s)}};
  if (!rec.label.empty()) out["class"] = rec.label;
  return out;
}

Expected<RequestRecord> record_from_json(const json& j) {
  Reader r(j, "record");
  RequestRecord rec;
  rec.index = r.integer("index");
  rec.session_id = r.integer("session_id");
  rec.round = static_cast<int>(r.integer("round"));
  rec.start_s = r.number("start_s");
  rec.ttft_s = r.number("ttft_s");
  const json& itls = r.child("itl_s");
  if (!itls.is_array()) return corrupt("record.itl_s is not an array");
  for (const auto& v : itls) {
    if (!v.is_number()) return corrupt("record.itl_s holds a non-number");
    rec.itl_s.push_back(v.get<double>());
  }
  rec.e2e_s = r.number("e2e_s");
  rec.prompt_tokens = r.integer("prompt_tokens");
  rec.output_tokens = r.integer("output_tokens");
  rec.cached_tokens = static_cast<std::int64_t>(r.number_or_null("cached_tokens", -1));
  const json& usage = r.child("usage_reported");
  rec.usage_reported = usage.is_boolean() && usage.get<bool>();
  rec.http_status = static_cast<int>(r.integer("http_status"));
  const json& error = r.child("error");
  if (error.is_string()) rec.error = error.get<std::string>();
  else if (!error.is_null()) return corrupt("record.error is neither null nor a string");
  const json& detail = r.child("error_detail");
  if (detail.is_string()) rec.error_detail = detail.get<std::string>();
  if (const json& worker = r.child("worker"); worker.is_string()) rec.worker = worker.get<std::string>();
  if (const json& ttfb = r.child("ttfb_s"); ttfb.is_number()) rec.ttfb_s = ttfb.get<double>();
  if (const json& up = r.child("upstream_s"); up.is_number()) rec.upstream_s = up.get<double>();
  if (j.is_object() && j.contains("class") && j["class"].is_string()) rec.label = j["class"].get<std::string>();  // optional
  if (!r.error().empty()) return corrupt(r.error());
  return rec;
}

json result_to_json(const BenchResult& result) {
  json records = json::array();
  for (const auto& rec : result.records) records.push_back(record_to_json(rec));
  json out = {{"format", "kvstash-bench"}, {"version", kFormatVersion}, {"config", result.config},
              {"summary", summary_to_json(result.summary)}, {"records", records}};
  if (!result.server.empty()) out["server"] = result.server;
  if (!result.classes.empty()) {
    json classes = json::object();
    for (const auto& [label, summary] : result.classes) classes[label] = summary_to_json(summary);
    out["classes"] = classes;
  }
  return out;
}

Expected<BenchResult> result_from_json(const json& j) {
  if (!j.is_object() || j.value("format", "") != "kvstash-bench") return corrupt("not a kvstash bench result");
  if (j.value("version", 0) != kFormatVersion) return unsupported("bench result version " + j.value("version", json(0)).dump());
  BenchResult result;
  if (j.contains("config")) result.config = j["config"];
  if (j.contains("classes")) {
    if (!j["classes"].is_object()) return corrupt("bench result's classes are not an object");
    for (const auto& [label, item] : j["classes"].items()) {
      auto summary = summary_from_json(item);
      if (!summary) return Status(summary.status().code(), "classes." + label + ": " + summary.status().message());
      result.classes[label] = std::move(*summary);
    }
  }
  if (j.contains("server")) {
    if (!j["server"].is_object()) return corrupt("bench result's server counters are not an object");
    result.server = j["server"];
  }
  if (!j.contains("summary")) return corrupt("bench result has no summary");
  auto summary = summary_from_json(j["summary"]);
  if (!summary) return summary.status();
  result.summary = std::move(*summary);
  if (!j.contains("records") || !j["records"].is_array()) return corrupt("bench result has no records array");
  for (const auto& item : j["records"]) {
    auto rec = record_from_json(item);
    if (!rec) return rec.status();
    result.records.push_back(std::move(*rec));
  }
  return result;
}

Status write_result(const std::string& path, const BenchResult& result) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("cannot write " + path);
  out << result_to_json(result).dump(1) << '\n';
  out.close();
  if (!out) return io_error("error writing " + path);
  return Status::ok();
}

Expected<BenchResult> read_result(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const json j = json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt(path + " is not valid JSON");
  auto result = result_from_json(j);
  if (!result) return Status(result.status().code(), path + ": " + result.status().message());
  return result;
}

}  // namespace kvstash::bench
