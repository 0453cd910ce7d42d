// Python's str operations for the builtins: strip, split, replace, case, format, and str's methods.
#include <algorithm>
#include <cstdio>

#include "jinja/builtins_util.h"

namespace kvstash::jinja::detail {

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
      check_string_size(out.size());
      out += to_utf8(std::u32string(1, c));
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  std::size_t pos = 0;
  std::int64_t done = 0;
  for (std::size_t hit; (count < 0 || done < count) && (hit = s.find(from, pos)) != std::string::npos; ++done) {
    check_string_size(out.size() + (hit - pos) + to.size());
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

}  // namespace kvstash::jinja::detail
