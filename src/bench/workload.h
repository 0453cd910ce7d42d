// Benchmark workloads: the conversations kvstash bench sends, generated deterministically from a
// seed, or replayed from a recorded trace.
//
// A workload is a list (or, for `random` under --duration, an endless stream) of Sessions. A
// session is one conversation: its first request, then follow-up user turns, each sent after the
// server answered the previous one with the real answer appended to the history (the LMCache
// multi-round QA shape). Single-request workloads have sessions with no follow-ups.
//
//   random         independent prompts, lengths fixed or drawn (--len-dist)
//   shared-prefix  G groups x P prompts; a group's prompts share a system prompt of L tokens
//   multi-turn     U users x R rounds, optional shared system prompt
//   long-doc       D documents of L tokens, each asked Q questions (sequential|interleaved|random)
//   agent          A agents x S steps; each step appends a tool output to the context
//   trace          a JSONL file of {"timestamp", "messages"|"prompt", "max_tokens"}
//   zipf           N requests over Q distinct questions, question k (0-based) drawn with probability
//                  proportional to 1 / (k + 1)^s (a power law; s = --zipf-exponent): the repeated
//                  questions of a response cache's workload
//   mixed          two classes of traffic at once (issue 34's shape): U streaming users (multi-turn
//                  sessions from t = 0, class "stream") and A long-prompt arrivals (one request each,
//                  class "arrival") sent at Poisson times from --arrival-delay on, at --arrival-rate;
//                  every session has its own connection, so an arrival is never held behind a stream
//
// Thread safety: a Workload is immutable after make_workload; session() may be called from any
// thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::bench {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct Session {
  std::int64_t id = 0;                  // index in the workload
  std::vector<ChatMessage> messages;    // the first request's messages
  std::vector<std::string> follow_ups;  // user turns of rounds 1.., each after the last answer
  int max_tokens = 0;                   // per request of this session
  double timestamp_s = -1;              // trace, mixed: send time after the run's start; -1 = none
  std::string label;                    // the traffic class (mixed: "stream" or "arrival"); "" = none
  int num_rounds() const { return 1 + static_cast<int>(follow_ups.size()); }
};

enum class LengthDistribution { kFixed, kUniform, kNormal };

struct WorkloadOptions {
  std::string kind = "random";  // one of the kinds above
  std::uint64_t seed = 0;       // same seed, same sessions
  // Prompt and answer lengths in (approximate) tokens.
  int input_len = 256;   // random: prompt; multi-turn, agent: first user message; long-doc: question
  int output_len = 64;   // max_tokens of each request
  LengthDistribution len_dist = LengthDistribution::kFixed;
  double len_spread = 0.5;  // uniform: len * [1 - s, 1 + s]; normal: sd = len * s / 2
  std::int64_t num_prompts = 100;  // random: sessions; -1 = endless (under --duration)
  // shared-prefix
  int groups = 4;             // G
  int prompts_per_group = 8;  // P
  int prefix_len = 512;       // L: the shared system prompt of a group; also long-doc's L
  // multi-turn and agent
  int users = 4;             // U users (multi-turn) or agents (agent)
  int rounds = 4;            // R rounds (multi-turn) or steps (agent)
  int system_len = 0;        // shared system prompt (multi-turn), tool description (agent); 0 = none
  int question_len = 32;     // multi-turn: follow-up questions
  int tool_output_len = 128; // agent: each tool output
  // long-doc
  int documents = 2;                    // D
  int questions_per_document = 4;       // Q
  std::string doc_order = "interleaved";  // sequential | interleaved | random
  // trace
  std::string trace_path;
  // zipf (num_prompts requests)
  int questions = 100;          // Q distinct questions
  double zipf_exponent = 1.0;   // s >= 0; 0 = uniform
  // mixed: streams are `users` multi-turn sessions of `rounds` rounds (input_len, output_len,
  // question_len, system_len as multi-turn); arrivals as below.
  int arrivals = 8;               // A long-prompt requests
  int arrival_len = 1500;         // their prompt length
  int arrival_output_len = 16;    // their max_tokens
  double arrival_rate = 0.2;      // per second (Poisson)
  double arrival_delay_s = 2.0;   // before the first arrival, so the streams are decoding
};

class Workload {
 public:
  // A finite workload.
  Workload(std::string kind, std::vector<Session> sessions);
  // An endless (size < 0) or bounded stream generated on demand from the index.
  Workload(std::string kind, std::int64_t size, std::function<Session(std::int64_t)> generate);

  const std::string& kind() const { return kind_; }
  // Number of sessions; -1 = endless.
  std::int64_t size() const { return size_; }
  // Session `index`, or nullopt past the end.
  std::optional<Session> session(std::int64_t index) const;
  // Total requests over all sessions; -1 when endless.
  std::int64_t total_requests() const;
  // True when sessions carry timestamps that set their send times.
  bool timed() const { return kind_ == "trace" || kind_ == "mixed"; }

 private:
  std::string kind_;
  std::int64_t size_;
  std::vector<Session> sessions_;
  std::function<Session(std::int64_t)> generate_;
};

// Builds the workload. kInvalidArgument for an unknown kind or an out-of-range option; trace:
// kNotFound / kCorrupt (with the line number) for a missing or malformed file.
Expected<Workload> make_workload(const WorkloadOptions& options);

// Parses "fixed" | "uniform" | "normal".
Expected<LengthDistribution> parse_length_distribution(const std::string& name);

}  // namespace kvstash::bench
