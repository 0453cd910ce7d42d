#include "common/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace kvstash {

std::string PrometheusText::Number::format(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  return std::string(buf, result.ptr);
}

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

void PrometheusText::append_escaped(std::string_view label_value) {
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
}

PrometheusText& PrometheusText::sample(Labels labels, const Number& value) {
  out_ += family_;
  char separator = '{';
  for (const auto& [label, label_value] : labels) {
    out_ += separator;
    out_ += label;
    out_ += "=\"";
    append_escaped(label_value);
    out_ += '"';
    separator = ',';
  }
  if (labels.size() != 0) out_ += '}';
  out_ += ' ';
  out_ += value.text;
  out_ += '\n';
  return *this;
}

}  // namespace kvstash
