// The builders behind make_workload, one per workload kind (internal to the bench module).
// Each assumes options already validated by make_workload.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/rng.h"
#include "bench/workload.h"

namespace kvstash::bench {

// A length drawn around `mean` by options.len_dist; at least 1.
int draw_length(Rng& rng, int mean, const WorkloadOptions& options);

Session make_random_session(const WorkloadOptions& options, std::int64_t index);
std::vector<Session> make_shared_prefix_sessions(const WorkloadOptions& options);
std::vector<Session> make_multi_turn_sessions(const WorkloadOptions& options);
std::vector<Session> make_long_doc_sessions(const WorkloadOptions& options);
std::vector<Session> make_agent_sessions(const WorkloadOptions& options);
std::vector<Session> make_zipf_sessions(const WorkloadOptions& options);
std::vector<Session> make_mixed_sessions(const WorkloadOptions& options);
Expected<std::vector<Session>> load_trace_sessions(const WorkloadOptions& options);

// Shuffles in place with a Fisher-Yates pass driven by rng (std::shuffle is not portable).
template <typename T>
void deterministic_shuffle(std::vector<T>& items, Rng& rng) {
  for (std::int64_t i = static_cast<std::int64_t>(items.size()) - 1; i > 0; --i) {
    std::swap(items[i], items[rng.uniform_int(0, i)]);
  }
}

}  // namespace kvstash::bench
