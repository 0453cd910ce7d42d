// Jinja2's built-in filters and tests.
#include <algorithm>
#include <cmath>

#include "jinja/builtins_util.h"
#include "jinja/parser.h"

namespace kvstash::jinja {

using namespace detail;

namespace {


// map / select / reject / selectattr / rejectattr: the test or filter named by argument `first`.
bool run_test_from(Args& args, std::size_t first, const Value& item) {
  if (args.positional_count() <= first) return item.truthy();
  const std::string test = args.raw().positional[first].to_str();
  if (!is_known_test(test)) fail("unsupported test '" + test + "'");
  CallArgs rest;
  rest.positional.assign(args.raw().positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.raw().positional.end());
  return apply_test(test, item, rest);
}

Value filter_select(std::string_view name, const Value& input, Args& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "select" || name == "selectattr";
  List out;
  if (!input.truthy()) return Value::generator({});  // Jinja2: "if value: for item in value"
  for (const Value& item : iterate(input)) {
    const Value subject = by_attribute ? attribute_path(item, args.require(0, "attribute").to_str()) : item;
    if (run_test_from(args, by_attribute ? 1 : 0, subject) == keep_if) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value filter_map(const Value& input, Args& args) {
  List out;
  if (!input.truthy()) return Value::generator({});
  if (const Value* attribute = args.get(99, "attribute")) {
    const Value* fallback = args.get(99, "default");
    for (const Value& item : iterate(input)) {
      Value v = attribute_path(item, attribute->to_str());
      if (v.is_undefined() && fallback) v = *fallback;
      out.push_back(std::move(v));
    }
    return Value::generator(std::move(out));
  }
  const std::string filter = args.require(0, "filter").to_str();
  if (!is_known_filter(filter)) fail("unsupported filter '" + filter + "'");
  for (const Value& item : iterate(input)) {
    CallArgs rest;
    rest.positional.assign(args.raw().positional.begin() + 1, args.raw().positional.end());
    rest.named = args.raw().named;
    out.push_back(apply_filter(filter, item, rest));
  }
  return Value::generator(std::move(out));
}

Value filter_sort(std::string_view name, const Value& input, Args& args) {
  // sort(reverse, case_sensitive, attribute); unique(case_sensitive, attribute);
  // dictsort(case_sensitive, by, reverse).
  List items = iterate(input);
  const bool dictsort = name == "dictsort";
  const bool reverse = dictsort ? args.get_or(2, "reverse", Value(false)).truthy()
                                : name == "sort" && args.get_or(0, "reverse", Value(false)).truthy();
  const bool case_sensitive = args.get_or(dictsort ? 0 : (name == "sort" ? 1 : 0), "case_sensitive", Value(false)).truthy();
  const Value* attribute = args.get(name == "sort" ? 2 : (name == "unique" ? 1 : 99), "attribute");
  if (dictsort) {
    if (!input.is_dict()) fail("dictsort: a dict is required");
    items.clear();
    for (const auto& [k, v] : input.as_dict().items) items.emplace_back(List{key_value(k), v});
  }
  const bool by_value = dictsort && args.get_or(1, "by", Value("key")).to_str() == "value";
  const auto key = [&](const Value& v) {
    Value k = v;
    if (dictsort) k = v.as_list()[by_value ? 1 : 0];
    else if (attribute) k = attribute_path(v, attribute->to_str());
    return lower_if_string(k, case_sensitive);
  };
  if (name == "unique") {
    List out;
    std::vector<Value> seen;
    for (const Value& item : items) {
      const Value k = key(item);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
        seen.push_back(k);
        out.push_back(item);
      }
    }
    return Value::generator(std::move(out));
  }
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
  });
  return Value(std::move(items));
}

std::string indent(const std::string& text, const Value& width, bool first, bool blank) {
  const std::string pad = width.is_string() ? width.as_string() : std::string(static_cast<std::size_t>(to_index(width, "width")), ' ');
  std::vector<std::string> lines;
  const std::string s = text + "\n";
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t e = s.find_first_of("\r\n", pos);
    lines.push_back(s.substr(pos, e - pos));
    pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
  }
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return out;
}

constexpr std::string_view kFilters[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "format",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
    "title", "tojson", "trim", "unique", "upper", "wordcount",
};
constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float", "ge",
    "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas",
    "sequence", "string", "true", "undefined", "upper", "==", "!=", "<", ">", "<=", ">=",
};


}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}


bool apply_test(std::string_view name, const Value& v, CallArgs& call) {
  Args args(call, name);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined() || v.is_generator();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && ascii_case(v.as_string(), false) == v.as_string();
  if (name == "upper") return v.is_string() && ascii_case(v.as_string(), true) == v.as_string();
  if (name == "even" || name == "odd") {
    const std::int64_t i = to_index(v, "value");
    return name == "even" ? i % 2 == 0 : i % 2 != 0;
  }
  if (name == "divisibleby") {
    const std::int64_t d = to_index(args.require(0, "num"), "num");
    if (d == 0) fail("integer division or modulo by zero");
    return to_index(v, "value") % d == 0;
  }
  const Value& other = args.require(0, "other");
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
  if (name == "ne" || name == "!=") return !equals(v, other);
  if (name == "sameas") {
    if (v.is_none() || v.is_bool()) return equals(v, other) && v.type() == other.type();
    return false;
  }
  if (name == "in") return binary_op("in", v, other).as_bool();
  if (name == "lt" || name == "<") return compare(v, other) < 0;
  if (name == "le" || name == "<=") return compare(v, other) <= 0;
  if (name == "gt" || name == ">") return compare(v, other) > 0;
  if (name == "ge" || name == ">=") return compare(v, other) >= 0;
  fail("unsupported test '" + std::string(name) + "'");
}

Value apply_filter(std::string_view name, const Value& input, CallArgs& call) {
  Args args(call, name);
  if (name == "default" || name == "d") {
    const bool boolean = args.get_or(1, "boolean", Value(false)).truthy();
    if (input.is_undefined() || (boolean && !input.truthy())) return args.get_or(0, "default_value", Value(""));
    return input;
  }
  if (name == "length" || name == "count") return Value(length_of(input));
  if (name == "safe") return input.is_markup() ? input : Value::markup(input.to_str());
  if (name == "string") return Value(input.to_str());
  if (name == "tojson") {
    const Value indent = args.get_or(1, "indent", Value::none());
    const Value separators = args.get_or(2, "separators", Value::none());
    const bool sort_keys = args.get_or(3, "sort_keys", Value(false)).truthy();
    if (!indent.is_none() && !indent.is_int()) fail("tojson: indent must be an integer");
    const int width = indent.is_none() ? -1 : static_cast<int>(indent.as_int());
    std::string item_sep = width < 0 ? ", " : ",";
    std::string key_sep = ": ";
    if (separators.is_list() && separators.as_list().size() == 2) {
      item_sep = separators.as_list()[0].to_str();
      key_sep = separators.as_list()[1].to_str();
    }
    return Value(to_json(input, width, item_sep, key_sep, sort_keys));
  }
  if (name == "trim") return Value(strip(input.to_str(), args.get(0, "chars"), true, true));
  if (name == "upper") return Value(ascii_case(input.to_str(), true));
  if (name == "lower") return Value(ascii_case(input.to_str(), false));
  if (name == "capitalize") return Value(capitalize(input.to_str()));
  if (name == "title") return Value(title(input.to_str()));
  if (name == "e" || name == "escape") return input.is_markup() ? input : Value::markup(html_escape(input.to_str()));
  if (name == "replace") {
    return Value(replace(input.to_str(), args.require(0, "old").to_str(), args.require(1, "new").to_str(),
                         to_index(args.get_or(2, "count", Value(-1)), "count")));
  }
  if (name == "join") {
    const std::string sep = args.get_or(0, "d", Value("")).to_str();
    const Value* attribute = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(input)) {
      if (!first) out += sep;
      first = false;
      out += (attribute ? attribute_path(item, attribute->to_str()) : item).to_str();
      check_string_size(out.size());
    }
    return Value(out);
  }
  if (name == "list") return Value(iterate(input));
  if (name == "items") {
    if (input.is_undefined()) return Value::generator({});
    if (!input.is_dict()) fail("items: a dict is required, not " + input.type_name());
    List out;
    for (const auto& [k, v] : input.as_dict().items) out.emplace_back(List{key_value(k), v});
    return Value::generator(std::move(out));
  }
  if (name == "first" || name == "last") {
    if (name == "last" && input.is_generator()) fail("'generator' object is not reversible");
    List items = iterate(input);
    if (items.empty()) return Value::undefined(std::string(name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string u = to_u32(input.as_string());
      std::reverse(u.begin(), u.end());
      return Value(to_utf8(u));
    }
    List items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return filter_select(name, input, args);
  }
  if (name == "map") return filter_map(input, args);
  if (name == "sort" || name == "unique" || name == "dictsort") return filter_sort(name, input, args);
  if (name == "min" || name == "max") {
    List items = iterate(input);
    if (items.empty()) return Value::undefined(std::string(name));
    const bool case_sensitive = args.get_or(0, "case_sensitive", Value(false)).truthy();
    const Value* attribute = args.get(1, "attribute");
    const auto key = [&](const Value& v) {
      return lower_if_string(attribute ? attribute_path(v, attribute->to_str()) : v, case_sensitive);
    };
    Value best = items[0];
    for (const Value& item : items) {
      const int c = compare(key(item), key(best));
      if (name == "min" ? c < 0 : c > 0) best = item;
    }
    return best;
  }
  if (name == "sum") {
    Value total = args.get_or(1, "start", Value(0));
    const Value* attribute = args.get(0, "attribute");
    for (const Value& item : iterate(input)) {
      total = binary_op("+", total, attribute ? attribute_path(item, attribute->to_str()) : item);
    }
    return total;
  }
  if (name == "int") {
    if (input.is_int()) return input;
    if (input.is_bool()) return Value(input.as_bool() ? 1 : 0);
    if (input.is_float()) return Value(static_cast<std::int64_t>(input.as_float()));
    if (input.is_string()) {
      char* end = nullptr;
      const std::string s = strip(input.as_string(), nullptr, true, true);
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == '\0') return Value(static_cast<std::int64_t>(v));
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == '\0') return Value(static_cast<std::int64_t>(d));
    }
    return args.get_or(0, "default", Value(0));
  }
  if (name == "float") {
    if (input.is_number()) return Value(input.as_number());
    if (input.is_string()) {
      char* end = nullptr;
      const std::string s = strip(input.as_string(), nullptr, true, true);
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == '\0') return Value(d);
    }
    return args.get_or(0, "default", Value(0.0));
  }
  if (name == "abs") {
    if (input.is_int()) return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
    if (input.is_float()) return Value(std::fabs(input.as_float()));
    fail("bad operand type for abs(): '" + input.type_name() + "'");
  }
  if (name == "round") {
    const std::int64_t precision = to_index(args.get_or(0, "precision", Value(0)), "precision");
    const std::string method = args.get_or(1, "method", Value("common")).to_str();
    const double scale = std::pow(10.0, static_cast<double>(precision));
    double v = input.as_number() * scale;
    v = method == "ceil" ? std::ceil(v) : method == "floor" ? std::floor(v) : std::round(v);
    return Value(v / scale);
  }
  if (name == "indent") {
    return Value(indent(input.to_str(), args.get_or(0, "width", Value(4)), args.get_or(1, "first", Value(false)).truthy(),
                        args.get_or(2, "blank", Value(false)).truthy()));
  }
  if (name == "attr") return get_attribute(input, args.require(0, "name").to_str());
  if (name == "wordcount") return Value(static_cast<std::int64_t>(split(input.to_str(), nullptr, -1).size()));
  if (name == "format") {
    List values = call.positional;
    return Value(percent_format(input.to_str(), Value(std::move(values))));
  }
  fail("unsupported filter '" + std::string(name) + "'");
}


}  // namespace kvstash::jinja
