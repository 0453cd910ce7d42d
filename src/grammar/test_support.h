// For the grammar tests: a small vocabulary of JSON-ish tokens, random generation under a
// grammar, and an independent JSON Schema validator (its own walk of the schema; patterns by
// std::regex), so that "the grammar only allows valid output" is checked by other code.
#pragma once

#include <nlohmann/json.hpp>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "grammar/token_matcher.h"

namespace kvstash::grammar::test {

using ojson = nlohmann::ordered_json;

// Every printable ASCII byte, newline, UTF-8 letters (é, 中, 😀 and their first bytes alone),
// and multi-byte tokens that cross JSON's structure ("\":", "},{", "true", digits, ...). The
// last token is the end-of-generation token (no bytes).
inline std::shared_ptr<const TokenVocabulary> test_vocabulary() {
  std::vector<std::string> t;
  for (int c = 0x20; c < 0x7F; ++c) t.emplace_back(1, static_cast<char>(c));
  for (const char* s : {"\n", "\n  ", "\t", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xC3", "\xE4\xB8", "\xA9",
                        "{\"", "\":", "\": ", "\",", "\", \"", "\"}", "\"]", "},{", "}]", "}}", "]}", "[{", "[[", "[]", "{}",
                        "true", "false", "null", "tr", "ue", "12", "345", "-7", "0.", ".5", "e+", "1e3", "00",
                        "name", "\"name", "color", "red", "green", "blue", " \"", "\\n", "\\u00e9", "\\ud800", "\\\"",
                        "abc", "ABC", "-12", "x\"", "\"\"", ",\"", "\x01", "\x7F", "\xFF"}) {
    t.emplace_back(s);
  }
  t.emplace_back("");  // end of generation
  const auto eos = static_cast<TokenIndex>(t.size() - 1);
  return TokenVocabulary::create(std::move(t), {eos});
}

struct Generated {
  std::string text;
  bool ended = false;  // the end token was chosen (only where the grammar accepts)
  std::string error;
};

// Picks uniformly among the allowed tokens (and the end token where the grammar accepts) until
// the end token or max_tokens. Returns the text and whether it ended.
inline Generated generate(const CompiledGrammar& g, std::uint64_t seed, int max_tokens = 4000) {
  std::mt19937_64 rng(seed);
  Generated out;
  MatcherState state = g.initial_state();
  std::vector<std::uint64_t> mask;
  const TokenIndex eos = g.vocabulary().end_of_generation().at(0);
  for (int step = 0; step < max_tokens; ++step) {
    if (Status st = g.allowed_tokens(state, mask); !st) {
      out.error = st.message();
      return out;
    }
    std::vector<TokenIndex> allowed;
    for (std::size_t t = 0; t < g.vocabulary().size(); ++t) {
      if ((mask[t / 64] >> (t % 64)) & 1u) allowed.push_back(static_cast<TokenIndex>(t));
    }
    if (g.accepts(state)) allowed.push_back(eos);
    if (allowed.empty()) {
      out.error = "no token allowed";
      return out;
    }
    const TokenIndex pick = allowed[rng() % allowed.size()];
    if (pick == eos) {
      out.ended = true;
      return out;
    }
    out.text += g.vocabulary().bytes(pick);
    auto next = g.advance(state, pick);
    if (!next) {
      out.error = next.status().message();
      return out;
    }
    state = *next;
  }
  return out;
}

inline std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Whether `v` validates against `schema` (the keywords json_schema.h supports). `why` names the
// first failure.
inline bool validates(const ojson& v, const ojson& schema, const ojson& root, std::string& why) {
  auto fail = [&why](const std::string& w) {
    why = w;
    return false;
  };
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    if (ref == "#") return validates(v, root, root, why);
    const std::string name = ref.substr(ref.rfind('/') + 1);
    const char* container = ref.find("$defs") != std::string::npos ? "$defs" : "definitions";
    return validates(v, root[container][name], root, why);
  }
  if (schema.contains("const") && v != schema["const"]) return fail("const");
  if (schema.contains("enum")) {
    bool found = false;
    for (const auto& e : schema["enum"]) found = found || e == v;
    if (!found) return fail("enum: " + v.dump());
  }
  if (schema.contains("anyOf")) {
    for (const auto& alt : schema["anyOf"]) {
      std::string ignored;
      if (validates(v, alt, root, ignored)) return true;
    }
    return fail("anyOf: " + v.dump());
  }
  if (schema.contains("type")) {
    std::vector<std::string> types;
    if (schema["type"].is_string()) {
      types.push_back(schema["type"]);
    } else {
      for (const auto& t : schema["type"]) types.push_back(t);
    }
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
           (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
           (t == "object" && v.is_object()) || (t == "array" && v.is_array());
    }
    if (!ok) return fail("type: " + v.dump());
  }
  if (v.is_number_integer()) {
    const auto n = v.get<std::int64_t>();
    if (schema.contains("minimum") && n < schema["minimum"].get<double>()) return fail("minimum");
    if (schema.contains("maximum") && n > schema["maximum"].get<double>()) return fail("maximum");
    if (schema.contains("exclusiveMinimum") && n <= schema["exclusiveMinimum"].get<double>()) return fail("exclusiveMinimum");
    if (schema.contains("exclusiveMaximum") && n >= schema["exclusiveMaximum"].get<double>()) return fail("exclusiveMaximum");
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (schema.contains("minLength") && code_points(s) < schema["minLength"].get<std::size_t>()) return fail("minLength");
    if (schema.contains("maxLength") && code_points(s) > schema["maxLength"].get<std::size_t>()) return fail("maxLength");
    if (schema.contains("pattern") && !std::regex_search(s, std::regex(schema["pattern"].get<std::string>()))) {
      return fail("pattern: " + s);
    }
  }
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<std::size_t>()) return fail("minItems");
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<std::size_t>()) return fail("maxItems");
    if (schema.contains("items")) {
      for (const auto& item : v) {
        if (!validates(item, schema["items"], root, why)) return false;
      }
    }
  }
  if (v.is_object()) {
    const ojson props = schema.value("properties", ojson::object());
    for (const auto& r : schema.value("required", ojson::array())) {
      if (!v.contains(r.get<std::string>())) return fail("required " + r.get<std::string>());
    }
    for (const auto& [k, item] : v.items()) {
      if (props.contains(k)) {
        if (!validates(item, props[k], root, why)) return false;
      } else if (schema.contains("additionalProperties") && schema["additionalProperties"] == false) {
        return fail("additional property " + k);
      }
    }
  }
  return true;
}

}  // namespace kvstash::grammar::test
