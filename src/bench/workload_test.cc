#include "bench/workload.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "bench/text_gen.h"

namespace kvstash::bench {
namespace {

Workload make(const WorkloadOptions& options) {
  auto w = make_workload(options);
  EXPECT_TRUE(w.has_value()) << w.status().to_string();
  return std::move(*w);
}

std::string all_text(const Session& s) {
  std::string text;
  for (const auto& m : s.messages) text += m.role + ":" + m.content + "|";
  for (const auto& f : s.follow_ups) text += f + "|";
  return text + std::to_string(s.max_tokens);
}

TEST(TextGenTest, LengthIsAboutTheRequestedTokens) {
  Rng rng(3);
  for (int n : {1, 10, 100, 1000}) {
    const std::string text = pseudo_english(rng, n);
    EXPECT_EQ(approx_token_count(text), n) << text.substr(0, 80);
  }
  EXPECT_EQ(pseudo_english(rng, 0), "");
  const std::string q = pseudo_question(rng, 20);
  EXPECT_EQ(q.back(), '?');
  EXPECT_NEAR(approx_token_count(q), 20, 1);
}

TEST(WorkloadTest, RandomIsDeterministicFromTheSeed) {
  WorkloadOptions o;
  o.seed = 11;
  o.num_prompts = 5;
  const Workload a = make(o), b = make(o);
  o.seed = 12;
  const Workload c = make(o);
  ASSERT_EQ(a.size(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(all_text(*a.session(i)), all_text(*b.session(i)));
    EXPECT_NE(all_text(*a.session(i)), all_text(*c.session(i)));
  }
  EXPECT_FALSE(a.session(5).has_value());
  EXPECT_EQ(a.total_requests(), 5);
}

TEST(WorkloadTest, RandomLengthDistributions) {
  WorkloadOptions o;
  o.num_prompts = 200;
  o.input_len = 100;
  o.output_len = 40;
  const Workload fixed = make(o);
  for (int i = 0; i < 200; ++i) {
    const Session s = *fixed.session(i);
    EXPECT_EQ(s.max_tokens, 40);
    EXPECT_EQ(approx_token_count(s.messages[0].content), 100);
  }
  o.len_dist = LengthDistribution::kUniform;
  o.len_spread = 0.5;
  const Workload uniform = make(o);
  std::set<int> lengths;
  for (int i = 0; i < 200; ++i) {
    const int m = uniform.session(i)->max_tokens;
    EXPECT_GE(m, 20);
    EXPECT_LE(m, 60);
    lengths.insert(m);
  }
  EXPECT_GT(lengths.size(), 10u);
  o.len_dist = LengthDistribution::kNormal;
  const Workload normal = make(o);
  double sum = 0;
  for (int i = 0; i < 200; ++i) sum += normal.session(i)->max_tokens;
  EXPECT_NEAR(sum / 200, 40, 3);
}

TEST(WorkloadTest, EndlessRandomUnderDuration) {
  WorkloadOptions o;
  o.num_prompts = -1;
  const Workload w = make(o);
  EXPECT_EQ(w.size(), -1);
  EXPECT_TRUE(w.session(1000000).has_value());
  EXPECT_EQ(w.total_requests(), -1);
}

TEST(WorkloadTest, SharedPrefixGroupsShareTheirSystemPrompt) {
  WorkloadOptions o;
  o.kind = "shared-prefix";
  o.groups = 3;
  o.prompts_per_group = 4;
  o.prefix_len = 50;
  const Workload w = make(o);
  ASSERT_EQ(w.size(), 12);
  std::map<std::string, int> per_prefix;
  std::set<std::string> questions;
  for (int i = 0; i < 12; ++i) {
    const Session s = *w.session(i);
    ASSERT_EQ(s.messages.size(), 2u);
    EXPECT_EQ(s.messages[0].role, "system");
    EXPECT_EQ(approx_token_count(s.messages[0].content), 50);
    ++per_prefix[s.messages[0].content];
    questions.insert(s.messages[1].content);
  }
  EXPECT_EQ(per_prefix.size(), 3u);
  for (const auto& [prefix, count] : per_prefix) EXPECT_EQ(count, 4);
  EXPECT_EQ(questions.size(), 12u);
}

TEST(WorkloadTest, MultiTurnHasUsersTimesRounds) {
  WorkloadOptions o;
  o.kind = "multi-turn";
  o.users = 3;
  o.rounds = 5;
  o.system_len = 30;
  const Workload w = make(o);
  ASSERT_EQ(w.size(), 3);
  EXPECT_EQ(w.total_requests(), 15);
  const Session s0 = *w.session(0), s1 = *w.session(1);
  EXPECT_EQ(s0.num_rounds(), 5);
  EXPECT_EQ(s0.messages[0].role, "system");
  EXPECT_EQ(s0.messages[0].content, s1.messages[0].content);  // the shared system prompt
  EXPECT_NE(s0.messages[1].content, s1.messages[1].content);
  for (const auto& q : s0.follow_ups) EXPECT_EQ(q.back(), '?');
}

TEST(WorkloadTest, LongDocOrders) {
  WorkloadOptions o;
  o.kind = "long-doc";
  o.documents = 2;
  o.questions_per_document = 3;
  o.prefix_len = 40;
  auto documents_in_order = [&](const std::string& order) {
    o.doc_order = order;
    const Workload w = make(o);
    EXPECT_EQ(w.size(), 6);
    std::vector<std::string> docs;
    for (int i = 0; i < 6; ++i) {
      const std::string text = w.session(i)->messages[0].content;  // a copy: session(i) is a temporary
      docs.push_back(text.substr(0, text.find("Question:")));
    }
    return docs;
  };
  const auto seq = documents_in_order("sequential");
  EXPECT_EQ(seq[0], seq[1]);
  EXPECT_EQ(seq[1], seq[2]);
  EXPECT_NE(seq[2], seq[3]);
  const auto inter = documents_in_order("interleaved");
  EXPECT_NE(inter[0], inter[1]);
  EXPECT_EQ(inter[0], inter[2]);
  const auto shuffled = documents_in_order("random");
  EXPECT_EQ(std::count(shuffled.begin(), shuffled.end(), seq[0]), 3);
  EXPECT_FALSE(make_workload([&] { auto p = o; p.doc_order = "sideways"; return p; }()).has_value());
}

TEST(WorkloadTest, AgentContextGrowsByToolOutputs) {
  WorkloadOptions o;
  o.kind = "agent";
  o.users = 2;
  o.rounds = 4;
  o.tool_output_len = 60;
  const Workload w = make(o);
  const Session s = *w.session(0);
  ASSERT_EQ(s.follow_ups.size(), 3u);
  for (const auto& tool : s.follow_ups) {
    EXPECT_NE(tool.find("Tool output"), std::string::npos);
    EXPECT_GE(approx_token_count(tool), 60);
  }
}

TEST(WorkloadTest, TraceIsSortedAndRelativeToItsStart) {
  const std::string path = testing::TempDir() + "/bench_trace_test_" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    out << R"({"timestamp": 12.5, "prompt": "second", "max_tokens": 7})" << "\n\n"
        << R"({"timestamp": 10.0, "messages": [{"role": "user", "content": "first"}]})" << "\n";
  }
  WorkloadOptions o;
  o.kind = "trace";
  o.trace_path = path;
  o.output_len = 33;
  const Workload w = make(o);
  ASSERT_EQ(w.size(), 2);
  EXPECT_TRUE(w.timed());
  EXPECT_EQ(w.session(0)->messages[0].content, "first");
  EXPECT_EQ(w.session(0)->timestamp_s, 0.0);
  EXPECT_EQ(w.session(0)->max_tokens, 33);
  EXPECT_EQ(w.session(1)->timestamp_s, 2.5);
  EXPECT_EQ(w.session(1)->max_tokens, 7);
  std::remove(path.c_str());
}

TEST(WorkloadTest, MalformedTraceNamesTheLine) {
  const std::string path = testing::TempDir() + "/bench_trace_bad_" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    out << R"({"timestamp": 1, "prompt": "ok"})" << "\n" << R"({"timestamp": "x", "prompt": "bad"})" << "\n";
  }
  WorkloadOptions o;
  o.kind = "trace";
  o.trace_path = path;
  auto w = make_workload(o);
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(w.status().message().find(":2:"), std::string::npos) << w.status().message();
  o.trace_path = path + ".missing";
  EXPECT_EQ(make_workload(o).status().code(), StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(WorkloadTest, UnknownKindAndBadOptionsAreInvalid) {
  WorkloadOptions o;
  o.kind = "nope";
  EXPECT_EQ(make_workload(o).status().code(), StatusCode::kInvalidArgument);
  o.kind = "random";
  o.input_len = 0;
  EXPECT_EQ(make_workload(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(parse_length_distribution("zipf").has_value());
}

TEST(WorkloadTest, MixedIsStreamsFromTheStartAndPoissonArrivalsAfterTheDelay) {
  WorkloadOptions o;
  o.kind = "mixed";
  o.seed = 11;
  o.users = 3;
  o.rounds = 4;
  o.arrivals = 40;
  o.arrival_len = 300;
  o.arrival_output_len = 5;
  o.arrival_rate = 2.0;
  o.arrival_delay_s = 1.5;
  auto w = make_workload(o);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_TRUE(w->timed());
  ASSERT_EQ(w->size(), 43);
  EXPECT_EQ(w->total_requests(), 3 * 4 + 40);
  double last = -1;
  for (std::int64_t i = 0; i < w->size(); ++i) {
    const Session s = *w->session(i);
    EXPECT_EQ(s.id, i);
    EXPECT_GE(s.timestamp_s, last) << "sessions are claimed in index order: their times must not go back";
    last = s.timestamp_s;
    if (i < 3) {
      EXPECT_EQ(s.label, "stream");
      EXPECT_EQ(s.timestamp_s, 0);
      EXPECT_EQ(s.num_rounds(), 4);
    } else {
      EXPECT_EQ(s.label, "arrival");
      EXPECT_GE(s.timestamp_s, 1.5);
      EXPECT_EQ(s.num_rounds(), 1);
      EXPECT_EQ(s.max_tokens, 5);
      EXPECT_GT(s.messages[0].content.size(), 300u);  // about 300 words of prompt
    }
  }
  // 40 Poisson gaps at 2/s: the last arrival near 1.5 + 20 s (within 5 sd of 39 gaps of mean 0.5).
  EXPECT_NEAR(last, 1.5 + 39 * 0.5, 5 * 0.5 * std::sqrt(39.0));
  // Deterministic from the seed.
  auto again = make_workload(o);
  EXPECT_EQ(again->session(10)->messages[0].content, w->session(10)->messages[0].content);
  EXPECT_EQ(again->session(10)->timestamp_s, w->session(10)->timestamp_s);
  o.arrival_rate = 0;
  EXPECT_EQ(make_workload(o).status().code(), StatusCode::kInvalidArgument);
  o.arrival_rate = 1;
  o.users = 0;
  o.arrivals = 0;
  EXPECT_EQ(make_workload(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(WorkloadTest, ZipfRepeatsQuestionsWithPowerLawFrequencies) {
  WorkloadOptions o;
  o.kind = "zipf";
  o.num_prompts = 2000;
  o.questions = 50;
  o.zipf_exponent = 1.2;
  auto w = make_workload(o);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  ASSERT_EQ(w->size(), 2000);
  std::map<std::string, int> counts;
  for (std::int64_t i = 0; i < w->size(); ++i) {
    const Session s = *w->session(i);
    ASSERT_EQ(s.messages.size(), 1u);
    EXPECT_EQ(s.max_tokens, o.output_len);
    ++counts[s.messages[0].content];
  }
  EXPECT_LE(counts.size(), 50u);
  std::vector<int> sorted;
  for (const auto& [text, n] : counts) sorted.push_back(n);
  std::sort(sorted.rbegin(), sorted.rend());
  // 1/1^1.2 over the sum of 1/k^1.2 for k <= 50 is about 0.26 of the draws; uniform would be 0.02.
  EXPECT_GT(sorted.front(), 2000 * 0.15);
  EXPECT_GT(sorted.front(), 5 * sorted.back());
  // Same seed, same sequence.
  auto again = make_workload(o);
  for (std::int64_t i = 0; i < 20; ++i) EXPECT_EQ(again->session(i)->messages[0].content, w->session(i)->messages[0].content);
  o.questions = 0;
  EXPECT_FALSE(make_workload(o).has_value());
}

}  // namespace
}  // namespace kvstash::bench
