#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/parser.h"

namespace kvstash::jinja {
namespace {

[[noreturn]] void fail(const std::string& message) { throw Failure(message); }

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

bool is_py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// str.strip / lstrip / rstrip; chars null = whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::u32string u = to_u32(s);
  std::u32string set;
  const bool custom = chars != nullptr && !chars->is_none() && !chars->is_undefined();
  if (custom) set = to_u32(chars->to_str());
  const auto strip_it = [&](char32_t c) { return custom ? set.find(c) != std::u32string::npos : is_py_space(c); };
  std::size_t b = 0;
  std::size_t e = u.size();
  if (left) while (b < e && strip_it(u[b])) ++b;
  if (right) while (e > b && strip_it(u[e - 1])) --e;
  return to_utf8(std::u32string_view(u).substr(b, e - b));
}

std::string ascii_case(std::string s, bool upper) {
  // Python's upper()/lower() cover all of Unicode; the templates' texts are ASCII keywords.
  for (char& c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_case(s, false);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = false;
    } else {
      start = !(std::isdigit(u) || u >= 0x80);
    }
  }
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters
    const std::u32string u = to_u32(s);
    std::int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) { out += to; ++done; }
      out += to_utf8(std::u32string(1, c));
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  std::size_t pos = 0;
  std::int64_t done = 0;
  for (std::size_t hit; (count < 0 || done < count) && (hit = s.find(from, pos)) != std::string::npos; ++done) {
    out.append(s, pos, hit - pos).append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

List split(const std::string& s, const Value* sep, std::int64_t maxsplit) {
  List out;
  if (sep == nullptr || sep->is_none()) {  // runs of whitespace, ends ignored
    const std::u32string u = to_u32(s);
    std::size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && is_py_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        std::size_t e = u.size();
        while (e > i && is_py_space(u[e - 1])) --e;
        out.emplace_back(to_utf8(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      std::size_t j = i;
      while (j < u.size() && !is_py_space(u[j])) ++j;
      out.emplace_back(to_utf8(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string d = sep->to_str();
  if (d.empty()) fail("empty separator");
  std::size_t pos = 0;
  for (std::size_t hit; (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) &&
                        (hit = s.find(d, pos)) != std::string::npos;) {
    out.emplace_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

// str.format with {} / {0} / {name} fields (no format specs).
std::string format_string(const std::string& fmt, CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') { out.push_back('{'); ++i; continue; }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') { out.push_back('}'); ++i; continue; }
    if (c != '{') { out.push_back(c); continue; }
    const std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("format: unclosed '{'");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) fail("format: format specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index < args.positional.size()) v = &args.positional[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      const std::size_t index = std::stoul(field);
      if (index < args.positional.size()) v = &args.positional[index];
    } else {
      for (const auto& [n, value] : args.named) if (n == field) v = &value;
    }
    if (v == nullptr) fail("format: no argument for '{" + field + "}'");
    out += v->to_str();
    i = close;
  }
  return out;
}

// printf-style "%s" % args (conversions s, d, i, r, f, %).
std::string percent_format(const std::string& fmt, const Value& args) {
  List values = args.is_list() ? args.as_list() : List{args};
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') { out.push_back(fmt[i]); continue; }
    if (i + 1 >= fmt.size()) fail("incomplete format");
    const char conv = fmt[++i];
    if (conv == '%') { out.push_back('%'); continue; }
    if (next >= values.size()) fail("not enough arguments for format string");
    const Value& v = values[next++];
    if (conv == 's') out += v.to_str();
    else if (conv == 'r') out += v.repr();
    else if (conv == 'd' || conv == 'i') {
      if (!v.is_number() && !v.is_bool()) fail("%d format: a number is required");
      out += std::to_string(v.is_bool() ? (v.as_bool() ? 1 : 0) : static_cast<std::int64_t>(v.as_number()));
    } else {
      fail(std::string("unsupported format conversion '%") + conv + "'");
    }
  }
  if (next < values.size()) fail("not all arguments converted during string formatting");
  return out;
}

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

// ---- methods of str, list, dict ----

Value string_method(const std::string& s, const std::string& name) {
  static const char* kMethods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                   "replace", "upper", "lower", "title", "capitalize", "format", "find",
                                   "count", "join", "splitlines", "isdigit", "isalpha", "isspace", "isalnum",
                                   "islower", "isupper", "index", "rfind"};
  if (std::find_if(std::begin(kMethods), std::end(kMethods), [&](const char* m) { return name == m; }) == std::end(kMethods)) {
    return Value::undefined("str." + name);
  }
  return Value::function([s, name](CallArgs& call) -> Value {
    Args args(call, name);
    if (name == "strip") return Value(strip(s, args.get(0, "chars"), true, true));
    if (name == "lstrip") return Value(strip(s, args.get(0, "chars"), true, false));
    if (name == "rstrip") return Value(strip(s, args.get(0, "chars"), false, true));
    if (name == "split" || name == "rsplit") {
      const Value max = args.get_or(1, "maxsplit", Value(-1));
      if (name == "rsplit" && to_index(max, "maxsplit") >= 0) fail("rsplit with maxsplit is not supported");
      return Value(split(s, args.get(0, "sep"), to_index(max, "maxsplit")));
    }
    if (name == "startswith" || name == "endswith") {
      const Value& arg = args.require(0, "prefix");
      List options = arg.is_list() ? arg.as_list() : List{arg};
      for (const Value& o : options) {
        if (!o.is_string()) fail(name + " first arg must be str or a tuple of str");
        const std::string& p = o.as_string();
        if (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                 : (s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)) {
          return Value(true);
        }
      }
      return Value(false);
    }
    if (name == "replace") {
      return Value(replace(s, args.require(0, "old").to_str(), args.require(1, "new").to_str(),
                           to_index(args.get_or(2, "count", Value(-1)), "count")));
    }
    if (name == "upper") return Value(ascii_case(s, true));
    if (name == "lower") return Value(ascii_case(s, false));
    if (name == "title") return Value(title(s));
    if (name == "capitalize") return Value(capitalize(s));
    if (name == "format") return Value(format_string(s, call));
    if (name == "find" || name == "index" || name == "rfind") {
      const std::string sub = args.require(0, "sub").to_str();
      const std::size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name == "index") fail("substring not found");
        return Value(-1);
      }
      return Value(static_cast<std::int64_t>(to_u32(s.substr(0, at)).size()));
    }
    if (name == "count") {
      const std::string sub = args.require(0, "sub").to_str();
      std::int64_t n = 0;
      if (sub.empty()) return Value(static_cast<std::int64_t>(to_u32(s).size()) + 1);
      for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(args.require(0, "iterable"))) {
        if (!v.is_string()) fail("sequence item: expected str instance, " + v.type_name() + " found");
        if (!first) out += s;
        first = false;
        out += v.as_string();
      }
      return Value(out);
    }
    if (name == "splitlines") {
      List out;
      std::size_t pos = 0;
      while (pos < s.size()) {
        std::size_t e = s.find_first_of("\r\n", pos);
        if (e == std::string::npos) { out.emplace_back(s.substr(pos)); break; }
        out.emplace_back(s.substr(pos, e - pos));
        pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
      }
      return Value(out);
    }
    const auto all = [&](auto pred) {
      if (s.empty()) return Value(false);
      for (unsigned char c : s) if (!pred(c)) return Value(false);
      return Value(true);
    };
    if (name == "isdigit") return all([](unsigned char c) { return std::isdigit(c) != 0; });
    if (name == "isalpha") return all([](unsigned char c) { return std::isalpha(c) != 0; });
    if (name == "isalnum") return all([](unsigned char c) { return std::isalnum(c) != 0; });
    if (name == "isspace") return all([](unsigned char c) { return std::isspace(c) != 0; });
    if (name == "islower") return Value(ascii_case(s, false) == s && ascii_case(s, true) != s);
    if (name == "isupper") return Value(ascii_case(s, true) == s && ascii_case(s, false) != s);
    fail("str." + name);
  });
}

// The sandbox refuses methods that change a list or dict (Hugging Face renders chat templates
// in Jinja2's ImmutableSandboxedEnvironment); reading methods are fine.
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

// ---- filters ----

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

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
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
  if (op == "~") return Value(a.to_str() + b.to_str());
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
  if (op == "+") {
    if (ints) return Value(integer(a) + integer(b));
    if (numbers) return Value(num(a) + num(b));
    if (a.is_string() && b.is_string()) {
      if (!a.is_markup() && !b.is_markup()) return Value(a.as_string() + b.as_string());
      // Markup + str escapes the str (markupsafe's __add__ / __radd__).
      return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                           (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
    }
    if (a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
    return type_error();
  }
  if (op == "-") {
    if (ints) return Value(integer(a) - integer(b));
    if (numbers) return Value(num(a) - num(b));
    return type_error();
  }
  if (op == "*") {
    if (ints) return Value(integer(a) * integer(b));
    if (numbers) return Value(num(a) * num(b));
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq == nullptr || !(count->is_int() || count->is_bool())) return type_error();
    const std::int64_t n = integer(*count);
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
      std::int64_t r = 1;
      for (std::int64_t i = 0; i < integer(b); ++i) r *= integer(a);
      return Value(r);
    }
    return Value(std::pow(num(a), num(b)));
  }
  fail("unknown operator " + std::string(op));
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
