// The start-up phases as a log line and as /metrics gauges.
#include "server/startup_phases.h"

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

TEST(StartupPhases, SummaryListsEveryPhaseInOrderWithTheTotal) {
  StartupPhases p;
  p.record("map", 0.0125);
  p.record("prepare", 0.25);
  p.record("listening", 0.001);
  EXPECT_EQ(p.summary(), "start-up: 0.264 s (map 0.013 s, prepare 0.250 s, listening 0.001 s)");
}

TEST(StartupPhases, MetricsHaveAGaugePerPhase) {
  StartupPhases p;
  p.record("map", 0.5);
  p.record("store index", 0.25);
  std::string text = p.render_metrics();
  EXPECT_NE(text.find("# TYPE kvstash_startup_phase_seconds gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvstash_startup_phase_seconds{phase=\"map\"} 0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvstash_startup_phase_seconds{phase=\"store index\"} 0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvstash_startup_seconds 0.75\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvstash_startup_weights_cache_writing 0\n"), std::string::npos) << text;
  p.set_weights_cache_writing(true);
  EXPECT_NE(p.render_metrics().find("kvstash_startup_weights_cache_writing 1\n"), std::string::npos);
  EXPECT_NE(text.find("kvstash_startup_weights_preparing 0\n"), std::string::npos) << text;
  p.set_weights_preparing(true);
  EXPECT_NE(p.render_metrics().find("kvstash_startup_weights_preparing 1\n"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::server
