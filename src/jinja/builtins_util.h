// Helpers shared by the builtins' files (builtins.cc, strings.cc, filters.cc): argument access and
// the Python string and value operations several builtins need. Internal to the jinja module.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "jinja/builtins.h"
#include "jinja/value.h"

namespace kvstash::jinja::detail {

[[noreturn]] inline void fail(const std::string& message) { throw Failure(message); }

// Positional-or-named argument access for one builtin call.
class Args {
 public:
  Args(CallArgs& args, std::string_view fn) : args_(args), fn_(fn) {}
  const Value* get(std::size_t pos, std::string_view name) const {
    if (pos < args_.positional.size()) return &args_.positional[pos];
    for (const auto& [n, v] : args_.named) {
      if (n == name) return &v;
    }
    return nullptr;
  }
  Value get_or(std::size_t pos, std::string_view name, Value fallback) const {
    const Value* v = get(pos, name);
    return v ? *v : fallback;
  }
  const Value& require(std::size_t pos, std::string_view name) const {
    const Value* v = get(pos, name);
    if (v == nullptr) fail(std::string(fn_) + "() missing argument '" + std::string(name) + "'");
    return *v;
  }
  std::size_t positional_count() const { return args_.positional.size(); }
  CallArgs& raw() { return args_; }

 private:
  CallArgs& args_;
  std::string_view fn_;
};

// Python's str.isspace for one code point.
bool is_py_space(char32_t c);
// str.strip / lstrip / rstrip; chars null = whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right);
// upper() / lower() (ASCII letters; the templates' texts are ASCII keywords).
std::string ascii_case(std::string s, bool upper);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);
// str.replace(from, to, count); count < 0: all.
std::string replace(const std::string& s, const std::string& from, const std::string& to, std::int64_t count);
// str.split(sep, maxsplit); sep null or none: runs of whitespace.
List split(const std::string& s, const Value* sep, std::int64_t maxsplit);
// str.format with {} / {0} / {name} fields.
std::string format_string(const std::string& fmt, CallArgs& args);
// "%s" % args.
std::string percent_format(const std::string& fmt, const Value& args);
// markupsafe's escape: & < > " '.
std::string html_escape(const std::string& s);
// A str's method as a bound callable, or undefined when str has no such method.
Value string_method(const std::string& s, const std::string& name);

// An int (or bool) argument; a Failure naming `what` otherwise.
std::int64_t to_index(const Value& v, std::string_view what);
// Python's ordering: -1, 0, 1; a Failure for values Python does not order.
int compare(const Value& a, const Value& b);
Value lower_if_string(const Value& v, bool case_sensitive);
// "a.b.0": an attribute path as Jinja2's attribute= arguments take it.
Value attribute_path(const Value& v, const std::string& path);
// len(x); undefined has length 0.
std::int64_t length_of(const Value& v);

}  // namespace kvstash::jinja::detail
