// JSON Schema grammars: random generation under nested schemas always ends in JSON that an
// independent validator accepts; integer bounds are exact; patterns match; every keyword outside
// the subset is refused by name.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/grammar_cache.h"
#include "grammar/test_support.h"

namespace kvstash::grammar {
namespace {

using test::ojson;

std::shared_ptr<const CompiledGrammar> compile(const std::string& schema_text) {
  auto g = compile_json_schema_text(schema_text);
  EXPECT_TRUE(g) << g.status().to_string();
  if (!g) return nullptr;
  auto c = CompiledGrammar::create(std::move(*g), test::test_vocabulary(), schema_text);
  EXPECT_TRUE(c) << c.status().to_string();
  return c ? *c : nullptr;
}

// The schemas of the tests: nested objects, arrays, enums, bounded integers, patterns, anyOf, $ref.
const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 130},
    "color": {"enum": ["red", "green", "blue", 7, null]},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
    "address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
                                                   "city": {"type": "string", "maxLength": 8}},
                "required": ["zip", "city"], "additionalProperties": false},
    "nickname": {"type": ["string", "null"], "maxLength": 6},
    "active": {"type": "boolean"},
    "kind": {"const": "person"}
  },
  "required": ["name", "age", "color", "tags", "address", "active", "kind"],
  "additionalProperties": false
})";

const char* kCatalog = R"({
  "$defs": {
    "item": {"type": "object", "properties": {"id": {"type": "integer", "exclusiveMinimum": -50, "maximum": 99999},
                                              "sku": {"type": "string", "pattern": "[A-Z]{2}\\d{3}"},
                                              "children": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 2}},
             "required": ["id", "sku"], "additionalProperties": false}
  },
  "type": "object",
  "properties": {
    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 3},
    "status": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5}, {"enum": ["ok", "err"]}, {"type": "null"}]},
    "note": {"type": "string", "maxLength": 4},
    "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}, "maxItems": 2}
  },
  "required": ["items", "status", "matrix"]
})";

TEST(JsonSchema, RandomGenerationAlwaysValidates) {
  for (const char* text : {kPerson, kCatalog}) {
    const ojson schema = ojson::parse(text);
    auto g = compile(text);
    ASSERT_TRUE(g);
    int ended = 0;
    for (std::uint64_t seed = 1; seed <= 60; ++seed) {
      test::Generated out = test::generate(*g, seed);
      ASSERT_TRUE(out.error.empty()) << out.error << " after " << out.text;
      if (!out.ended) continue;  // ran to max_tokens: a long array or string, not an error
      ++ended;
      const ojson v = ojson::parse(out.text, nullptr, false);
      if (v.is_discarded()) {
        try {
          (void)ojson::parse(out.text);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "not JSON: " << e.what() << ": " << ojson(out.text).dump();
        }
        continue;
      }
      std::string why;
      EXPECT_TRUE(test::validates(v, schema, schema, why)) << why << " in " << out.text;
    }
    EXPECT_GE(ended, 50) << "most generations must end within the token limit";
  }
}

TEST(JsonSchema, JsonObjectIsAnyObject) {
  auto c = CompiledGrammar::create(json_object_grammar(), test::test_vocabulary(), "json_object");
  ASSERT_TRUE(c);
  int ended = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    test::Generated out = test::generate(**c, seed);
    ASSERT_TRUE(out.error.empty()) << out.error;
    if (!out.ended) continue;
    ++ended;
    const ojson v = ojson::parse(out.text, nullptr, false);
    EXPECT_TRUE(v.is_object()) << out.text;
  }
  EXPECT_GE(ended, 20);
  // Not an object: refused at the first byte.
  EXPECT_FALSE((*c)->advance_bytes((*c)->initial_state(), "[1]"));
  EXPECT_TRUE((*c)->advance_bytes((*c)->initial_state(), "{\"a\": [1, {\"b\": null}], \"c\": \"\\u00e9\"}"));
}

bool accepts_text(const CompiledGrammar& g, const std::string& text) {
  auto s = g.advance_bytes(g.initial_state(), text);
  return s && g.accepts(*s);
}

TEST(JsonSchema, IntegerBoundsAreExact) {
  struct Case {
    std::string schema;
    std::int64_t lo, hi;
  };
  const Case cases[] = {
      {R"({"type": "integer", "minimum": -15, "maximum": 123})", -15, 123},
      {R"({"type": "integer", "minimum": 7, "maximum": 7})", 7, 7},
      {R"({"type": "integer", "minimum": 0, "maximum": 1000})", 0, 1000},
      {R"({"type": "integer", "minimum": -1000, "maximum": -5})", -1000, -5},
      {R"({"type": "integer", "exclusiveMinimum": 94.5, "exclusiveMaximum": 1006})", 95, 1005},
      {R"({"type": "integer", "minimum": 1.5, "maximum": 20.9})", 2, 20},
  };
  for (const Case& c : cases) {
    auto g = compile(c.schema);
    ASSERT_TRUE(g);
    for (std::int64_t v = -2000; v <= 2000; ++v) {
      EXPECT_EQ(accepts_text(*g, std::to_string(v)), v >= c.lo && v <= c.hi) << c.schema << " value " << v;
    }
    EXPECT_FALSE(accepts_text(*g, "-0"));
    EXPECT_FALSE(accepts_text(*g, "007"));
    EXPECT_FALSE(accepts_text(*g, "1.0"));
  }
  // Unbounded: up to 16 digits.
  auto g = compile(R"({"type": "integer"})");
  EXPECT_TRUE(accepts_text(*g, "-9999999999999999"));
  EXPECT_FALSE(accepts_text(*g, "12345678901234567"));
}

TEST(JsonSchema, PatternsAndLengths) {
  auto zip = compile(R"({"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"})");
  EXPECT_TRUE(accepts_text(*zip, "\"12345\""));
  EXPECT_TRUE(accepts_text(*zip, "\"12345-6789\""));
  EXPECT_FALSE(accepts_text(*zip, "\"1234\""));
  EXPECT_FALSE(accepts_text(*zip, "\"12345-67\""));
  auto pets = compile(R"({"type": "string", "pattern": "(cat|dog)s? \\w+\\.[^a-z]"})");
  EXPECT_TRUE(accepts_text(*pets, "\"dogs x_1.Q\""));
  EXPECT_TRUE(accepts_text(*pets, "\"cat A.\\\"\""));  // [^a-z] includes the quote, escaped
  EXPECT_FALSE(accepts_text(*pets, "\"cow x.Q\""));
  auto len = compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(accepts_text(*len, "\"a\""));
  EXPECT_TRUE(accepts_text(*len, "\"a\xC3\xA9\""));   // two code points, three bytes
  EXPECT_TRUE(accepts_text(*len, "\"\\n\\u00e9x\""));  // three characters written as escapes
  EXPECT_FALSE(accepts_text(*len, "\"abcd\""));
  EXPECT_FALSE(accepts_text(*len, "\"\\ud800x\""));   // a lone surrogate is not a character
  EXPECT_FALSE(accepts_text(*len, "\"a\x01\""));       // raw control characters are not JSON
}

TEST(JsonSchema, OptionalPropertiesKeepCommasRight) {
  auto g = compile(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"},
                       "c": {"type": "null"}}, "required": ["b"]})");
  for (const char* ok : {"{\"b\":true}", "{\"a\":1,\"b\":false}", "{\"b\":true,\"c\":null}", "{ \"a\": 2, \"b\": true, \"c\": null }"}) {
    EXPECT_TRUE(accepts_text(*g, ok)) << ok;
  }
  for (const char* bad : {"{}", "{\"a\":1}", "{,\"b\":true}", "{\"b\":true,}", "{\"c\":null,\"b\":true}", "{\"b\":true,\"d\":1}"}) {
    EXPECT_FALSE(accepts_text(*g, bad)) << bad;
  }
}

TEST(JsonSchema, RefusesWhatItDoesNotSupportNamingTheKeyword) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "format": "date-time"})", "'format'"},
      {R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})", "'oneOf'"},
      {R"({"allOf": [{"type": "string"}]})", "'allOf'"},
      {R"({"not": {"type": "string"}})", "'not'"},
      {R"({"type": "number", "minimum": 0})", "'minimum'"},
      {R"({"type": "integer", "multipleOf": 2})", "'multipleOf'"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
      {R"({"type": "array", "prefixItems": [{"type": "string"}]})", "'prefixItems'"},
      {R"({"type": "object", "patternProperties": {"^a": {}}})", "'patternProperties'"},
      {R"({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true})", "'additionalProperties'"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "contentEncoding": "base64"}}})", "'contentEncoding'"},
      {R"({"type": "string", "pattern": "(a)\\1"})", "\\1"},
      {R"({"type": "string", "pattern": "(?=a)b"})", "lookaround"},
      {R"({"$ref": "https://example.com/schema.json"})", "'$ref'"},
  };
  for (const auto& [schema, mention] : cases) {
    auto g = compile_json_schema_text(schema);
    ASSERT_FALSE(g) << schema;
    EXPECT_EQ(g.status().code(), StatusCode::kUnsupported) << schema;
    EXPECT_NE(g.status().message().find(mention), std::string::npos) << g.status().message();
  }
  // Nested: the path says where.
  auto nested = compile_json_schema_text(R"({"type": "object", "properties": {"when": {"type": "string", "format": "date"}}})");
  ASSERT_FALSE(nested);
  EXPECT_NE(nested.status().message().find("#/properties/when"), std::string::npos) << nested.status().message();
  // Malformed schemas are invalid, not unsupported.
  for (const char* bad : {R"({"type": "integer", "minimum": 5, "maximum": 4})", R"({"type": "object", "required": ["x"]})",
                          R"({"enum": []})", R"({"type": "strnig"})", R"({"$ref": "#/$defs/missing"})", "not json"}) {
    auto g = compile_json_schema_text(bad);
    ASSERT_FALSE(g) << bad;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << bad << ": " << g.status().message();
  }
}

TEST(GrammarCache, OneCompilationPerSchema) {
  GrammarCache cache(test::test_vocabulary());
  auto a = cache.json_schema(kPerson);
  auto b = cache.json_schema(kPerson);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.stats().compiles, 1);
  EXPECT_EQ(cache.stats().hits, 1);
  auto o = cache.json_object();
  ASSERT_TRUE(o);
  EXPECT_NE(o->get(), a->get());
  EXPECT_EQ((*o)->key(), "json_object");
  EXPECT_FALSE(cache.json_schema(R"({"type": "string", "format": "uri"})"));
  EXPECT_EQ(cache.stats().errors, 1);
}

TEST(GrammarCache, AGrammarNearItsStateBoundIsRenewedForNewRequests) {
  GrammarCacheOptions small;
  small.compiled.max_states = 40;
  GrammarCache cache(test::test_vocabulary(), small);
  const std::string nested = R"({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"})";
  auto first = cache.json_schema(nested);
  ASSERT_TRUE(first);
  // A request in flight nests 30 deep: a new stack, a new state per level (31 of 40).
  auto state = (*first)->advance_bytes((*first)->initial_state(), std::string(30, '['));
  ASSERT_TRUE(state) << state.status().to_string();
  ASSERT_GE((*first)->stats().states, 30u);
  auto second = cache.json_schema(nested);
  ASSERT_TRUE(second);
  EXPECT_NE(first->get(), second->get());
  EXPECT_EQ(cache.stats().renewed, 1);
  EXPECT_LT((*second)->stats().states, 30u);
  // The request in flight keeps its grammar and goes on.
  EXPECT_TRUE((*first)->advance_bytes(*state, "]"));
}

}  // namespace
}  // namespace kvstash::grammar
