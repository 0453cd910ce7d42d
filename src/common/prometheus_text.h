// Writes the Prometheus text exposition format (version 0.0.4) that every /metrics endpoint serves:
// a family's HELP and TYPE lines, then its samples, one per line, each family's samples together
// (Prometheus rejects a family whose samples are interleaved with another's). Label values are
// escaped (\\, \", \n) so a worker URL or tier name cannot break the page. Integers print as
// integers, other values as the shortest text that reads back as the same double.
//
// Thread safety: a plain value; each renderer owns its own.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace kvstash {

class PrometheusText {
 public:
  // A sample's value as text: any integer, bool (0/1) or floating-point value.
  struct Number {
    template <typename T>
      requires std::integral<T> || std::floating_point<T>
    Number(T v) : text(format(v)) {}  // NOLINT(google-explicit-constructor): values convert implicitly
    std::string text;

   private:
    static std::string format(bool v) { return v ? "1" : "0"; }
    static std::string format(std::signed_integral auto v) { return std::to_string(static_cast<std::int64_t>(v)); }
    static std::string format(std::unsigned_integral auto v) { return std::to_string(static_cast<std::uint64_t>(v)); }
    static std::string format(double v);
  };
  using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

  // Starts a family: "# HELP name help" and "# TYPE name type" (counter, gauge, histogram).
  PrometheusText& family(std::string_view name, std::string_view type, std::string_view help);
  // A sample of the family last started: without labels, with one label, or with several in order.
  PrometheusText& sample(const Number& value) { return sample(Labels{}, value); }
  PrometheusText& sample(std::string_view label, std::string_view label_value, const Number& value) {
    return sample(Labels{{label, label_value}}, value);
  }
  PrometheusText& sample(Labels labels, const Number& value);
  // A family of one unlabelled sample.
  void counter(std::string_view name, std::string_view help, const Number& value) {
    family(name, "counter", help).sample(value);
  }
  void gauge(std::string_view name, std::string_view help, const Number& value) {
    family(name, "gauge", help).sample(value);
  }
  // Families rendered elsewhere (a histogram's own renderer), appended as they are.
  void append_rendered(std::string_view families) { out_ += families; }

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void append_escaped(std::string_view label_value);

  std::string out_;
  std::string family_;  // name of the family being written
};

}  // namespace kvstash
