#include "bench/workload.h"

#include <algorithm>
#include <cmath>

#include "bench/text_gen.h"
#include "bench/workload_kinds.h"

namespace kvstash::bench {

Workload::Workload(std::string kind, std::vector<Session> sessions)
    : kind_(std::move(kind)),
      size_(static_cast<std::int64_t>(sessions.size())),
      sessions_(std::move(sessions)) {}

Workload::Workload(std::string kind, std::int64_t size, std::function<Session(std::int64_t)> generate)
    : kind_(std::move(kind)), size_(size), generate_(std::move(generate)) {}

std::optional<Session> Workload::session(std::int64_t index) const {
  if (index < 0 || (size_ >= 0 && index >= size_)) return std::nullopt;
  if (generate_) return generate_(index);
  return sessions_[static_cast<std::size_t>(index)];
}

std::int64_t Workload::total_requests() const {
  if (size_ < 0) return -1;
  if (generate_) return size_;  // generated workloads are single-request
  std::int64_t total = 0;
  for (const auto& s : sessions_) total += s.num_rounds();
  return total;
}

int draw_length(Rng& rng, int mean, const WorkloadOptions& options) {
  double length = mean;
  switch (options.len_dist) {
    case LengthDistribution::kFixed:
      break;
    case LengthDistribution::kUniform:
      length = mean * (1 - options.len_spread + 2 * options.len_spread * rng.uniform());
      break;
    case LengthDistribution::kNormal:
      length = mean + rng.normal() * mean * options.len_spread / 2;
      break;
  }
  return std::max(1, static_cast<int>(std::lround(length)));
}

Session make_random_session(const WorkloadOptions& options, std::int64_t index) {
  Rng rng = Rng::for_stream(options.seed, static_cast<std::uint64_t>(index));
  Session session;
  session.id = index;
  const int input_len = draw_length(rng, options.input_len, options);
  session.max_tokens = draw_length(rng, options.output_len, options);
  session.messages.push_back({"user", pseudo_english(rng, input_len)});
  return session;
}

std::vector<Session> make_zipf_sessions(const WorkloadOptions& options) {
  // The Q questions, each fixed by its own stream, so that a question's text (and its max_tokens)
  // is the same whenever it is drawn: repeats are byte-identical requests.
  std::vector<std::string> questions;
  std::vector<double> cdf;
  double total = 0;
  for (int q = 0; q < options.questions; ++q) {
    Rng rng = Rng::for_stream(options.seed, 0x5A49504600000000ULL + static_cast<std::uint64_t>(q));  // "ZIPF"
    questions.push_back(pseudo_question(rng, options.input_len));
    total += 1.0 / std::pow(static_cast<double>(q + 1), options.zipf_exponent);
    cdf.push_back(total);
  }
  Rng draw = Rng::for_stream(options.seed, 0x5A49504644524157ULL);  // "ZIPFDRAW"
  std::vector<Session> sessions;
  for (std::int64_t i = 0; i < options.num_prompts; ++i) {
    const double u = draw.uniform() * total;
    const auto q = static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    Session session;
    session.id = i;
    session.max_tokens = options.output_len;
    session.messages.push_back({"user", questions[std::min(q, questions.size() - 1)]});
    sessions.push_back(std::move(session));
  }
  return sessions;
}

std::vector<Session> make_shared_prefix_sessions(const WorkloadOptions& options) {
  std::vector<Session> sessions;
  Rng prefix_rng = Rng::for_stream(options.seed, 0x5052454649ULL);  // "PREFI"
  std::vector<std::string> prefixes;
  for (int g = 0; g < options.groups; ++g) {
    prefixes.push_back(pseudo_english(prefix_rng, options.prefix_len));
  }
  for (int g = 0; g < options.groups; ++g) {
    for (int p = 0; p < options.prompts_per_group; ++p) {
      const std::int64_t index = static_cast<std::int64_t>(g) * options.prompts_per_group + p;
      Rng rng = Rng::for_stream(options.seed, static_cast<std::uint64_t>(index));
      Session session;
      session.max_tokens = draw_length(rng, options.output_len, options);
      session.messages.push_back({"system", prefixes[static_cast<std::size_t>(g)]});
      session.messages.push_back({"user", pseudo_question(rng, draw_length(rng, options.input_len, options))});
      sessions.push_back(std::move(session));
    }
  }
  // Mixed order, as real traffic would arrive; the first request of a group warms its prefix.
  Rng order_rng = Rng::for_stream(options.seed, 0x4f52444552ULL);  // "ORDER"
  deterministic_shuffle(sessions, order_rng);
  for (std::size_t i = 0; i < sessions.size(); ++i) sessions[i].id = static_cast<std::int64_t>(i);
  return sessions;
}

Expected<LengthDistribution> parse_length_distribution(const std::string& name) {
  if (name == "fixed") return LengthDistribution::kFixed;
  if (name == "uniform") return LengthDistribution::kUniform;
  if (name == "normal") return LengthDistribution::kNormal;
  return invalid_argument("--len-dist must be fixed, uniform or normal, not '" + name + "'");
}

namespace {

Status validate(const WorkloadOptions& o) {
  if (o.input_len < 1 || o.output_len < 1) return invalid_argument("--input-len and --output-len must be >= 1");
  if (o.len_spread < 0 || o.len_spread > 1) return invalid_argument("--len-spread must be in [0, 1]");
  if (o.kind == "shared-prefix" && (o.groups < 1 || o.prompts_per_group < 1 || o.prefix_len < 1)) {
    return invalid_argument("shared-prefix needs --groups, --prompts-per-group, --prefix-len >= 1");
  }
  if ((o.kind == "multi-turn" || o.kind == "agent") && (o.users < 1 || o.rounds < 1)) {
    return invalid_argument(o.kind + " needs --users and --rounds >= 1");
  }
  if (o.kind == "long-doc") {
    if (o.documents < 1 || o.questions_per_document < 1 || o.prefix_len < 1) {
      return invalid_argument("long-doc needs --documents, --questions, --doc-len >= 1");
    }
    if (o.doc_order != "sequential" && o.doc_order != "interleaved" && o.doc_order != "random") {
      return invalid_argument("--order must be sequential, interleaved or random");
    }
  }
  if (o.kind == "trace" && o.trace_path.empty()) return invalid_argument("trace needs a file: --trace FILE.jsonl");
  if (o.kind == "mixed") {
    if (o.users < 0 || o.rounds < 1 || o.arrivals < 0 || o.users + o.arrivals < 1) {
      return invalid_argument("mixed needs --users >= 0, --rounds >= 1, --arrivals >= 0, and some traffic");
    }
    if (o.arrival_len < 1 || o.arrival_output_len < 1 || !(o.arrival_rate > 0) || !(o.arrival_delay_s >= 0)) {
      return invalid_argument("mixed needs --arrival-len, --arrival-output-len >= 1, --arrival-rate > 0, --arrival-delay >= 0");
    }
  }
  if (o.kind == "zipf" && (o.questions < 1 || !(o.zipf_exponent >= 0) || o.num_prompts < 1)) {
    return invalid_argument("zipf needs --questions >= 1, --zipf-exponent >= 0 and --num-prompts >= 1");
  }
  return Status::ok();
}

}  // namespace

Expected<Workload> make_workload(const WorkloadOptions& options) {
  KVSTASH_RETURN_IF_ERROR(validate(options));
  const std::string& kind = options.kind;
  if (kind == "random") {
    return Workload(kind, options.num_prompts,
                    [options](std::int64_t i) { return make_random_session(options, i); });
  }
  if (kind == "shared-prefix") return Workload(kind, make_shared_prefix_sessions(options));
  if (kind == "multi-turn") return Workload(kind, make_multi_turn_sessions(options));
  if (kind == "long-doc") return Workload(kind, make_long_doc_sessions(options));
  if (kind == "agent") return Workload(kind, make_agent_sessions(options));
  if (kind == "zipf") return Workload(kind, make_zipf_sessions(options));
  if (kind == "mixed") return Workload(kind, make_mixed_sessions(options));
  if (kind == "trace") {
    auto sessions = load_trace_sessions(options);
    if (!sessions) return sessions.status();
    return Workload(kind, std::move(*sessions));
  }
  return invalid_argument("unknown workload '" + kind +
                          "' (random, shared-prefix, multi-turn, long-doc, agent, trace, zipf, mixed)");
}

}  // namespace kvstash::bench
