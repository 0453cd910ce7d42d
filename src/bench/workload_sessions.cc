// The conversational workloads: multi-turn, long-doc and agent.
#include <string>

#include "bench/arrival.h"
#include "bench/text_gen.h"
#include "bench/workload_kinds.h"

namespace kvstash::bench {
namespace {

// Stream ids that keep the shared texts independent of the per-session ones.
constexpr std::uint64_t kSystemPromptStream = 0x53595354454dULL;  // "SYSTEM"
constexpr std::uint64_t kDocumentStream = 0x444f43ULL << 32;      // "DOC" << 32, + document index
constexpr std::uint64_t kOrderStream = 0x4f52444552ULL;           // "ORDER"
constexpr std::uint64_t kArrivalStream = 0x415252ULL << 32;       // "ARR" << 32, + arrival index
constexpr std::uint64_t kArrivalTimes = 0x54494d4553ULL;          // "TIMES"

}  // namespace

std::vector<Session> make_multi_turn_sessions(const WorkloadOptions& options) {
  std::string system_prompt;
  if (options.system_len > 0) {
    Rng rng = Rng::for_stream(options.seed, kSystemPromptStream);
    system_prompt = pseudo_english(rng, options.system_len);
  }
  std::vector<Session> sessions;
  for (int u = 0; u < options.users; ++u) {
    Rng rng = Rng::for_stream(options.seed, static_cast<std::uint64_t>(u));
    Session session;
    session.id = u;
    session.max_tokens = draw_length(rng, options.output_len, options);
    if (!system_prompt.empty()) session.messages.push_back({"system", system_prompt});
    // The first turn carries the user's own context (as LMCache's "user info") and a question.
    session.messages.push_back({"user", pseudo_english(rng, draw_length(rng, options.input_len, options)) +
                                            "\n\n" + pseudo_question(rng, options.question_len)});
    for (int r = 1; r < options.rounds; ++r) {
      session.follow_ups.push_back(pseudo_question(rng, draw_length(rng, options.question_len, options)));
    }
    sessions.push_back(std::move(session));
  }
  return sessions;
}

std::vector<Session> make_long_doc_sessions(const WorkloadOptions& options) {
  std::vector<std::string> documents;
  for (int d = 0; d < options.documents; ++d) {
    Rng rng = Rng::for_stream(options.seed, kDocumentStream + static_cast<std::uint64_t>(d));
    documents.push_back(pseudo_english(rng, options.prefix_len));
  }
  // (document, question) pairs in the requested order.
  std::vector<std::pair<int, int>> order;
  if (options.doc_order == "sequential") {
    for (int d = 0; d < options.documents; ++d)
      for (int q = 0; q < options.questions_per_document; ++q) order.emplace_back(d, q);
  } else {
    for (int q = 0; q < options.questions_per_document; ++q)
      for (int d = 0; d < options.documents; ++d) order.emplace_back(d, q);
    if (options.doc_order == "random") {
      Rng rng = Rng::for_stream(options.seed, kOrderStream);
      deterministic_shuffle(order, rng);
    }
  }
  std::vector<Session> sessions;
  for (const auto& [d, q] : order) {
    Rng rng = Rng::for_stream(options.seed, static_cast<std::uint64_t>(d) * 1000003 + static_cast<std::uint64_t>(q));
    Session session;
    session.id = static_cast<std::int64_t>(sessions.size());
    session.max_tokens = draw_length(rng, options.output_len, options);
    // The document first so that every question about it shares the document as a prefix.
    session.messages.push_back(
        {"user", "Read the document and answer the question.\n\nDocument:\n" + documents[static_cast<std::size_t>(d)] +
                     "\n\nQuestion: " + pseudo_question(rng, draw_length(rng, options.input_len, options))});
    sessions.push_back(std::move(session));
  }
  return sessions;
}

std::vector<Session> make_agent_sessions(const WorkloadOptions& options) {
  Rng system_rng = Rng::for_stream(options.seed, kSystemPromptStream);
  const int tools_len = options.system_len > 0 ? options.system_len : 128;
  const std::string system_prompt = "You are an agent with tools. Tools:\n" + pseudo_english(system_rng, tools_len);
  std::vector<Session> sessions;
  for (int a = 0; a < options.users; ++a) {
    Rng rng = Rng::for_stream(options.seed, static_cast<std::uint64_t>(a));
    Session session;
    session.id = a;
    session.max_tokens = draw_length(rng, options.output_len, options);
    session.messages.push_back({"system", system_prompt});
    session.messages.push_back({"user", "Task: " + pseudo_english(rng, draw_length(rng, options.input_len, options))});
    for (int step = 1; step < options.rounds; ++step) {
      // The tool's output is sent as a user turn: not every server accepts role "tool" without
      // a matching tool call, and the context growth is what this workload measures.
      session.follow_ups.push_back("Tool output (step " + std::to_string(step) + "):\n" +
                                   pseudo_english(rng, draw_length(rng, options.tool_output_len, options)) +
                                   "\nContinue.");
    }
    sessions.push_back(std::move(session));
  }
  return sessions;
}

std::vector<Session> make_mixed_sessions(const WorkloadOptions& options) {
  // The streams: the multi-turn workload's users, all from the start.
  WorkloadOptions streams = options;
  std::vector<Session> sessions;
  if (options.users > 0) sessions = make_multi_turn_sessions(streams);
  for (Session& s : sessions) {
    s.timestamp_s = 0;
    s.label = "stream";
  }
  // The arrivals: a long prompt and a question each, at Poisson times after the delay.
  ArrivalSchedule times(options.arrival_rate, /*burstiness=*/1.0, Rng::for_stream(options.seed, kArrivalTimes).next_u64());
  for (int a = 0; a < options.arrivals; ++a) {
    Rng rng = Rng::for_stream(options.seed, kArrivalStream + static_cast<std::uint64_t>(a));
    Session s;
    s.id = static_cast<std::int64_t>(sessions.size());
    s.label = "arrival";
    s.max_tokens = options.arrival_output_len;
    s.timestamp_s = options.arrival_delay_s + times.next_arrival_s();
    s.messages.push_back({"user", pseudo_english(rng, draw_length(rng, options.arrival_len, options)) + "\n\n" +
                                      pseudo_question(rng, options.question_len)});
    sessions.push_back(std::move(s));
  }
  return sessions;
}

}  // namespace kvstash::bench
