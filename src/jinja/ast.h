// The syntax tree of a parsed template: statements (text, output, if, for, set, macro, ...)
// holding expressions. Built by parse() (parser.h), run by the renderer (template.cc).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvstash::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (each bound may be null)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs); args[0] null in a {% filter %} block
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // name ("-", "+", "not") args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~ == != < > <= >= in "not in"
    kAnd,      // args[0] and args[1]
    kOr,       // args[0] or args[1]
    kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
    kList,     // [args...]
    kTuple,    // (args...)
    kDict,     // {args[0]: args[1], ...}
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int height = 1;  // levels of the tree from here down (the parser bounds it)
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest: "is not"
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition, body); a null condition is the else
    kFor,          // for targets in expr [if condition]: body [else else_body]
    kSet,          // set targets = expr, or set targets[0].attr = expr
    kSetBlock,     // set targets[0] %}body{% endset (optionally piped through filter)
    kMacro,        // macro name(params with defaults): body
    kFilterBlock,  // filter filter: body
    kBreak,
    kContinue,
    kBlock,        // a body run in place ({% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
};

}  // namespace kvstash::jinja
