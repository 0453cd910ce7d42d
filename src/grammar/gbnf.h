// GBNF, the grammar format of llama.cpp's `grammar` field, to a Grammar (our own parser of the
// documented syntax: llama.cpp's grammars/README.md):
//
//   rule-name ::= alternatives          # a comment
//   alternatives: sequences separated by |; a sequence: items one after another
//   items: "literal" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [class] and [^class]
//          over Unicode code points (ranges a-z, the same escapes), . (any character), rule-name,
//          ( alternatives ), each optionally followed by * + ? {m} {m,} {m,n}
//
// A rule's body runs until the next "name ::=" (so it may span lines). The root is the rule named
// "root". Characters are matched as their UTF-8 encodings (no surrogates, nothing past U+10FFFF).
// Errors (kInvalidArgument) name the line and what is wrong: syntax, an undefined rule, no root,
// left recursion (which our matcher cannot run; write the repetition with * instead).
//
// Thread safety: a pure function.
#pragma once

#include <string_view>

#include "grammar/grammar.h"
#include "kvstash/status.h"

namespace kvstash::grammar {

Expected<Grammar> parse_gbnf(std::string_view text);

}  // namespace kvstash::grammar
