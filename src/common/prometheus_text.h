// Writes the Prometheus text exposition format (version 0.0.4) that every /metrics endpoint serves:
// a family's HELP and TYPE lines, then its samples, one per line. Label values are escaped (\\, \",
// \n) so a worker URL or tier name cannot break the page. Integers print as integers, other values
// as the shortest text that reads back as the same double.
//
// Thread safety: a plain value; each renderer owns its own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvstash {

class PrometheusText {
 public:
  // Starts a family: "# HELP name help" and "# TYPE name type" (counter, gauge, histogram).
  PrometheusText& family(std::string_view name, std::string_view type, std::string_view help);
  // A sample of the family last started, without labels or with one label.
  PrometheusText& sample(std::uint64_t value);
  PrometheusText& sample(double value);
  PrometheusText& sample(std::string_view label, std::string_view label_value, std::uint64_t value);
  PrometheusText& sample(std::string_view label, std::string_view label_value, double value);
  // A family of one unlabelled sample.
  void counter(std::string_view name, std::string_view help, std::uint64_t value) {
    family(name, "counter", help).sample(value);
  }
  void gauge(std::string_view name, std::string_view help, double value) { family(name, "gauge", help).sample(value); }

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void begin_sample(std::string_view label, std::string_view label_value);
  void end_sample(std::string_view value_text);

  std::string out_;
  std::string family_;  // name of the family being written
};

}  // namespace kvstash
