#include "jinja/template.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/builtins.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace kvstash::jinja {
namespace {

// Jinja2's sandbox bounds range() to this many items.
constexpr std::int64_t kMaxRange = 100000;
// Macros calling macros: deep enough for any template, shallow enough for the stack.
constexpr int kMaxCallDepth = 200;
// Expressions evaluated in one render: a chat of thousands of messages takes well under a million;
// a hostile template (loops in loops) fails within seconds, even under ASan, instead of running for
// ever (5 M steps of nested range() loops took over 30 s under ASan in the fuzzer).
// Steps count work, not only evaluations: a loop is charged its item count when it builds its list
// and kIterationSteps for each iteration (which builds the 12-entry `loop` object). So
// `range(100000)` in `range(100000)` stops after ~140 k iterations (under ASan a few seconds),
// where counting an iteration as one step let it run a million (37 s under ASan).
constexpr std::int64_t kMaxSteps = 1'000'000;
constexpr std::int64_t kIterationSteps = 6;

// Variables of one scope. Each iteration of a for loop and each macro call opens one; if blocks
// do not. Lookups fall through to the parent, assignments stay in the scope: as in Jinja2, a
// loop's sets do not leak out and each iteration starts from the outer values again.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const RenderOptions& options) : options_(options) {}

  void run(const Body& body, const Dict& context, std::string* out) {
    install_globals(&globals_);
    root_.parent = &globals_;
    for (const auto& [k, v] : context.items) root_.vars[k] = v;
    exec_body(body, &root_, out);
  }

 private:
  void install_globals(Scope* g) {
    g->vars["raise_exception"] = Value::function([](CallArgs& args) -> Value {
      throw Failure(args.positional.empty() ? std::string("raise_exception") : args.positional[0].to_str());
    });
    g->vars["namespace"] = Value::function([](CallArgs& args) -> Value {
      Dict d;
      d.is_namespace = true;
      for (const Value& p : args.positional) {
        if (!p.is_dict()) throw Failure("namespace() takes dicts and keyword arguments");
        for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
      }
      for (auto& [k, v] : args.named) d.set(k, v);
      return Value(std::move(d));
    });
    g->vars["dict"] = Value::function([](CallArgs& args) -> Value {
      Dict d;
      for (const Value& p : args.positional) {
        if (!p.is_dict()) throw Failure("dict() takes dicts and keyword arguments");
        for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
      }
      for (auto& [k, v] : args.named) d.set(k, v);
      return Value(std::move(d));
    });
    g->vars["range"] = Value::function([](CallArgs& args) -> Value {
      std::vector<std::int64_t> n;
      for (const Value& v : args.positional) {
        if (!v.is_int()) throw Failure("range() takes integers, not " + v.type_name());
        n.push_back(v.as_int());
      }
      if (n.empty() || n.size() > 3) throw Failure("range() takes 1 to 3 arguments");
      const std::int64_t start = n.size() == 1 ? 0 : n[0];
      const std::int64_t stop = n.size() == 1 ? n[0] : n[1];
      const std::int64_t step = n.size() == 3 ? n[2] : 1;
      if (step == 0) throw Failure("range() arg 3 must not be zero");
      List out;
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<std::int64_t>(out.size()) >= kMaxRange) throw Failure("range() too big");
        out.emplace_back(i);
      }
      return Value(std::move(out));
    });
    const std::time_t now = options_.now != 0 ? options_.now : std::time(nullptr);
    g->vars["strftime_now"] = Value::function([now](CallArgs& args) -> Value {
      if (args.positional.empty() || !args.positional[0].is_string()) throw Failure("strftime_now(format) takes a string");
      std::tm tm{};
      gmtime_r(&now, &tm);
      char buf[256];
      const std::size_t n = std::strftime(buf, sizeof(buf), args.positional[0].as_string().c_str(), &tm);
      return Value(std::string(buf, n));
    });
  }

  // ---- statements ----

  Flow exec_body(const Body& body, Scope* scope, std::string* out) {
    for (const StmtPtr& s : body) {
      const Flow flow = exec(*s, scope, out);
      if (out->size() > kMaxStringBytes) throw Error("output larger than " + std::to_string(kMaxStringBytes) + " bytes", s->line);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, Scope* scope, std::string* out) {
    try {
      return exec_unchecked(s, scope, out);
    } catch (const Failure& e) {
      throw Error(e.what(), s.line);
    }
  }

  Flow exec_unchecked(const Stmt& s, Scope* scope, std::string* out) {
    switch (s.kind) {
      case Stmt::Kind::kText: *out += s.text; return Flow::kNormal;
      case Stmt::Kind::kOutput: *out += eval(*s.expr, scope).to_str(); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [condition, body] : s.branches) {
          if (condition == nullptr || eval(*condition, scope).truthy()) return exec_body(body, scope, out);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor: return exec_for(s, scope, out);
      case Stmt::Kind::kSet: {
        Value v = eval(*s.expr, scope);
        if (!s.attr.empty()) {
          const Value* target = scope->find(s.targets[0]);
          if (target == nullptr || !target->is_dict() || !target->as_dict().is_namespace) {
            throw Failure("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
          }
          target->as_dict().set(s.attr, std::move(v));
        } else if (s.targets.size() == 1) {
          scope->vars[s.targets[0]] = std::move(v);
        } else {
          assign_unpacked(s.targets, v, scope);
        }
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        exec_body(s.body, scope, &captured);
        Value v(std::move(captured));
        if (s.filter) v = eval_filter(*s.filter, scope, &v);
        scope->vars[s.targets[0]] = std::move(v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: scope->vars[s.name] = make_macro(s, scope); return Flow::kNormal;
      case Stmt::Kind::kFilterBlock: {
        std::string captured;
        exec_body(s.body, scope, &captured);
        const Value input(std::move(captured));
        *out += eval_filter(*s.filter, scope, &input).to_str();
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kBlock: return exec_body(s.body, scope, out);
    }
    return Flow::kNormal;
  }

  void assign_unpacked(const std::vector<std::string>& names, const Value& v, Scope* scope) {
    const List items = iterate(v);
    if (items.size() != names.size()) {
      throw Failure("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()));
    }
    for (std::size_t i = 0; i < names.size(); ++i) scope->vars[names[i]] = items[i];
  }

  Flow exec_for(const Stmt& s, Scope* scope, std::string* out) {
    List items = iterate(eval(*s.expr, scope));
    Scope loop_scope;
    loop_scope.parent = scope;
    if (s.condition) {  // the loop's "if" filters before loop.* is counted
      List kept;
      for (const Value& item : items) {
        bind_targets(s.targets, item, &loop_scope);
        if (eval(*s.condition, &loop_scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, scope, out);
    const auto n = static_cast<std::int64_t>(items.size());
    count_steps(n);  // building the list
    for (std::int64_t i = 0; i < n; ++i) {
      count_steps(kIterationSteps);  // an iteration counts even when its body evaluates nothing
      const Value& item = items[static_cast<std::size_t>(i)];
      loop_scope.vars.clear();
      bind_targets(s.targets, item, &loop_scope);
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      loop.set("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value::undefined("loop.previtem"));
      loop.set("nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : Value::undefined("loop.nextitem"));
      loop.set("cycle", Value::function([i](CallArgs& args) -> Value {
        if (args.positional.empty()) throw Failure("loop.cycle() takes at least one argument");
        return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
      }));
      Value loop_value(std::move(loop));
      loop_value.as_dict().is_namespace = true;  // attributes only: loop.items is no dict method
      loop_scope.vars["loop"] = std::move(loop_value);
      const Flow flow = exec_body(s.body, &loop_scope, out);
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& item, Scope* scope) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = item;
    } else {
      assign_unpacked(targets, item, scope);
    }
  }

  Value make_macro(const Stmt& s, Scope* defining_scope) {
    // A macro sees the template's top-level variables (looked up when called) and its own
    // arguments; the defining scope matters only for macros defined inside a loop or macro.
    const Stmt* macro = &s;
    Scope* parent = defining_scope;
    return Value::function([this, macro, parent](CallArgs& args) -> Value {
      if (++depth_ > kMaxCallDepth) {
        --depth_;
        throw Failure("macro calls nested too deeply");
      }
      Scope scope;
      scope.parent = parent;
      const auto& params = macro->params;
      if (args.positional.size() > params.size()) {
        --depth_;
        throw Failure("macro '" + macro->name + "' takes " + std::to_string(params.size()) + " arguments");
      }
      for (std::size_t i = 0; i < params.size(); ++i) {
        const std::string& name = params[i].first;
        if (i < args.positional.size()) {
          scope.vars[name] = args.positional[i];
          continue;
        }
        const auto named = std::find_if(args.named.begin(), args.named.end(), [&](const auto& kv) { return kv.first == name; });
        if (named != args.named.end()) {
          scope.vars[name] = named->second;
        } else if (params[i].second) {
          scope.vars[name] = eval(*params[i].second, &scope);
        } else {
          scope.vars[name] = Value::undefined(name);
        }
      }
      for (const auto& named : args.named) {
        const std::string& name = named.first;  // not a structured binding: clang 14 cannot capture one
        const bool known = std::any_of(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
        if (!known) {
          --depth_;
          throw Failure("macro '" + macro->name + "' takes no keyword argument '" + name + "'");
        }
      }
      std::string captured;
      try {
        exec_body(macro->body, &scope, &captured);
      } catch (...) {
        --depth_;
        throw;
      }
      --depth_;
      return Value(std::move(captured));
    });
  }

  // ---- expressions ----

  Value eval(const Expr& e, Scope* scope) {
    count_step();
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Kind::kAttr: return get_attribute(eval(*e.args[0], scope), e.name);
      case Expr::Kind::kItem: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::Kind::kSlice: {
        const Value obj = eval(*e.args[0], scope);
        Value bounds[3];
        const Value* ptrs[3] = {nullptr, nullptr, nullptr};
        for (int i = 0; i < 3; ++i) {
          if (e.args[static_cast<std::size_t>(i) + 1]) {
            bounds[i] = eval(*e.args[static_cast<std::size_t>(i) + 1], scope);
            ptrs[i] = &bounds[i];
          }
        }
        return slice(obj, ptrs[0], ptrs[1], ptrs[2]);
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.args[0], scope);
        if (!callee.is_function()) {
          if (callee.is_undefined()) throw Failure("'" + callee.undefined_name() + "' is undefined");
          throw Failure("'" + callee.type_name() + "' object is not callable");
        }
        CallArgs args = eval_args(e, scope);
        return callee.as_function()(args);
      }
      case Expr::Kind::kFilter: return eval_filter(e, scope, nullptr);
      case Expr::Kind::kTest: {
        const Value v = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, scope);
        return Value(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_int()) {
          if (e.name == "-" && v.as_int() == INT64_MIN) throw Failure("integer overflow in unary '-'");
          return Value(e.name == "-" ? -v.as_int() : v.as_int());
        }
        if (v.is_float()) return Value(e.name == "-" ? -v.as_float() : v.as_float());
        throw Failure("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      }
      case Expr::Kind::kBinary: return binary_op(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::Kind::kAnd: {
        Value left = eval(*e.args[0], scope);
        return left.truthy() ? eval(*e.args[1], scope) : left;
      }
      case Expr::Kind::kOr: {
        Value left = eval(*e.args[0], scope);
        return left.truthy() ? left : eval(*e.args[1], scope);
      }
      case Expr::Kind::kCond:
        if (eval(*e.args[1], scope).truthy()) return eval(*e.args[0], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("conditional");
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
          d.set(dict_key(eval(*e.args[i], scope)), eval(*e.args[i + 1], scope));
        }
        return Value(std::move(d));
      }
    }
    return Value();
  }

  // Arguments of a call, filter or test: args[1..] and kwargs.
  CallArgs eval_args(const Expr& e, Scope* scope) {
    CallArgs args;
    for (std::size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], scope));
    for (const auto& [name, value] : e.kwargs) args.named.emplace_back(name, eval(*value, scope));
    return args;
  }

  // A filter chain; `input` stands in for the innermost null operand ({% filter %}, set blocks).
  Value eval_filter(const Expr& e, Scope* scope, const Value* input) {
    Value subject;
    if (e.args[0] == nullptr) {
      subject = input ? *input : Value();
    } else if (e.args[0]->kind == Expr::Kind::kFilter) {
      subject = eval_filter(*e.args[0], scope, input);
    } else {
      subject = eval(*e.args[0], scope);
    }
    CallArgs args = eval_args(e, scope);
    return apply_filter(e.name, subject, args);
  }

  const RenderOptions& options_;
  Scope globals_;
  Scope root_;
  void count_steps(std::int64_t n) {
    steps_ += n;
    if (steps_ > kMaxSteps) throw Failure("template takes more than " + std::to_string(kMaxSteps) + " steps");
  }
  void count_step() { count_steps(1); }

  int depth_ = 0;
  std::int64_t steps_ = 0;  // eval() calls, loop items and iterations so far (kMaxSteps)
};

}  // namespace

Expected<Template> Template::parse(std::string_view source) {
  try {
    Template t;
    t.body_ = std::make_shared<const Body>(jinja::parse(tokenize(source)));
    return t;
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

Expected<std::string> Template::render(const Dict& context, const RenderOptions& options) const {
  try {
    std::string out;
    Renderer(options).run(*body_, context, &out);
    return out;
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

}  // namespace kvstash::jinja
