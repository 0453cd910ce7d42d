#include "grammar/json_schema.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "grammar/json_rules.h"

namespace kvstash::grammar {
namespace {

using json = nlohmann::ordered_json;

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title", "description", "$schema", "$id", "$comment", "examples",
                                          "default", "deprecated", "readOnly", "writeOnly"};
  return k;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> k = {"type", "properties", "required", "additionalProperties", "items",
                                          "minItems", "maxItems", "minLength", "maxLength", "pattern",
                                          "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                          "enum", "const", "anyOf", "$ref", "$defs", "definitions"};
  return k;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root), rules_(b_) {}

  Expected<Grammar> compile() {
    auto top = value(root_, "#");
    if (!top) return top.status();
    Sequence root{rules_.ws()};
    append(root, *top);
    root.push_back(rules_.ws());
    b_.set_root({std::move(root)});
    Grammar g = std::move(b_).finish();
    if (Status st = g.check(); !st) return st;
    return g;
  }

 private:
  static Status refuse(const std::string& path, const std::string& keyword, const std::string& detail = "") {
    return unsupported(path + ": unsupported JSON Schema keyword '" + keyword + "'" + detail);
  }
  static Status invalid(const std::string& path, const std::string& what) { return invalid_argument(path + ": " + what); }

  Expected<Sequence> value(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return Sequence{rules_.any_value()};
      return invalid(path, "the schema false matches nothing");
    }
    if (!s.is_object()) return invalid(path, "a schema must be an object or a boolean");
    for (const auto& [key, v] : s.items()) {
      if (!supported().count(key) && !annotations().count(key)) return refuse(path, key);
    }
    if (auto it = s.find("$ref"); it != s.end()) {
      for (const auto& [key, v] : s.items()) {
        if (key != "$ref" && key != "$defs" && key != "definitions" && !annotations().count(key)) {
          return refuse(path, key, " beside '$ref'");
        }
      }
      return reference(*it, path);
    }
    if (auto it = s.find("const"); it != s.end()) return Sequence{literal_value(*it)};
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return invalid(path + "/enum", "'enum' must be a non-empty array");
      std::vector<Sequence> alts;
      for (const json& v : *it) alts.push_back({literal_value(v)});
      return Sequence{GrammarBuilder::ref(b_.rule("enum", std::move(alts)))};
    }
    if (auto it = s.find("anyOf"); it != s.end()) {
      if (!it->is_array() || it->empty()) return invalid(path + "/anyOf", "'anyOf' must be a non-empty array");
      std::vector<Sequence> alts;
      for (std::size_t i = 0; i < it->size(); ++i) {
        auto alt = value((*it)[i], path + "/anyOf/" + std::to_string(i));
        if (!alt) return alt.status();
        alts.push_back(std::move(*alt));
      }
      for (const auto& [key, v] : s.items()) {
        if (key != "anyOf" && key != "$defs" && key != "definitions" && !annotations().count(key)) {
          return refuse(path, key, " beside 'anyOf'");
        }
      }
      return Sequence{GrammarBuilder::ref(b_.rule("any-of", std::move(alts)))};
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const json& t : *it) {
          if (!t.is_string()) return invalid(path + "/type", "'type' must be a name or an array of names");
          types.push_back(t.get<std::string>());
        }
      } else {
        return invalid(path + "/type", "'type' must be a name or an array of names");
      }
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) {
      return refuse(path, "minimum", " without \"type\": \"integer\"");
    } else {
      return Sequence{rules_.any_value()};
    }
    std::vector<Sequence> alts;
    for (const std::string& t : types) {
      auto alt = typed(s, t, path);
      if (!alt) return alt.status();
      alts.push_back(std::move(*alt));
    }
    if (alts.size() == 1) return alts[0];
    return Sequence{GrammarBuilder::ref(b_.rule("types", std::move(alts)))};
  }

  Expected<Sequence> typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "string") return string(s, path);
    if (type == "integer") return integer(s, path);
    if (type == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(k)) return refuse(path, k, " on a number (it is supported on integers)");
      }
      return Sequence{rules_.number()};
    }
    if (type == "boolean") return Sequence{rules_.boolean()};
    if (type == "null") return Sequence{rules_.null()};
    if (type == "object") return object(s, path);
    if (type == "array") return array(s, path);
    return invalid(path + "/type", "unknown type '" + type + "'");
  }

  static Expected<int> count(const json& s, const char* key, const std::string& path, int fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0) return invalid(path + "/" + key, std::string("'") + key + "' must be a non-negative integer");
    // A bound past this is no bound a generation could reach; the grammar's rules grow with it.
    constexpr std::int64_t kMaxCount = 4096;
    if (it->get<std::int64_t>() > kMaxCount) return refuse(path, key, " above " + std::to_string(kMaxCount));
    return static_cast<int>(it->get<std::int64_t>());
  }

  Expected<Sequence> string(const json& s, const std::string& path) {
    auto min = count(s, "minLength", path, 0);
    if (!min) return min.status();
    auto max = count(s, "maxLength", path, -1);
    if (!max) return max.status();
    if (*max >= 0 && *max < *min) return invalid(path, "'maxLength' is below 'minLength'");
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) return invalid(path + "/pattern", "'pattern' must be a string");
      if (s.contains("minLength") || s.contains("maxLength")) return refuse(path, s.contains("minLength") ? "minLength" : "maxLength", " beside 'pattern'");
      auto e = rules_.pattern_string(it->get<std::string>());
      if (!e) return unsupported(path + ": " + e.status().message());
      return Sequence{*e};
    }
    return Sequence{rules_.string(*min, *max)};
  }

  Expected<Sequence> integer(const json& s, const std::string& path) {
    const auto limit = static_cast<double>(9999999999999999LL);  // kMaxIntegerDigits digits
    double lo = -limit, hi = limit;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_number()) return invalid(path + "/" + k, std::string("'") + k + "' must be a number");
      const double v = it->get<double>();
      const std::string key = k;
      if (key == "minimum") lo = std::max(lo, std::ceil(v));
      if (key == "exclusiveMinimum") lo = std::max(lo, std::floor(v) + 1);
      if (key == "maximum") hi = std::min(hi, std::floor(v));
      if (key == "exclusiveMaximum") hi = std::min(hi, std::ceil(v) - 1);
    }
    lo = std::max(lo, -limit);
    hi = std::min(hi, limit);
    if (lo > hi) return invalid(path, "no integer lies within the bounds");
    return Sequence{rules_.integer(static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi))};
  }

  Expected<Sequence> object(const json& s, const std::string& path) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object()) return invalid(path + "/properties", "'properties' must be an object");
    bool additional_false = false;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (!it->is_boolean() || it->get<bool>()) {
        if (props && !props->empty()) return refuse(path, "additionalProperties", " other than false beside 'properties'");
        if (!it->is_boolean()) return refuse(path, "additionalProperties", " as a schema");
      } else {
        additional_false = true;
      }
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return invalid(path + "/required", "'required' must be an array of names");
      for (const json& name : *it) {
        if (!name.is_string()) return invalid(path + "/required", "'required' must be an array of names");
        if (!props || !props->contains(name.get<std::string>())) {
          return invalid(path + "/required", "required property '" + name.get<std::string>() + "' is not in 'properties'");
        }
        required.insert(name.get<std::string>());
      }
    }
    if (!props || props->empty()) {
      if (!additional_false) return Sequence{rules_.any_object()};
      return Sequence{b_.byte('{'), rules_.ws(), b_.byte('}')};
    }
    // kv_i ws, in the schema's order. head_i: no property written yet; tail_i: some written (a
    // comma first). An optional property may be skipped in either.
    struct Prop {
      Sequence kv;
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [name, sub] : props->items()) {
      auto v = value(sub, path + "/properties/" + name);
      if (!v) return v.status();
      Sequence kv = b_.literal(json(name).dump());
      kv.push_back(rules_.ws());
      kv.push_back(b_.byte(':'));
      kv.push_back(rules_.ws());
      append(kv, *v);
      kv.push_back(rules_.ws());
      list.push_back({std::move(kv), required.count(name) > 0});
    }
    std::uint32_t head = b_.rule("props-end", {{}});
    std::uint32_t tail = head;
    for (std::size_t i = list.size(); i-- > 0;) {
      Sequence with_comma{b_.byte(','), rules_.ws()};
      append(with_comma, list[i].kv);
      with_comma.push_back(GrammarBuilder::ref(tail));
      Sequence first = list[i].kv;
      first.push_back(GrammarBuilder::ref(tail));
      std::vector<Sequence> tail_alts{with_comma};
      std::vector<Sequence> head_alts{first};
      if (!list[i].required) {
        tail_alts.push_back({GrammarBuilder::ref(tail)});
        head_alts.push_back({GrammarBuilder::ref(head)});
      }
      const std::uint32_t new_tail = b_.rule("props-tail", std::move(tail_alts));
      head = b_.rule("props-head", std::move(head_alts));
      tail = new_tail;
    }
    return Sequence{b_.byte('{'), rules_.ws(), GrammarBuilder::ref(head), b_.byte('}')};
  }

  Expected<Sequence> array(const json& s, const std::string& path) {
    Sequence item;
    if (auto it = s.find("items"); it != s.end()) {
      auto v = value(*it, path + "/items");
      if (!v) return v.status();
      item = std::move(*v);
    } else {
      item = {rules_.any_value()};
    }
    auto min = count(s, "minItems", path, 0);
    if (!min) return min.status();
    auto max = count(s, "maxItems", path, -1);
    if (!max) return max.status();
    if (*max >= 0 && *max < *min) return invalid(path, "'maxItems' is below 'minItems'");
    std::vector<Sequence> alts;
    if (*min == 0) alts.push_back({b_.byte('['), rules_.ws(), b_.byte(']')});
    if (*max != 0) {
      Sequence more{b_.byte(','), rules_.ws()};
      append(more, item);
      more.push_back(rules_.ws());
      Sequence some{b_.byte('['), rules_.ws()};
      append(some, item);
      some.push_back(rules_.ws());
      some.push_back(GrammarBuilder::ref(b_.repeat("more-items", more, std::max(0, *min - 1), *max < 0 ? -1 : *max - 1)));
      some.push_back(b_.byte(']'));
      alts.push_back(std::move(some));
    }
    return Sequence{GrammarBuilder::ref(b_.rule("array", std::move(alts)))};
  }

  Expected<Sequence> reference(const json& ref, const std::string& path) {
    if (!ref.is_string()) return invalid(path + "/$ref", "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return Sequence{GrammarBuilder::ref(it->second)};
    const json* schema = nullptr;
    if (target == "#") {
      schema = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (target.rfind(p, 0) != 0) continue;
        const std::string name = target.substr(p.size());
        const std::string container = p.substr(2, p.size() - 3);
        if (root_.contains(container) && root_[container].is_object() && root_[container].contains(name)) {
          schema = &root_[container][name];
        }
      }
      if (!schema && target.rfind("#/", 0) != 0) return refuse(path, "$ref", " to '" + target + "' (only local references)");
    }
    if (!schema) return invalid(path + "/$ref", "'" + target + "' names no definition");
    // The rule exists before its body, so a recursive schema refers to itself.
    const std::uint32_t rule = b_.new_rule("ref");
    refs_.emplace(target, rule);
    auto body = value(*schema, target);
    if (!body) return body.status();
    b_.add_alternative(rule, std::move(*body));
    return Sequence{GrammarBuilder::ref(rule)};
  }

  // A const or enum value: exactly its compact serialisation.
  Element literal_value(const json& v) { return GrammarBuilder::ref(b_.rule("literal", {b_.literal(v.dump())})); }

  const json& root_;
  GrammarBuilder b_;
  JsonRules rules_;
  std::map<std::string, std::uint32_t> refs_;
};

}  // namespace

Expected<Grammar> compile_json_schema(const nlohmann::ordered_json& schema) { return SchemaCompiler(schema).compile(); }

Expected<Grammar> compile_json_schema_text(std::string_view schema_text) {
  nlohmann::ordered_json schema = nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return invalid_argument("the schema is not valid JSON");
  return compile_json_schema(schema);
}

Grammar json_object_grammar() {
  GrammarBuilder b;
  JsonRules rules(b);
  b.set_root({{rules.ws(), rules.any_object(), rules.ws()}});
  return std::move(b).finish();
}

}  // namespace kvstash::grammar
