// The server's start-up, phase by phase (issue 37): how long mapping the model, its fingerprint,
// preparing (or reading) the weights, opening the KV store's index, allocating the KV pool and
// starting to listen each took, for the start-up log line and the /metrics gauges
// kvstash_startup_phase_seconds{phase="..."} and kvstash_startup_seconds; and whether the
// prepared-weights file is still being written, or weights still copied, after the server started
// listening.
//
// Thread safety: every method may be called from any thread (a mutex guards the phases); /metrics
// renders while serve still records its last phases and the weights writer finishes.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kvstash::server {

class StartupPhases {
 public:
  // Appends a phase in the order they ran; names are short words ("map", "store index").
  void record(std::string name, double seconds);
  // "start-up: 0.412 s (map 0.010 s, fingerprint 0.001 s, ...)".
  std::string summary() const;
  // The gauges, in Prometheus text: one sample per recorded phase, the total, and
  // kvstash_startup_weights_cache_writing (1 while the prepared-weights file is being written).
  std::string render_metrics() const;
  void set_weights_cache_writing(bool writing) { weights_cache_writing_ = writing; }
  bool weights_cache_writing() const { return weights_cache_writing_; }
  // kvstash_startup_weights_preparing: 1 while weights are copied into huge pages in the background
  // (ModelLoadOptions::prepare_in_background) and served from the file mapping meanwhile.
  void set_weights_preparing(bool preparing) { weights_preparing_ = preparing; }
  bool weights_preparing() const { return weights_preparing_; }
  // kvstash_step_cost_pending: 1 while the step budget's cost model is still to be measured (a
  // first start measures it when idle; no step budget applies until then).
  void set_step_cost_pending(bool pending) { step_cost_pending_ = pending; }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, double>> phases_;  // guarded by mu_
  std::atomic<bool> weights_cache_writing_{false};
  std::atomic<bool> weights_preparing_{false};
  std::atomic<bool> step_cost_pending_{false};
};

}  // namespace kvstash::server
