#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/builtins_util.h"

namespace kvstash::jinja {
namespace detail {

std::int64_t to_index(const Value& v, std::string_view what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  fail(std::string(what) + " must be an integer, not " + v.type_name());
}

// Python's ordering for sort/min/max and < >: numbers, strings, lists of those.
int compare(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const double x = a.is_bool() ? a.as_bool() : a.as_number();
    const double y = b.is_bool() ? b.as_bool() : b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (int c = compare(x[i], y[i])) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value lower_if_string(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(ascii_case(v.as_string(), false)) : v;
}

// "a.b.0": an attribute path as Jinja2's attribute= arguments take it.
Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      cur = get_item(cur, Value(static_cast<std::int64_t>(std::stoll(part))));
    } else {
      cur = get_item(cur, Value(part));
    }
    if (dot == std::string::npos) return cur;
    if (cur.is_undefined()) return cur;
    pos = dot + 1;
  }
}

std::int64_t length_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::kString: return static_cast<std::int64_t>(to_u32(v.as_string()).size());
    case Value::Type::kList: return static_cast<std::int64_t>(v.as_list().size());
    case Value::Type::kDict: return static_cast<std::int64_t>(v.as_dict().items.size());
    case Value::Type::kUndefined: return 0;
    default: fail("object of type '" + v.type_name() + "' has no len()");
  }
}


}  // namespace detail

using namespace detail;

namespace {

void json_string(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void json_into(const Value& v, int indent, int depth, std::string_view item_sep, std::string_view key_sep,
               bool sort_keys, std::string* out) {
  const auto newline = [&](int level) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<std::size_t>(indent * level), ' ');
  };
  switch (v.type()) {
    case Value::Type::kNone: *out += "null"; return;
    case Value::Type::kBool: *out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::kInt: *out += std::to_string(v.as_int()); return;
    case Value::Type::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) *out += "NaN";
      else if (std::isinf(d)) *out += d > 0 ? "Infinity" : "-Infinity";
      else *out += format_float(d);
      return;
    }
    case Value::Type::kString: json_string(v.as_string(), out); return;
    case Value::Type::kList: {
      const List& list = v.as_list();
      if (list.empty()) { *out += "[]"; return; }
      out->push_back('[');
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        json_into(list[i], indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      newline(depth);
      out->push_back(']');
      return;
    }
    case Value::Type::kDict: {
      if (v.as_dict().is_namespace) fail("Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.as_dict().items) items.push_back(&item);
      if (items.empty()) { *out += "{}"; return; }
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out->push_back('{');
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        const Value key = key_value(items[i]->first);  // json.dumps writes other keys as strings
        json_string(key.is_bool() ? (key.as_bool() ? "true" : "false") : key.is_none() ? "null" : key.to_str(), out);
        *out += key_sep;
        json_into(items[i]->second, indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      newline(depth);
      out->push_back('}');
      return;
    }
    default: fail("Object of type " + v.type_name() + " is not JSON serializable");
  }
}


bool is_mutating(const Value& obj, const std::string& name) {
  static const char* kList[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  static const char* kDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
  const auto in = [&](const auto& names) {
    return std::find_if(std::begin(names), std::end(names), [&](const char* m) { return name == m; }) != std::end(names);
  };
  return obj.is_list() ? in(kList) : in(kDict);
}

Value list_method(const Value& obj, const std::string& name) {
  if (is_mutating(obj, name)) {
    return Value::function([name](CallArgs&) -> Value {
      fail("access to attribute '" + name + "' of 'list' object is unsafe (the sandbox forbids changing a list)");
    });
  }
  if (name != "index" && name != "count") return Value::undefined("list." + name);
  const List list = obj.as_list();
  return Value::function([list, name](CallArgs& call) -> Value {
    const Value& x = Args(call, name).require(0, "value");
    std::int64_t n = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (equals(list[i], x)) {
        if (name == "index") return Value(static_cast<std::int64_t>(i));
        ++n;
      }
    }
    if (name == "index") fail("value is not in list");
    return Value(n);
  });
}

Value dict_method(const Value& obj, const std::string& name) {
  if (is_mutating(obj, name)) {
    return Value::function([name](CallArgs&) -> Value {
      fail("access to attribute '" + name + "' of 'dict' object is unsafe (the sandbox forbids changing a dict)");
    });
  }
  if (name != "get" && name != "items" && name != "keys" && name != "values" && name != "copy") return Value();
  return Value::function([obj, name](CallArgs& call) -> Value {
    const Dict& d = obj.as_dict();
    if (name == "get") {
      Args args(call, "get");
      if (const Value* v = d.find(dict_key(args.require(0, "key")))) return *v;
      return args.get_or(1, "default", Value::none());
    }
    List out;
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.emplace_back(List{key_value(k), v});
      else if (name == "keys") out.push_back(key_value(k));
      else if (name == "values") out.push_back(v);
    }
    if (name == "copy") return Value(Dict(d));
    return Value(std::move(out));
  });
}


}  // namespace

List iterate(const Value& value) {
  switch (value.type()) {
    case Value::Type::kList: return value.as_list();
    case Value::Type::kUndefined: return {};
    case Value::Type::kDict: {
      List keys;
      for (const auto& [k, v] : value.as_dict().items) keys.push_back(key_value(k));
      return keys;
    }
    case Value::Type::kGenerator: return value.generator_items();
    case Value::Type::kString: {
      List chars;
      for (char32_t c : to_u32(value.as_string())) chars.emplace_back(to_utf8(std::u32string(1, c)));
      return chars;
    }
    default: fail("'" + value.type_name() + "' object is not iterable");
  }
}

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      fail("'" + (obj.undefined_name().empty() ? std::string("value") : obj.undefined_name()) + "' is undefined");
    case Value::Type::kDict: {
      const Dict& d = obj.as_dict();
      if (!d.is_namespace) {
        Value method = dict_method(obj, name);
        if (!method.is_undefined()) return method;
      }
      if (const Value* v = d.find(name)) return *v;
      return Value::undefined(name);
    }
    case Value::Type::kString: return string_method(obj.as_string(), name);
    case Value::Type::kList: return list_method(obj, name);
    default: return Value::undefined(name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      fail("'" + (obj.undefined_name().empty() ? std::string("value") : obj.undefined_name()) + "' is undefined");
    case Value::Type::kDict:
      if (const Value* v = obj.as_dict().find(dict_key(key))) return *v;
      if (key.is_string() && !obj.as_dict().is_namespace) return dict_method(obj, key.as_string());
      return Value::undefined(key.to_str());
    case Value::Type::kGenerator: fail("'generator' object is not subscriptable");
    case Value::Type::kList:
    case Value::Type::kString: {
      if (!key.is_int()) {
        if (key.is_string()) return get_attribute(obj, key.as_string());
        return Value::undefined(key.to_str());
      }
      const bool is_list = obj.is_list();
      const std::u32string chars = is_list ? std::u32string() : to_u32(obj.as_string());
      const auto size = static_cast<std::int64_t>(is_list ? obj.as_list().size() : chars.size());
      std::int64_t i = key.as_int();
      if (i < 0) i += size;
      if (i < 0 || i >= size) return Value::undefined("index " + key.to_str());
      if (is_list) return obj.as_list()[static_cast<std::size_t>(i)];
      return Value(to_utf8(std::u32string(1, chars[static_cast<std::size_t>(i)])));
    }
    default: return Value::undefined(key.to_str());
  }
}

Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step_value) {
  if (!obj.is_list() && !obj.is_string()) {
    if (obj.is_undefined()) fail("'" + obj.undefined_name() + "' is undefined");
    fail("'" + obj.type_name() + "' object is not subscriptable");
  }
  const std::u32string chars = obj.is_string() ? to_u32(obj.as_string()) : std::u32string();
  const auto size = static_cast<std::int64_t>(obj.is_list() ? obj.as_list().size() : chars.size());
  const std::int64_t step = step_value && !step_value->is_none() ? to_index(*step_value, "slice step") : 1;
  if (step == 0) fail("slice step cannot be zero");
  const auto bound = [&](const Value* v, std::int64_t fallback) -> std::int64_t {
    if (v == nullptr || v->is_none()) return fallback;
    std::int64_t i = to_index(*v, "slice index");
    if (i < 0) i += size;
    if (step > 0) return std::clamp<std::int64_t>(i, 0, size);
    return std::clamp<std::int64_t>(i, -1, size - 1);
  };
  const std::int64_t b = bound(start, step > 0 ? 0 : size - 1);
  const std::int64_t e = bound(stop, step > 0 ? size : -1);
  List items;
  std::u32string out;
  for (std::int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    if (obj.is_list()) items.push_back(obj.as_list()[static_cast<std::size_t>(i)]);
    else out.push_back(chars[static_cast<std::size_t>(i)]);
  }
  if (obj.is_list()) return Value(std::move(items));
  return Value(to_utf8(out));
}

std::string to_json(const Value& value, int indent, std::string_view item_sep, std::string_view key_sep,
                    bool sort_keys) {
  std::string out;
  json_into(value, indent, 0, item_sep, key_sep, sort_keys, &out);
  return out;
}

void check_string_size(std::size_t bytes) {
  if (bytes > kMaxStringBytes) fail("string of " + std::to_string(bytes) + " bytes is too large");
}

namespace {

// Python's ints are unbounded; ours are 64-bit, and a result that does not fit is an error
// (never undefined behaviour).
std::int64_t checked(bool overflow, std::int64_t result, std::string_view op) {
  if (overflow) fail("integer overflow in '" + std::string(op) + "'");
  return result;
}

void check_list_size(std::size_t items) {
  if (items > kMaxListItems) fail("list of " + std::to_string(items) + " items is too large");
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  const auto type_error = [&]() -> Value {
    if (a.is_undefined()) fail("'" + a.undefined_name() + "' is undefined");
    if (b.is_undefined()) fail("'" + b.undefined_name() + "' is undefined");
    fail("unsupported operand type(s) for " + std::string(op) + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  const bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  const auto num = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number(); };
  const auto integer = [](const Value& v) -> std::int64_t { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); };
  const bool ints = numbers && !a.is_float() && !b.is_float();
  if (op == "~") {
    std::string left = a.to_str(), right = b.to_str();
    check_string_size(left.size() + right.size());
    return Value(left + right);
  }
  if (op == "==") return Value(equals(a, b));
  if (op == "!=") return Value(!equals(a, b));
  if (op == "<") return Value(compare(a, b) < 0);
  if (op == ">") return Value(compare(a, b) > 0);
  if (op == "<=") return Value(compare(a, b) <= 0);
  if (op == ">=") return Value(compare(a, b) >= 0);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) fail("'in <string>' requires string as left operand, not " + a.type_name());
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_list()) {
      found = std::any_of(b.as_list().begin(), b.as_list().end(), [&](const Value& v) { return equals(v, a); });
    } else if (b.is_dict()) {
      found = b.as_dict().find(dict_key(a)) != nullptr;
    } else if (b.is_generator()) {
      const List& items = b.generator_items();
      found = std::any_of(items.begin(), items.end(), [&](const Value& v) { return equals(v, a); });
    } else if (!b.is_undefined()) {
      fail("argument of type '" + b.type_name() + "' is not iterable");
    }
    return Value(op == "in" ? found : !found);
  }
  std::int64_t r = 0;
  if (op == "+") {
    if (ints) {
      const bool overflow = __builtin_add_overflow(integer(a), integer(b), &r);  // r is read after this
      return Value(checked(overflow, r, op));
    }
    if (numbers) return Value(num(a) + num(b));
    if (a.is_string() && b.is_string()) {
      check_string_size(a.as_string().size() + b.as_string().size());
      if (!a.is_markup() && !b.is_markup()) return Value(a.as_string() + b.as_string());
      // Markup + str escapes the str (markupsafe's __add__ / __radd__).
      return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                           (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
    }
    if (a.is_list() && b.is_list()) {
      check_list_size(a.as_list().size() + b.as_list().size());
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
    return type_error();
  }
  if (op == "-") {
    if (ints) {
      const bool overflow = __builtin_sub_overflow(integer(a), integer(b), &r);  // r is read after this
      return Value(checked(overflow, r, op));
    }
    if (numbers) return Value(num(a) - num(b));
    return type_error();
  }
  if (op == "*") {
    if (ints) {
      const bool overflow = __builtin_mul_overflow(integer(a), integer(b), &r);  // r is read after this
      return Value(checked(overflow, r, op));
    }
    if (numbers) return Value(num(a) * num(b));
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq == nullptr || !(count->is_int() || count->is_bool())) return type_error();
    const std::int64_t n = integer(*count);
    const std::size_t unit = seq->is_string() ? seq->as_string().size() : seq->as_list().size();
    if (n > 0 && unit > 0) {
      const std::size_t limit = seq->is_string() ? kMaxStringBytes : kMaxListItems;
      if (static_cast<std::uint64_t>(n) > limit / unit) fail("'*' would make a " + seq->type_name() + " too large");
    }
    if (seq->is_string()) {
      std::string out;
      for (std::int64_t i = 0; i < n; ++i) out += seq->as_string();
      return Value(out);
    }
    List out;
    for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->as_list().begin(), seq->as_list().end());
    return Value(std::move(out));
  }
  if (op == "/") {
    if (!numbers) return type_error();
    if (num(b) == 0) fail("division by zero");
    return Value(num(a) / num(b));
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
    if (!numbers) return type_error();
    if (num(b) == 0) fail("integer division or modulo by zero");
    if (ints) {
      const std::int64_t x = integer(a);
      const std::int64_t y = integer(b);
      if (x == INT64_MIN && y == -1) fail("integer overflow in '" + std::string(op) + "'");
      std::int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // Python floors
      return op == "//" ? Value(q) : Value(x - q * y);
    }
    const double q = std::floor(num(a) / num(b));
    return op == "//" ? Value(q) : Value(num(a) - q * num(b));
  }
  if (op == "**") {
    if (!numbers) return type_error();
    if (ints && integer(b) >= 0) {
      // Square and multiply: 64 steps at most, each checked.
      std::int64_t result = 1, base = integer(a);
      bool overflow = false;
      for (std::int64_t e = integer(b); e > 0; e >>= 1) {
        if (e & 1) overflow |= __builtin_mul_overflow(result, base, &result);
        if (e > 1) overflow |= __builtin_mul_overflow(base, base, &base);
        if (overflow) break;
      }
      return Value(checked(overflow, result, op));
    }
    return Value(std::pow(num(a), num(b)));
  }
  fail("unknown operator " + std::string(op));
}


}  // namespace kvstash::jinja
