// The `trace` workload: replay of recorded requests from a JSONL file. Each line is one request:
//   {"timestamp": 12.5, "messages": [{"role": "user", "content": "..."}], "max_tokens": 64}
//   {"timestamp": 13.0, "prompt": "...", "max_tokens": 16}
// Timestamps are seconds; they are replayed relative to the smallest one. Blank lines are skipped.
#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bench/workload_kinds.h"

namespace kvstash::bench {
namespace {

Expected<Session> parse_trace_line(const std::string& line, const WorkloadOptions& options) {
  const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return corrupt("not a JSON object");
  Session session;
  if (!json.contains("timestamp") || !json["timestamp"].is_number()) return corrupt("needs a numeric \"timestamp\"");
  session.timestamp_s = json["timestamp"].get<double>();
  if (json.contains("messages")) {
    const auto& messages = json["messages"];
    if (!messages.is_array() || messages.empty()) return corrupt("\"messages\" must be a non-empty array");
    for (const auto& m : messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string()) {
        return corrupt("each message needs string \"role\" and \"content\"");
      }
      session.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
  } else if (json.contains("prompt") && json["prompt"].is_string()) {
    session.messages.push_back({"user", json["prompt"].get<std::string>()});
  } else {
    return corrupt("needs \"messages\" or a string \"prompt\"");
  }
  session.max_tokens = options.output_len;
  if (json.contains("max_tokens")) {
    if (!json["max_tokens"].is_number_integer() || json["max_tokens"].get<int>() < 1) {
      return corrupt("\"max_tokens\" must be a positive integer");
    }
    session.max_tokens = json["max_tokens"].get<int>();
  }
  return session;
}

}  // namespace

Expected<std::vector<Session>> load_trace_sessions(const WorkloadOptions& options) {
  std::ifstream in(options.trace_path);
  if (!in) return not_found("cannot open trace " + options.trace_path);
  std::vector<Session> sessions;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto session = parse_trace_line(line, options);
    if (!session) {
      return corrupt(options.trace_path + ":" + std::to_string(line_number) + ": " + session.status().message());
    }
    sessions.push_back(std::move(*session));
  }
  if (sessions.empty()) return corrupt("trace " + options.trace_path + " has no requests");
  std::stable_sort(sessions.begin(), sessions.end(),
                   [](const Session& a, const Session& b) { return a.timestamp_s < b.timestamp_s; });
  const double start = sessions.front().timestamp_s;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    sessions[i].id = static_cast<std::int64_t>(i);
    sessions[i].timestamp_s -= start;
  }
  return sessions;
}

}  // namespace kvstash::bench
