#include "common/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace kvstash {

PrometheusText& PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  family_.assign(name);
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
  return *this;
}

void PrometheusText::begin_sample(std::string_view label, std::string_view label_value) {
  out_ += family_;
  if (label.empty()) return;
  out_ += '{';
  out_ += label;
  out_ += "=\"";
  for (char c : label_value) {
    if (c == '\\' || c == '"') {
      out_ += '\\';
      out_ += c;
    } else if (c == '\n') {
      out_ += "\\n";
    } else {
      out_ += c;
    }
  }
  out_ += "\"}";
}

void PrometheusText::end_sample(std::string_view value_text) {
  out_ += ' ';
  out_ += value_text;
  out_ += '\n';
}

namespace {

std::string format(std::uint64_t v) { return std::to_string(v); }

std::string format(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

}  // namespace

PrometheusText& PrometheusText::sample(std::uint64_t value) { return sample({}, {}, value); }
PrometheusText& PrometheusText::sample(double value) { return sample({}, {}, value); }

PrometheusText& PrometheusText::sample(std::string_view label, std::string_view label_value, std::uint64_t value) {
  begin_sample(label, label_value);
  end_sample(format(value));
  return *this;
}

PrometheusText& PrometheusText::sample(std::string_view label, std::string_view label_value, double value) {
  begin_sample(label, label_value);
  end_sample(format(value));
  return *this;
}

}  // namespace kvstash
