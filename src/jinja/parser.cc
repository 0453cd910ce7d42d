#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>

namespace kvstash::jinja {
namespace {

using Kind = Token::Kind;

// Published chat templates nest a handful of levels; these bounds are far above them and far
// below what the stack holds (parse, render and the tree's destructor all recurse).
constexpr int kMaxNesting = 100;  // recursive rules open at once (blocks in blocks, parentheses, not, unary)
constexpr int kMaxHeight = 200;   // an expression tree's depth (a ~ b ~ c ... chains are deep but not recursive here)

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, &end);
    if (!end.empty()) throw Error("unexpected '" + end + "'", cur().line);
    return body;
  }

 private:
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(std::size_t ahead = 1) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  bool at_op(std::string_view op) const { return cur().kind == Kind::kOp && cur().text == op; }
  bool at_name(std::string_view name) const { return cur().kind == Kind::kName && cur().text == name; }
  const Token& advance() { return t_[pos_ < t_.size() - 1 ? pos_++ : pos_]; }
  [[noreturn]] void fail(const std::string& message) const { throw Error(message, cur().line); }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Kind::kEnd: return "end of template";
      case Kind::kBlockEnd: return "'%}'";
      case Kind::kVarEnd: return "'}}'";
      case Kind::kText: return "text";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!at_op(op)) fail("expected '" + std::string(op) + "', found " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().kind != Kind::kName) fail("expected a name, found " + describe(cur()));
    return advance().text;
  }
  void expect_block_end() {
    if (cur().kind != Kind::kBlockEnd) fail("expected '%}', found " + describe(cur()));
    advance();
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  // A finished node: its height from its children's, failing past kMaxHeight, so that no
  // expression tree is deeper than the renderer's recursion (and the tree's destructor) can take.
  ExprPtr sealed(ExprPtr e) {
    int below = 0;
    for (const ExprPtr& a : e->args) if (a) below = std::max(below, a->height);
    for (const auto& kw : e->kwargs) if (kw.second) below = std::max(below, kw.second->height);
    e->height = below + 1;
    if (e->height > kMaxHeight) throw Error("expression nested too deeply (more than " + std::to_string(kMaxHeight) + " levels)", e->line);
    return e;
  }

  // Held by each rule that recurses (expressions, blocks): a template nested deeper than
  // kMaxNesting fails to parse instead of overflowing the stack.
  struct Nest {
    explicit Nest(Parser* p) : parser(p) {
      if (++parser->depth_ > kMaxNesting) parser->fail("nested too deeply (more than " + std::to_string(kMaxNesting) + " levels)");
    }
    ~Nest() { --parser->depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    Parser* parser;
  };

  ExprPtr binary(Expr::Kind kind, std::string op, ExprPtr left, ExprPtr right) {
    ExprPtr e = make(kind, left->line);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return sealed(std::move(e));
  }

  // ---- statements ----

  // Parses statements until a block tag whose keyword is in `stops` (consumed, reported in
  // *stop) or the end of the template (*stop empty).
  Body parse_body(std::initializer_list<std::string_view> stops, std::string* stop) {
    const Nest nest(this);
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.kind == Kind::kEnd) {
        stop->clear();
        return body;
      }
      if (t.kind == Kind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = t.text;
        s->line = t.line;
        body.push_back(std::move(s));
        advance();
      } else if (t.kind == Kind::kVarBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = cur().line;
        s->expr = parse_expression();
        if (cur().kind != Kind::kVarEnd) fail("expected '}}', found " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.kind == Kind::kBlockBegin) {
        const Token& keyword = peek();
        if (keyword.kind != Kind::kName) {
          advance();
          fail("expected a tag name, found " + describe(cur()));
        }
        if (std::find(stops.begin(), stops.end(), keyword.text) != stops.end()) {
          advance();
          *stop = advance().text;
          return body;
        }
        advance();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const int line = cur().line;
    const std::string keyword = advance().text;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string end;
    if (keyword == "if") {
      ++inside_if_;
      s->kind = Stmt::Kind::kIf;
      ExprPtr condition = parse_expression();
      expect_block_end();
      for (;;) {
        Body body = parse_body({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(std::move(condition), std::move(body));
        if (end == "elif") {
          condition = parse_expression();
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          Body else_body = parse_body({"endif"}, &end);
          s->branches.emplace_back(nullptr, std::move(else_body));
          if (end != "endif") fail("'if' (line " + std::to_string(line) + ") is not closed by 'endif'");
          break;
        } else if (end == "endif") {
          break;
        } else {
          fail("'if' (line " + std::to_string(line) + ") is not closed by 'endif'");
        }
      }
      expect_block_end();
      --inside_if_;
    } else if (keyword == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets.push_back(expect_name());
      while (at_op(",")) {
        advance();
        s->targets.push_back(expect_name());
      }
      if (!at_name("in")) fail("expected 'in' in 'for', found " + describe(cur()));
      advance();
      s->expr = parse_or();  // no conditional expression: a trailing "if" filters the loop
      if (at_name("if")) {
        advance();
        s->condition = parse_or();
      }
      if (at_name("recursive")) fail("unsupported: recursive loops");
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, &end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &end);
      }
      if (end != "endfor") fail("'for' (line " + std::to_string(line) + ") is not closed by 'endfor'");
      expect_block_end();
    } else if (keyword == "set") {
      s->targets.push_back(expect_name());
      if (at_op(".")) {
        advance();
        s->attr = expect_name();
      }
      while (at_op(",")) {
        advance();
        s->targets.push_back(expect_name());
      }
      if (at_op("=")) {
        advance();
        s->kind = Stmt::Kind::kSet;
        s->expr = parse_tuple_or_expression();
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) fail("a block 'set' takes one name");
        s->kind = Stmt::Kind::kSetBlock;
        if (at_op("|")) s->filter = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = parse_body({"endset"}, &end);
        if (end != "endset") fail("'set' (line " + std::to_string(line) + ") is not closed by 'endset'");
        expect_block_end();
      }
    } else if (keyword == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->name = expect_name();
      expect_op("(");
      while (!at_op(")")) {
        std::string param = expect_name();
        ExprPtr default_value;
        if (at_op("=")) {
          advance();
          default_value = parse_expression();
        }
        s->params.emplace_back(std::move(param), std::move(default_value));
        if (!at_op(")")) expect_op(",");
      }
      advance();
      expect_block_end();
      s->body = parse_body({"endmacro"}, &end);
      if (end != "endmacro") fail("'macro' (line " + std::to_string(line) + ") is not closed by 'endmacro'");
      if (cur().kind == Kind::kName) advance();  // {% endmacro name %}
      expect_block_end();
    } else if (keyword == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      --pos_;  // parse_filter_chain expects to stand on the first filter name after a "|"
      s->filter = parse_filter_chain(nullptr, /*leading_pipe=*/false);
      expect_block_end();
      s->body = parse_body({"endfilter"}, &end);
      if (end != "endfilter") fail("'filter' (line " + std::to_string(line) + ") is not closed by 'endfilter'");
      expect_block_end();
    } else if (keyword == "break" || keyword == "continue") {
      s->kind = keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
    } else if (keyword == "generation") {
      s->kind = Stmt::Kind::kBlock;
      expect_block_end();
      s->body = parse_body({"endgeneration"}, &end);
      if (end != "endgeneration") fail("'generation' is not closed by 'endgeneration'");
      expect_block_end();
    } else {
      throw Error("unsupported tag '" + keyword + "'", line);
    }
    return s;
  }

  // ---- expressions ----

  // An expression, or several separated by commas (a tuple without parentheses).
  ExprPtr parse_tuple_or_expression() {
    ExprPtr first = parse_expression();
    if (!at_op(",")) return first;
    ExprPtr tuple = make(Expr::Kind::kTuple, first->line);
    tuple->args.push_back(std::move(first));
    while (at_op(",")) {
      advance();
      if (cur().kind == Kind::kBlockEnd) break;
      tuple->args.push_back(parse_expression());
    }
    return sealed(std::move(tuple));
  }

  ExprPtr parse_expression() {
    const Nest nest(this);
    ExprPtr e = parse_or();
    while (at_name("if")) {
      advance();
      ExprPtr cond = make(Expr::Kind::kCond, e->line);
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (at_name("else")) {
        advance();
        otherwise = parse_expression();
      }
      cond->args.push_back(std::move(e));
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(otherwise));
      e = sealed(std::move(cond));
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (at_name("or")) {
      advance();
      e = binary(Expr::Kind::kOr, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (at_name("and")) {
      advance();
      e = binary(Expr::Kind::kAnd, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    const Nest nest(this);
    if (at_name("not")) {
      const int line = advance().line;
      ExprPtr e = make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->args.push_back(parse_not());
      return sealed(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    for (;;) {
      if (cur().kind == Kind::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        std::string op = advance().text;
        e = binary(Expr::Kind::kBinary, op, std::move(e), parse_math1());
      } else if (at_name("in")) {
        advance();
        e = binary(Expr::Kind::kBinary, "in", std::move(e), parse_math1());
      } else if (at_name("not") && peek().kind == Kind::kName && peek().text == "in") {
        advance();
        advance();
        e = binary(Expr::Kind::kBinary, "not in", std::move(e), parse_math1());
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      std::string op = advance().text;
      e = binary(Expr::Kind::kBinary, op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (at_op("~")) {
      advance();
      e = binary(Expr::Kind::kBinary, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      std::string op = advance().text;
      e = binary(Expr::Kind::kBinary, op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (at_op("**")) {
      advance();
      e = binary(Expr::Kind::kBinary, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& op = advance();
      e = make(Expr::Kind::kUnary, op.line);
      e->name = op.text;
      e->args.push_back(parse_unary(false));
      e = sealed(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters_and_tests(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.kind) {
      case Kind::kName: {
        advance();
        if (t.text == "true" || t.text == "True") return literal(Value(true), line);
        if (t.text == "false" || t.text == "False") return literal(Value(false), line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), line);
        ExprPtr e = make(Expr::Kind::kName, line);
        e->name = t.text;
        return e;
      }
      case Kind::kString: {
        std::string s = advance().text;
        while (cur().kind == Kind::kString) s += advance().text;  // adjacent literals concatenate
        return literal(Value(std::move(s)), line);
      }
      case Kind::kInt: return literal(Value(advance().int_value), line);
      case Kind::kFloat: return literal(Value(advance().float_value), line);
      case Kind::kOp:
        if (t.text == "(") {
          advance();
          if (at_op(")")) {
            advance();
            return make(Expr::Kind::kTuple, line);
          }
          ExprPtr first = parse_expression();
          if (at_op(")")) {
            advance();
            return first;
          }
          ExprPtr tuple = make(Expr::Kind::kTuple, line);
          tuple->args.push_back(std::move(first));
          while (at_op(",")) {
            advance();
            if (at_op(")")) break;
            tuple->args.push_back(parse_expression());
          }
          expect_op(")");
          return sealed(std::move(tuple));
        }
        if (t.text == "[") {
          advance();
          ExprPtr list = make(Expr::Kind::kList, line);
          while (!at_op("]")) {
            list->args.push_back(parse_expression());
            if (!at_op("]")) expect_op(",");
          }
          advance();
          return sealed(std::move(list));
        }
        if (t.text == "{") {
          advance();
          ExprPtr dict = make(Expr::Kind::kDict, line);
          while (!at_op("}")) {
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args.push_back(parse_expression());
            if (!at_op("}")) expect_op(",");
          }
          advance();
          return sealed(std::move(dict));
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr literal(Value v, int line) {
    ExprPtr e = make(Expr::Kind::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (at_op(".")) {
        const int line = advance().line;
        if (cur().kind == Kind::kInt) {  // x.0 is x[0]
          ExprPtr item = make(Expr::Kind::kItem, line);
          item->args.push_back(std::move(e));
          item->args.push_back(literal(Value(advance().int_value), line));
          e = sealed(std::move(item));
          continue;
        }
        ExprPtr attr = make(Expr::Kind::kAttr, line);
        attr->name = expect_name();
        attr->args.push_back(std::move(e));
        e = sealed(std::move(attr));
      } else if (at_op("[")) {
        const int line = advance().line;
        ExprPtr start;
        if (!at_op(":")) start = parse_expression();
        if (at_op("]")) {
          advance();
          ExprPtr item = make(Expr::Kind::kItem, line);
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(start));
          e = sealed(std::move(item));
          continue;
        }
        ExprPtr slice = make(Expr::Kind::kSlice, line);
        slice->args.push_back(std::move(e));
        slice->args.push_back(std::move(start));
        expect_op(":");
        ExprPtr stop;
        ExprPtr step;
        if (!at_op("]") && !at_op(":")) stop = parse_expression();
        if (at_op(":")) {
          advance();
          if (!at_op("]")) step = parse_expression();
        }
        expect_op("]");
        slice->args.push_back(std::move(stop));
        slice->args.push_back(std::move(step));
        e = sealed(std::move(slice));
      } else if (at_op("(")) {
        ExprPtr call = make(Expr::Kind::kCall, cur().line);
        call->args.push_back(std::move(e));
        parse_call_args(call.get());
        e = sealed(std::move(call));
      } else {
        return e;
      }
    }
  }

  // "(" args ")" into e->args (after the ones already there) and e->kwargs.
  void parse_call_args(Expr* e) {
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) fail("unsupported: *args / **kwargs in a call");
      if (cur().kind == Kind::kName && peek().kind == Kind::kOp && peek().text == "=") {
        std::string name = advance().text;
        advance();
        e->kwargs.emplace_back(std::move(name), parse_expression());
      } else {
        e->args.push_back(parse_expression());
      }
      if (!at_op(")")) expect_op(",");
    }
    advance();
  }

  // A filter's name, possibly dotted in Jinja2; only plain names are built in.
  ExprPtr parse_one_filter(ExprPtr input) {
    const int line = cur().line;
    std::string name = expect_name();
    check_known(is_known_filter(name), "filter", name, line);
    ExprPtr f = make(Expr::Kind::kFilter, line);
    f->name = std::move(name);
    f->args.push_back(std::move(input));
    if (at_op("(")) parse_call_args(f.get());
    return sealed(std::move(f));
  }

  // [|] f1(args) | f2 ... applied to `input` (null in {% filter %} and {% set x | f %}).
  ExprPtr parse_filter_chain(ExprPtr input, bool leading_pipe = true) {
    if (leading_pipe) expect_op("|");
    else advance();  // stands on "filter"; the name follows
    ExprPtr e = parse_one_filter(std::move(input));
    while (at_op("|")) {
      advance();
      e = parse_one_filter(std::move(e));
    }
    return e;
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    for (;;) {
      if (at_op("|")) {
        advance();
        e = parse_one_filter(std::move(e));
      } else if (at_name("is")) {
        const int line = advance().line;
        ExprPtr test = make(Expr::Kind::kTest, line);
        if (at_name("not")) {
          advance();
          test->negated = true;
        }
        test->name = expect_name();
        check_known(is_known_test(test->name), "test", test->name, line);
        test->args.push_back(std::move(e));
        if (at_op("(")) {
          parse_call_args(test.get());
        } else if ((cur().kind == Kind::kName || cur().kind == Kind::kString || cur().kind == Kind::kInt ||
                    cur().kind == Kind::kFloat || at_op("(") || at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
          test->args.push_back(parse_postfix(parse_primary()));
        }
        e = sealed(std::move(test));
      } else {
        return e;
      }
    }
  }

  // Jinja2 refuses an unknown filter or test when it compiles the template, except inside an
  // {% if %} (which may guard it): there the error comes when the expression runs.
  void check_known(bool known, const char* what, const std::string& name, int line) const {
    if (!known && inside_if_ == 0) throw Error(std::string("unsupported ") + what + " '" + name + "'", line);
  }

  const std::vector<Token>& t_;
  std::size_t pos_ = 0;
  int inside_if_ = 0;
  int depth_ = 0;  // Nest guards held
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace kvstash::jinja
