// File's typed metadata getters: the conversions between GGUF's many number types.
#include <limits>

#include "gguf/gguf.h"

namespace kvstash::gguf {
namespace {

Status wrong_type(const std::string& path, std::string_view key, const Value& v, const char* wanted) {
  return invalid_argument(path + ": key '" + std::string(key) + "' is " + describe_value(v) + ", not " + wanted);
}

// An integer value of any width as int64 / uint64, when it fits.
bool as_uint(const Value& v, std::uint64_t* out) {
  if (const auto* u = std::get_if<std::uint64_t>(&v.data)) { *out = *u; return true; }
  if (const auto* i = std::get_if<std::int64_t>(&v.data)) {
    if (*i < 0) return false;
    *out = static_cast<std::uint64_t>(*i);
    return true;
  }
  return false;
}

bool as_int(const Value& v, std::int64_t* out) {
  if (const auto* i = std::get_if<std::int64_t>(&v.data)) { *out = *i; return true; }
  if (const auto* u = std::get_if<std::uint64_t>(&v.data)) {
    if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    *out = static_cast<std::int64_t>(*u);
    return true;
  }
  return false;
}

}  // namespace

#define KVSTASH_FIND_OR_RETURN(v, key)                                                       \
  const Value* v = find(key);                                                                \
  if (v == nullptr) return not_found(path_ + ": key '" + std::string(key) + "' is absent")

Expected<std::string> File::get_string(std::string_view key) const {
  KVSTASH_FIND_OR_RETURN(v, key);
  if (const auto* s = std::get_if<std::string>(&v->data)) return *s;
  return wrong_type(path_, key, *v, "a string");
}

Expected<std::uint64_t> File::get_uint(std::string_view key) const {
  KVSTASH_FIND_OR_RETURN(v, key);
  std::uint64_t out = 0;
  if (as_uint(*v, &out)) return out;
  return wrong_type(path_, key, *v, "a non-negative integer");
}

Expected<std::int64_t> File::get_int(std::string_view key) const {
  KVSTASH_FIND_OR_RETURN(v, key);
  std::int64_t out = 0;
  if (as_int(*v, &out)) return out;
  return wrong_type(path_, key, *v, "an integer that fits in i64");
}

Expected<double> File::get_float(std::string_view key) const {
  KVSTASH_FIND_OR_RETURN(v, key);
  if (const auto* d = std::get_if<double>(&v->data)) return *d;
  // Some converters store float hyper-parameters as integers (e.g. rope.freq_base 10000).
  if (const auto* u = std::get_if<std::uint64_t>(&v->data)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<std::int64_t>(&v->data)) return static_cast<double>(*i);
  return wrong_type(path_, key, *v, "a number");
}

Expected<bool> File::get_bool(std::string_view key) const {
  KVSTASH_FIND_OR_RETURN(v, key);
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  return wrong_type(path_, key, *v, "a bool");
}

Expected<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  KVSTASH_FIND_OR_RETURN(v, key);
  const auto* a = std::get_if<Array>(&v->data);
  if (a == nullptr || a->elem_type != ValueType::kString) return wrong_type(path_, key, *v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const Value& item : a->items) out.push_back(std::get<std::string>(item.data));
  return out;
}

Expected<std::vector<std::int64_t>> File::get_int_array(std::string_view key) const {
  KVSTASH_FIND_OR_RETURN(v, key);
  const auto* a = std::get_if<Array>(&v->data);
  if (a == nullptr) return wrong_type(path_, key, *v, "an array of integers");
  std::vector<std::int64_t> out;
  out.reserve(a->items.size());
  for (const Value& item : a->items) {
    std::int64_t x = 0;
    if (!as_int(item, &x)) return wrong_type(path_, key, *v, "an array of integers that fit in i64");
    out.push_back(x);
  }
  return out;
}

#undef KVSTASH_FIND_OR_RETURN

}  // namespace kvstash::gguf
