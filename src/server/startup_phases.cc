#include "server/startup_phases.h"

#include <cstdio>

#include "common/prometheus_text.h"

namespace kvstash::server {
namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

}  // namespace

void StartupPhases::record(std::string name, double seconds) {
  std::lock_guard lock(mu_);
  phases_.emplace_back(std::move(name), seconds);
}

std::string StartupPhases::summary() const {
  std::lock_guard lock(mu_);
  double total = 0;
  std::string parts;
  for (const auto& [name, seconds] : phases_) {
    total += seconds;
    parts += (parts.empty() ? "" : ", ") + name + " " + seconds_text(seconds);
  }
  return "start-up: " + seconds_text(total) + " (" + parts + ")";
}

std::string StartupPhases::render_metrics() const {
  PrometheusText out;
  std::lock_guard lock(mu_);
  double total = 0;
  if (!phases_.empty()) {
    out.family("kvstash_startup_phase_seconds", "gauge", "Seconds each start-up phase took, in the order they ran");
    for (const auto& [name, seconds] : phases_) {
      out.sample("phase", name, seconds);
      total += seconds;
    }
  }
  out.gauge("kvstash_startup_seconds", "Seconds from the start of loading the model to listening", total);
  out.gauge("kvstash_startup_weights_cache_writing",
            "1 while the prepared weights are being written to the cache after start-up", weights_cache_writing_.load());
  out.gauge("kvstash_startup_weights_preparing",
            "1 while weights are copied into huge pages in the background, answered from the file mapping meanwhile",
            weights_preparing_.load());
  out.gauge("kvstash_step_cost_pending",
            "1 until the step budget's cost model is measured (a first start measures it when idle; no budget applies until then)",
            step_cost_pending_.load());
  return out.take();
}

}  // namespace kvstash::server
