// The values a Jinja template computes with, with Python's semantics as Jinja2 has them:
// undefined, none, bool, int, float, str, list, dict (insertion-ordered, string keys) and
// callables (macros and built-in functions). Lists and dicts are shared by reference, as in
// Python: `ns.items.append(x)` changes the list every holder sees.
//
// Strings are UTF-8; where Python counts characters (length, indexing, slicing) so does this.
//
// Thread safety: a Value is not synchronised; values of one render stay on its thread. Values
// built once (a context) may be read from many renders at once as long as nobody mutates them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvstash::jinja {

class Value;
using List = std::vector<Value>;

// A dict: insertion-ordered keys. Keys are strings; a key of another type (an int in a dict
// literal) is stored as its encoded form (dict_key), which no string key can take.
// A namespace() is a dict whose attributes can be set.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value value);
  bool erase(std::string_view key);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};
using Function = std::function<Value(CallArgs&)>;

// What Jinja2's select, reject, selectattr, rejectattr, map, unique and items filters return: a
// one-shot iterator. It iterates like a list but has no length, no index, no JSON form, and is
// always true, as in Python; `|list` makes it a list.
struct Generator {
  List items;
};

struct Undefined {
  std::string name;  // what was looked up, for the error when it is used
};

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction, kGenerator };

  Value() : data_(Undefined{}) {}
  static Value undefined(std::string name) { Value v; v.data_ = Undefined{std::move(name)}; return v; }
  static Value none() { Value v; v.data_ = nullptr; return v; }
  Value(bool b) : data_(b) {}
  Value(int i) : data_(static_cast<std::int64_t>(i)) {}
  Value(std::int64_t i) : data_(i) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(std::string_view s) : data_(std::string(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(List list) : data_(std::make_shared<List>(std::move(list))) {}
  Value(Dict dict) : data_(std::make_shared<Dict>(std::move(dict))) {}
  static Value function(Function f) { Value v; v.data_ = std::make_shared<Function>(std::move(f)); return v; }
  // A string marked safe (Python's Markup, from |safe or |escape): adding a plain string to it
  // HTML-escapes that string, as Jinja2 does.
  static Value markup(std::string s) { Value v(std::move(s)); v.markup_ = true; return v; }
  bool is_markup() const { return markup_ && is_string(); }
  static Value generator(List items) { Value v; v.data_ = std::make_shared<Generator>(Generator{std::move(items)}); return v; }

  Type type() const { return static_cast<Type>(data_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_none() const { return type() == Type::kNone; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_float() const { return type() == Type::kFloat; }
  bool is_number() const { return is_int() || is_float(); }  // bool is not, unlike Python
  bool is_string() const { return type() == Type::kString; }
  bool is_list() const { return type() == Type::kList; }
  bool is_dict() const { return type() == Type::kDict; }
  bool is_function() const { return type() == Type::kFunction; }
  bool is_generator() const { return type() == Type::kGenerator; }

  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  double as_number() const { return is_int() ? static_cast<double>(as_int()) : as_float(); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<Function>>(data_); }
  const List& generator_items() const { return std::get<std::shared_ptr<Generator>>(data_)->items; }
  const std::string& undefined_name() const { return std::get<Undefined>(data_).name; }

  // Python truthiness (undefined is false).
  bool truthy() const;
  // str(x): what {{ x }} prints. Undefined prints "", none "None", lists and dicts their repr.
  std::string to_str() const;
  // repr(x): strings quoted as Python quotes them.
  std::string repr() const;
  // The type's name in error messages ("str", "list", ...).
  std::string type_name() const;

 private:
  std::variant<Undefined, std::nullptr_t, bool, std::int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Function>, std::shared_ptr<Generator>>
      data_;
  bool markup_ = false;
};

// The stored form of a dict key, and the key back from it.
std::string dict_key(const Value& key);
Value key_value(const std::string& stored);

// Python's == (1 == 1.0, lists and dicts by contents; values of different types are unequal).
bool equals(const Value& a, const Value& b);

// Python's float repr: the shortest text that reads back the same ("1.0", "0.1", "1e-05").
std::string format_float(double d);

// JSON (a request's messages and tools) to values and back. to_json fails (returns false) for
// undefined and callables, as Python's json.dumps does for them.
// Object keys keep their order with ordered_json (as Python's json.loads keeps it); nlohmann::json
// has them sorted already.
Value from_json(const nlohmann::json& json);
Value from_json(const nlohmann::ordered_json& json);

// UTF-8 helpers: the string's code points, and code points back to UTF-8.
std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);

}  // namespace kvstash::jinja
