#include "jinja/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace kvstash::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    items.emplace_back(std::move(key), std::move(value));
  }
}

bool Dict::erase(std::string_view key) {
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (it->first == key) {
      items.erase(it);
      return true;
    }
  }
  return false;
}

bool Value::truthy() const {
  switch (type()) {
    case Type::kUndefined: case Type::kNone: return false;
    case Type::kBool: return as_bool();
    case Type::kInt: return as_int() != 0;
    case Type::kFloat: return as_float() != 0.0;
    case Type::kString: return !as_string().empty();
    case Type::kList: return !as_list().empty();
    case Type::kDict: return !as_dict().items.empty();
    case Type::kFunction: case Type::kGenerator: return true;
  }
  return false;
}

namespace {
// Marks a stored key that is not a string: "\x01" + the key's repr.
constexpr char kNonStringKey = '\x01';
}  // namespace

std::string dict_key(const Value& key) {
  if (key.is_string()) return key.as_string();
  return std::string(1, kNonStringKey) + key.repr();
}

Value key_value(const std::string& stored) {
  if (stored.empty() || stored[0] != kNonStringKey) return Value(stored);
  const std::string repr = stored.substr(1);
  if (repr == "None") return Value::none();
  if (repr == "True" || repr == "False") return Value(repr == "True");
  if (repr.find_first_of(".en") != std::string::npos) return Value(std::strtod(repr.c_str(), nullptr));
  return Value(static_cast<std::int64_t>(std::strtoll(repr.c_str(), nullptr, 10)));
}

std::string Value::type_name() const {
  switch (type()) {
    case Type::kUndefined: return "undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return "list";
    case Type::kDict: return as_dict().is_namespace ? "Namespace" : "dict";
    case Type::kFunction: return "function";
    case Type::kGenerator: return "generator";
  }
  return "?";
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest precision that reads back the same, as Python's repr picks it.
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf: [-]d[.ddd]e[+-]XX
  std::string s(buf);
  const bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  const std::size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits = s.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(static_cast<std::size_t>(exponent + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent + 1)) + "." +
             digits.substr(static_cast<std::size_t>(exponent + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[8];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

namespace {

void repr_string(const std::string& s, std::string* out) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out->push_back(quote);
  for (unsigned char c : s) {
    if (c == '\\') *out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) { out->push_back('\\'); out->push_back(quote); }
    else if (c == '\n') *out += "\\n";
    else if (c == '\r') *out += "\\r";
    else if (c == '\t') *out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      *out += buf;
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back(quote);
}

void repr_into(const Value& v, std::string* out) {
  switch (v.type()) {
    case Value::Type::kString: repr_string(v.as_string(), out); return;
    case Value::Type::kList: {
      out->push_back('[');
      bool first = true;
      for (const Value& item : v.as_list()) {
        if (!first) *out += ", ";
        first = false;
        repr_into(item, out);
      }
      out->push_back(']');
      return;
    }
    case Value::Type::kDict: {
      if (v.as_dict().is_namespace) {
        *out += "<Namespace ";
        bool first = true;
        for (const auto& [k, item] : v.as_dict().items) {
          if (!first) *out += ", ";
          first = false;
          *out += k + "=";
          repr_into(item, out);
        }
        *out += ">";
        return;
      }
      out->push_back('{');
      bool first = true;
      for (const auto& [k, item] : v.as_dict().items) {
        if (!first) *out += ", ";
        first = false;
        repr_into(key_value(k), out);
        *out += ": ";
        repr_into(item, out);
      }
      out->push_back('}');
      return;
    }
    default: *out += v.to_str(); return;
  }
}

}  // namespace

std::string Value::to_str() const {
  switch (type()) {
    case Type::kUndefined: return "";
    case Type::kNone: return "None";
    case Type::kBool: return as_bool() ? "True" : "False";
    case Type::kInt: return std::to_string(as_int());
    case Type::kFloat: return format_float(as_float());
    case Type::kString: return as_string();
    case Type::kFunction: return "<function>";
    case Type::kGenerator: return "<generator object>";
    default: {
      std::string out;
      repr_into(*this, &out);
      return out;
    }
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(*this, &out);
  return out;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  // Python: True == 1; keep bools apart from ints except against each other.
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined: case Value::Type::kNone: return true;
    case Value::Type::kBool: return a.as_bool() == b.as_bool();
    case Value::Type::kString: return a.as_string() == b.as_string();
    case Value::Type::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Type::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Type::kFunction: return &a.as_function() == &b.as_function();
    case Value::Type::kGenerator: return &a.generator_items() == &b.generator_items();
    default: return false;
  }
}

namespace {

template <typename Json>
Value json_to_value(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(json.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(json.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(static_cast<std::int64_t>(json.template get<std::uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(json.template get<double>());
    case nlohmann::json::value_t::string: return Value(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List list;
      for (const auto& item : json) list.push_back(json_to_value(item));
      return Value(std::move(list));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      for (auto it = json.begin(); it != json.end(); ++it) dict.items.emplace_back(it.key(), json_to_value(it.value()));
      return Value(std::move(dict));
    }
    default: return Value::none();
  }
}

}  // namespace

Value from_json(const nlohmann::json& json) { return json_to_value(json); }
Value from_json(const nlohmann::ordered_json& json) { return json_to_value(json); }

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    if (b0 >= 0x80 && b0 < 0xC0) len = 1;  // stray continuation byte: kept as itself
    if (i + static_cast<std::size_t>(len) > s.size()) len = 1;
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
    out.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

}  // namespace kvstash::jinja
