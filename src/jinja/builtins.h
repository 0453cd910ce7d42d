// Jinja2's built-in filters, tests and operators, and the Python methods of str, list and dict
// that templates call, over Value. Internal to the jinja module (template.cc uses it).
//
// Failures throw Failure (a message without a line); the renderer adds the line.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace kvstash::jinja {

class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bounds that keep a hostile template (a GGUF file's chat template is untrusted input) from
// exhausting memory: a string or a render's output past kMaxStringBytes, a list past
// kMaxListItems, fail. Far above any chat (a request body is at most 8 MiB by default).
inline constexpr std::size_t kMaxStringBytes = std::size_t{32} << 20;
inline constexpr std::size_t kMaxListItems = std::size_t{1} << 22;
// A Failure when a string of `bytes` would pass kMaxStringBytes.
void check_string_size(std::size_t bytes);

// x | name(args). Filters that take a filter or test by name (map, select, ...) resolve it here.
Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
// x is name(args).
bool apply_test(std::string_view name, const Value& input, CallArgs& args);

// obj.name: a dict's method or key, a string's or list's method, a namespace's attribute;
// undefined when there is none (None.x too); a Failure on an undefined obj.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: an item (negative indexes count from the end), or undefined; a Failure on an
// undefined obj.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] of a list or string (null bounds are open).
Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// The binary operators: + - * / // % ** ~ == != < > <= >= in "not in".
Value binary_op(std::string_view op, const Value& a, const Value& b);

// Python's json.dumps(x, ensure_ascii=False, indent, separators, sort_keys), as Hugging Face's
// tojson calls it. indent < 0: none.
std::string to_json(const Value& value, int indent, std::string_view item_sep, std::string_view key_sep,
                    bool sort_keys);

// Iterating a value as a for loop does: a list's items, a dict's keys, a string's characters,
// nothing for undefined; a Failure otherwise.
List iterate(const Value& value);

}  // namespace kvstash::jinja
