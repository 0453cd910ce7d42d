// Parses a template's tokens (lexer.h) into statements (ast.h).
//
// Supported: {{ }}; {% if/elif/else %}, {% for x[, y] in e [if c] %} with {% else %},
// {% break %}, {% continue %}, {% set %} (names, tuples, ns.attr, block form), {% macro %},
// {% filter %}, {% generation %} (Hugging Face's marker: its body renders in place). Filters and
// tests are checked against the built-in lists at parse time, so a template that uses one this
// does not implement fails before it renders, naming it; as in Jinja2, inside an {% if %} the
// check waits until the expression runs. Anything else ({% include %},
// {% extends %}, {% call %}, {% raw %}, ...) is an Error naming the tag.
#pragma once

#include <string_view>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace kvstash::jinja {

// Throws Error (message with line) on a syntax error or an unsupported construct.
Body parse(const std::vector<Token>& tokens);

// Whether a filter / test of this name is built in (builtins.cc).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace kvstash::jinja
