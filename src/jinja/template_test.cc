// The interpreter's constructs one by one, with outputs checked by hand against Jinja2.
#include "jinja/template.h"

#include <gtest/gtest.h>

namespace kvstash::jinja {
namespace {

std::string render(std::string_view source, Dict context = {}) {
  Expected<Template> t = Template::parse(source);
  if (!t) return "PARSE ERROR: " + t.status().message();
  Expected<std::string> out = t->render(context);
  if (!out) return "RENDER ERROR: " + out.status().message();
  return *out;
}

Dict vars(std::initializer_list<std::pair<const char*, Value>> items) {
  Dict d;
  for (const auto& [k, v] : items) d.set(k, v);
  return d;
}

TEST(Jinja, TextAndOutput) {
  EXPECT_EQ(render("Hello {{ name }}!", vars({{"name", Value("world")}})), "Hello world!");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"), "7 3 3.5 2 1024");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ true }} {{ none }} {{ undefined_var }}|"), "a1None True None |");
  EXPECT_EQ(render("{{ [1, 'a', none, 1.5] }} {{ {'k': 'v'} }}"), "[1, 'a', None, 1.5] {'k': 'v'}");
  EXPECT_EQ(render("{{ \"it's\" }} {{ ['it\\'s'] }}"), "it's [\"it's\"]");
  EXPECT_EQ(render("{{ 'a\\nb' }}"), "a\nb");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 2.0 }}"), "0.30000000000000004 1e+20 2.0");
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks and lstrip_blocks, as Hugging Face renders chat templates.
  EXPECT_EQ(render("{% if true %}\n  x\n{% endif %}\n"), "  x\n");
  EXPECT_EQ(render("a\n    {% if true %}\nb\n    {% endif %}\nc"), "a\nb\nc");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("a\n{%- if true -%}\n b \n{%- endif -%}\n c"), "abc");
  EXPECT_EQ(render("a {# note #}\nb"), "a b");
  EXPECT_EQ(render("line\n"), "line");  // one trailing newline dropped
  EXPECT_EQ(render("x{%+ if true %} y{% endif +%}\nz"), "x y\nz");
}

TEST(Jinja, ControlFlow) {
  const Dict ctx = vars({{"items", Value(List{Value("a"), Value("b"), Value("c")})}});
  EXPECT_EQ(render("{% for x in items %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", ctx),
            "1a,2b,3c");
  EXPECT_EQ(render("{% for x in items if x != 'b' %}{{ loop.index0 }}{{ x }}{{ loop.length }}{% endfor %}", ctx), "0a21c2");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in items %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "a");
  EXPECT_EQ(render("{% for x in items %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}{% endfor %}", ctx), "ac");
  EXPECT_EQ(render("{% for x in items %}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", ctx), "b;ac;b;");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}"), "a=1 b=2 ");
  EXPECT_EQ(render("{% if 0 %}a{% elif 'x' %}b{% else %}c{% endif %}"), "b");
}

TEST(Jinja, ScopesAndNamespaces) {
  // A set inside a loop does not leak; a namespace attribute does.
  // Each iteration starts from the outer value again, as in Jinja2.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "231");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set s %}in {{ 1 }}{% endset %}[{{ s }}]"), "[in 1]");
}

TEST(Jinja, Macros) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{{ m('x', 'y') }}"),
            "<1B><12><xy>");
  EXPECT_EQ(render("{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}"), "G");
}

TEST(Jinja, FiltersAndTests) {
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'ab'|upper }}|{{ [1,2,3]|length }}|{{ [1,2]|join(', ') }}"), "x|AB|3|1, 2");
  EXPECT_EQ(render("{{ x|default('d') }} {{ ''|default('e', true) }}"), "d e");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, 'x']}|tojson }}"), "{\"b\": 1, \"a\": [1, \"x\"]}");
  EXPECT_EQ(render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ 'é\"\\n'|tojson }}"), "\"é\\\"\\n\"");
  const Dict ctx = vars({{"msgs", Value(List{Value(vars({{"role", Value("system")}})), Value(vars({{"role", Value("user")}}))})}});
  EXPECT_EQ(render("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}", ctx), "1");
  EXPECT_EQ(render("{{ msgs|map(attribute='role')|join(',') }}", ctx), "system,user");
  EXPECT_EQ(render("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ 3 is odd }}"),
            "False True True True True");
  EXPECT_EQ(render("{{ 'a\nb'|indent(2) }}"), "a\n  b");
  EXPECT_EQ(render("{% for k, v in {'b': 1, 'A': 2}|dictsort %}{{ k }}{{ v }}{% endfor %}"), "A2b1");
}

TEST(Jinja, StringMethodsAndSlices) {
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'xhix'.strip('x') }}|{{ 'abc'.startswith('a') }}"),
            "a b|['a', 'b']|hi|True");
  EXPECT_EQ(render("{{ 'héllo'[1:3] }}|{{ [1,2,3][::-1] }}|{{ 'abc'[-1] }}|{{ 'a {} {}'.format(1, 'b') }}"),
            "él|[3, 2, 1]|c|a 1 b");
  EXPECT_EQ(render("{{ {'a': 1}.get('b', 'none') }}{{ 'x' in 'xyz' }}{{ 2 in [1, 2] }}{{ 'k' not in {'k': 1} }}"),
            "noneTrueTrueFalse");
}

TEST(Jinja, Errors) {
  EXPECT_NE(render("{% include 'x' %}").find("unsupported tag 'include'"), std::string::npos);
  EXPECT_NE(render("{{ x|from_json }}").find("unsupported filter 'from_json'"), std::string::npos);
  EXPECT_NE(render("{% if x %}").find("not closed"), std::string::npos);
  EXPECT_NE(render("a\n{{ raise_exception('roles must alternate') }}").find("roles must alternate (line 2)"),
            std::string::npos);
  EXPECT_NE(render("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(render("{{ [1].append(2) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(render("{{ 'a' + 1 }}").find("unsupported operand"), std::string::npos);
}

// Every prefix of a real template, and a few broken ones: an error or a render, never a crash
// (this runs under AddressSanitizer in CI).
TEST(Jinja, DamagedTemplatesFailCleanly) {
  const std::string source =
      "{%- if messages[0]['role'] == 'system' %}{%- set sys = messages[0]['content'] %}{%- endif %}"
      "{%- for m in messages|selectattr('role', 'ne', 'system') %}{{ '<|im_start|>' ~ m.role ~ '\\n' }}"
      "{%- if m.content is string %}{{ m.content|trim }}{% else %}{{ m.content|tojson(indent=2) }}{% endif %}"
      "{%- set ns = namespace(n=loop.index) %}{{ ns.n }}{% endfor %}{{ x[1:-1] if x is defined else 'y' }}";
  Dict ctx;
  List messages;
  Dict m;
  m.set("role", Value("user"));
  m.set("content", Value("hi"));
  messages.emplace_back(std::move(m));
  ctx.set("messages", Value(std::move(messages)));
  for (std::size_t n = 0; n <= source.size(); ++n) {
    Expected<Template> t = Template::parse(source.substr(0, n));
    if (t) (void)t->render(ctx);
  }
  for (const char* broken : {"{{", "{%", "{#", "{{ 'abc }}", "{% for %}", "{% if %}{% endfor %}", "{{ ((((1 }}",
                             "{{ [1, 2 }}", "{{ {'a' 1} }}", "{% set %}", "{% macro m( %}", "{{ a.b.c.d() }}",
                             "{{ 1 / 0 }}", "{{ 'x' * -1 }}{{ [][5] }}{{ ''[:] }}", "{% for x in 5 %}{% endfor %}",
                             "{{ range(1000000) }}", "{{ '\\u12' }}", "{%- endif -%}", "}}{{"}) {
    Expected<Template> t = Template::parse(broken);
    if (t) (void)t->render(ctx);
  }
  // Recursion is bounded.
  EXPECT_FALSE(Template::parse("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}")->render(ctx).has_value());
  // Loops in loops are bounded by work: the render stops with the step error, not after 10^10 iterations.
  auto nested = Template::parse("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(nested.has_value());
  auto stopped = nested->render(ctx);
  ASSERT_FALSE(stopped.has_value());
  EXPECT_NE(stopped.status().message().find("steps"), std::string::npos) << stopped.status().message();
  // A loop of a few thousand items (a long chat) stays well within the budget.
  EXPECT_EQ(render("{% for a in range(20000) %}{% if loop.last %}{{ loop.index }}{% endif %}{% endfor %}"), "20000");
}

}  // namespace
}  // namespace kvstash::jinja
