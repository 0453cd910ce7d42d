// The exposition format as Prometheus parses it: HELP/TYPE before samples, escaped label values,
// integers as integers and doubles that read back exactly.
#include "common/prometheus_text.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvstash {
namespace {

TEST(PrometheusText, FamiliesAndSamples) {
  PrometheusText m;
  m.counter("x_total", "Things done", std::uint64_t{18446744073709551615u});
  m.family("y_total", "counter", "By result").sample("result", "ok", std::uint64_t{3}).sample("result", "failed", std::uint64_t{0});
  m.gauge("z", "A ratio", 0.025);
  m.family("v", "gauge", "Signed and flags").sample({{"a", "1"}, {"b", "2"}}, std::int64_t{-3}).sample(true);
  EXPECT_EQ(m.text(),
            "# HELP x_total Things done\n# TYPE x_total counter\nx_total 18446744073709551615\n"
            "# HELP y_total By result\n# TYPE y_total counter\ny_total{result=\"ok\"} 3\ny_total{result=\"failed\"} 0\n"
            "# HELP z A ratio\n# TYPE z gauge\nz 0.025\n"
            "# HELP v Signed and flags\n# TYPE v gauge\nv{a=\"1\",b=\"2\"} -3\nv 1\n");
}

TEST(PrometheusText, LabelValuesAreEscapedAndOddDoublesNamed) {
  PrometheusText m;
  m.family("w", "gauge", "h").sample("url", "http://a\"b\\c\nd", 1.5).sample(std::numeric_limits<double>::infinity());
  EXPECT_EQ(m.text(), "# HELP w h\n# TYPE w gauge\nw{url=\"http://a\\\"b\\\\c\\nd\"} 1.5\nw +Inf\n");
}

}  // namespace
}  // namespace kvstash
