// JSON Schema to Grammar: the subset OpenAI's strict structured outputs allow, plus a few common
// extensions, so that every output the grammar allows validates against the schema.
//
// Supported keywords:
//   type (a name or an array of names): object, array, string, number, integer, boolean, null
//   object: properties (generated in the schema's order), required (others may be left out),
//           additionalProperties (false or absent; no extra properties are generated either way);
//           an object schema without properties is any JSON object unless additionalProperties is false
//   array:  items, minItems, maxItems
//   string: minLength, maxLength (code points), pattern (a regex subset: json_rules.h / regex.cc)
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers in JSON Schema 2020-12)
//   enum, const, anyOf, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed)
//   annotations, which change nothing: title, description, $schema, $id, $comment, examples,
//   default, deprecated, readOnly, writeOnly
// Anything else (oneOf, allOf, not, format, multipleOf, uniqueItems, prefixItems, minimum on a
// number, patternProperties, if/then/else, ...) is refused with kUnsupported naming the keyword and
// where it is ("#/properties/when: unsupported JSON Schema keyword 'format'"). A malformed schema is
// kInvalidArgument.
//
// What the grammar generates is a subset of what the schema allows, chosen so that output ends:
// json_rules.h lists the bounds (number digits, whitespace, nesting of untyped values).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "grammar/grammar.h"
#include "kvstash/status.h"

namespace kvstash::grammar {

Expected<Grammar> compile_json_schema(const nlohmann::ordered_json& schema);
// Parses `schema_text` first (kInvalidArgument when it is not JSON).
Expected<Grammar> compile_json_schema_text(std::string_view schema_text);
// Any JSON object (OpenAI's response_format {"type": "json_object"}).
Grammar json_object_grammar();

}  // namespace kvstash::grammar
