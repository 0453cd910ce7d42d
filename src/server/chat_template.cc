#include "server/chat_template.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "jinja/template.h"
#include "jinja/value.h"

namespace kvstash::server {
namespace {

// Shown when a template is refused: enough to identify it, short enough for a log.
constexpr std::size_t kTemplateQuoteChars = 80;
constexpr const char* kOverrideHint =
    "pass --chat-template chatml, --chat-template llama3 or --chat-template-file FILE.jinja";

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  std::size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  std::size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

void render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                   std::string& out) {
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      // Qwen2's template presents tool output as a user turn wrapped in <tool_response>.
      out += "<|im_start|>user\n<tool_response>\n";
      out += m.content;
      out += "\n</tool_response><|im_end|>\n";
      continue;
    }
    out += "<|im_start|>";
    out += m.role;
    out += "\n";
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
}

void render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                   std::string& out) {
  for (const ChatMessage& m : messages) {
    // Llama 3.1 names the tool-output role "ipython".
    std::string_view role = m.role == "tool" ? "ipython" : std::string_view(m.role);
    out += "<|start_header_id|>";
    out += role;
    out += "<|end_header_id|>\n\n";
    out += trim(m.content);
    out += "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

// A message as the OpenAI API has it, for a template: the tool fields only when present (templates
// test `message.tool_calls is defined`).
jinja::Value message_value(const ChatMessage& m) {
  jinja::Dict message;
  message.set("role", jinja::Value(m.role));
  message.set("content", jinja::Value(m.content));
  if (!m.name.empty()) message.set("name", jinja::Value(m.name));
  if (!m.tool_call_id.empty()) message.set("tool_call_id", jinja::Value(m.tool_call_id));
  if (!m.tool_calls.empty()) {
    jinja::List calls;
    for (const ToolCall& c : m.tool_calls) {
      // Arguments as the object they encode (tool_request.h says why); other text stays a string.
      nlohmann::ordered_json args = nlohmann::ordered_json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
      jinja::Dict function;
      function.set("name", jinja::Value(c.name));
      function.set("arguments", args.is_object() ? jinja::from_json(args) : jinja::Value(c.arguments));
      jinja::Dict call;
      call.set("id", jinja::Value(c.id));
      call.set("type", jinja::Value("function"));
      call.set("function", jinja::Value(std::move(function)));
      calls.emplace_back(std::move(call));
    }
    message.set("tool_calls", jinja::Value(std::move(calls)));
  }
  return jinja::Value(std::move(message));
}

jinja::Dict jinja_context(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& bos_text, const std::string& eos_text, const ChatExtras& extras) {
  jinja::List list;
  for (const ChatMessage& m : messages) list.push_back(message_value(m));
  jinja::Dict context;
  context.set("messages", jinja::Value(std::move(list)));
  if (!extras.tools_json.empty()) {
    nlohmann::ordered_json tools = nlohmann::ordered_json::parse(extras.tools_json, nullptr, false);
    if (tools.is_array()) context.set("tools", jinja::from_json(tools));
  }
  context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  context.set("bos_token", jinja::Value(bos_text));
  context.set("eos_token", jinja::Value(eos_text));
  return context;
}

// The built-ins' tool conversations (tools declared, or calls in the history) render through
// these Jinja templates, in the syntax of the family each built-in stands for: Qwen2.5's Hermes
// <tool_call> for ChatML (without Qwen's default system line, which the plain built-in lacks too),
// Llama 3.1's JSON calls and ipython role for llama3.
// Every line opens with "{%-" or "{{-" and all text is in expressions: with trim_blocks and
// lstrip_blocks the template's own layout then adds no whitespace.
constexpr const char* kChatMLTools = R"JINJA(
{%- if tools %}
  {{- '<|im_start|>system\n' }}
  {%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{% endif %}
  {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' }}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
  {%- for tool in tools %}{{- '\n' + (tool | tojson) }}{% endfor %}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' }}
  {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' }}
  {{- '\n</tool_call><|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
  {%- if message.role == 'system' and loop.first and tools %}
  {%- elif message.role == 'tool' %}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{% endif %}
    {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{% endif %}
  {%- elif message.role == 'assistant' and message.tool_calls %}
    {{- '<|im_start|>assistant' }}
    {%- if message.content %}{{- '\n' + message.content }}{% endif %}
    {%- for call in message.tool_calls %}
      {{- '\n<tool_call>\n{"name": "' + call.function.name + '", "arguments": ' }}
      {{- (call.function.arguments | tojson) + '}\n</tool_call>' }}
    {%- endfor %}
    {{- '<|im_end|>\n' }}
  {%- else %}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{% endif %})JINJA";

constexpr const char* kLlama3Tools = R"JINJA(
{%- set ns = namespace(tools_shown=false) %}
{%- for message in messages %}
  {%- if message.role == 'user' and tools and not ns.tools_shown %}
    {%- set ns.tools_shown = true %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' }}
    {{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments ' }}
    {{- 'that best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": ' }}
    {{- 'dictionary of argument name and its value}. Do not use variables.\n\n' }}
    {%- for tool in tools %}{{- (tool | tojson(indent=4)) + '\n\n' }}{% endfor %}
    {{- (message.content | trim) + '<|eot_id|>' }}
  {%- elif message.role == 'assistant' and message.tool_calls %}
    {%- for call in message.tool_calls %}
      {{- '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "' + call.function.name + '", "parameters": ' }}
      {{- (call.function.arguments | tojson) + '}<|eot_id|>' }}
    {%- endfor %}
  {%- else %}
    {{- '<|start_header_id|>' + ('ipython' if message.role == 'tool' else message.role) + '<|end_header_id|>\n\n' }}
    {{- (message.content | trim) + '<|eot_id|>' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})JINJA";

const jinja::Template& builtin_tools_template(bool chatml) {
  static const jinja::Template chatml_tools = *jinja::Template::parse(kChatMLTools);
  static const jinja::Template llama3_tools = *jinja::Template::parse(kLlama3Tools);
  return chatml ? chatml_tools : llama3_tools;
}

bool uses_tools(const std::vector<ChatMessage>& messages, const ChatExtras& extras) {
  return !extras.tools_json.empty() ||
         std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return !m.tool_calls.empty(); });
}

std::string_view ltrim(std::string_view s) {
  const std::size_t b = s.find_first_not_of(" \t\r\n");
  return b == std::string_view::npos ? std::string_view() : s.substr(b);
}

std::string_view rtrim(std::string_view s) {
  const std::size_t e = s.find_last_not_of(" \t\r\n");
  return e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
}

// Markers stand in for message content: ASCII SUB, a prefix no content holds, the message index,
// SUB. They have no whitespace at their ends, so a template's trim leaves them as they are.
constexpr char kMarkerEdge = '\x1a';

// Where the marked rendering's markers, expanded to their content, reproduce `text`: the spans
// of content, or nullopt when they do not line up.
std::optional<std::vector<tokenizer::TextSpan>> locate_content(std::string_view text, std::string_view marked,
                                                               const std::string& prefix,
                                                               const std::vector<ChatMessage>& messages) {
  std::vector<tokenizer::TextSpan> spans;
  std::size_t tpos = 0;  // in text
  std::size_t mpos = 0;  // in marked
  // The template's text from `from` in `marked` up to the next marker (or the end).
  const auto literal = [&](std::size_t from) {
    const std::size_t next = marked.find(prefix, from);
    return marked.substr(from, (next == std::string_view::npos ? marked.size() : next) - from);
  };
  for (;;) {
    const std::string_view lit = literal(mpos);
    if (text.compare(tpos, lit.size(), lit) != 0) return std::nullopt;
    tpos += lit.size();
    mpos += lit.size();
    if (mpos == marked.size()) break;
    // A marker: prefix, decimal index, kMarkerEdge.
    std::size_t p = mpos + prefix.size();
    std::size_t index = 0;
    bool digits = false;
    while (p < marked.size() && marked[p] >= '0' && marked[p] <= '9') {
      index = index * 10 + static_cast<std::size_t>(marked[p] - '0');
      digits = true;
      if (index >= messages.size()) return std::nullopt;
      ++p;
    }
    if (!digits || p >= marked.size() || marked[p] != kMarkerEdge) return std::nullopt;
    mpos = p + 1;
    const std::string_view next_lit = literal(mpos);
    const std::string_view content = messages[index].content;
    bool placed = false;
    for (std::string_view candidate : {content, trim(content), ltrim(content), rtrim(content)}) {
      if (text.compare(tpos, candidate.size(), candidate) != 0) continue;
      if (text.compare(tpos + candidate.size(), next_lit.size(), next_lit) != 0) continue;
      if (!candidate.empty()) spans.push_back({tpos, candidate.size()});
      tpos += candidate.size();
      placed = true;
      break;
    }
    if (!placed) return std::nullopt;
  }
  if (tpos != text.size()) return std::nullopt;
  return spans;
}

std::string quote(std::string_view tmpl) {
  return "\"" + std::string(tmpl.substr(0, kTemplateQuoteChars)) + (tmpl.size() > kTemplateQuoteChars ? "..." : "") +
         "\"";
}

}  // namespace

const ChatTemplate ChatTemplate::kChatML{ChatTemplate::Kind::kChatML};
const ChatTemplate ChatTemplate::kLlama3{ChatTemplate::Kind::kLlama3};

Expected<ChatTemplate> ChatTemplate::from_jinja(std::string_view source) {
  Expected<jinja::Template> parsed = jinja::Template::parse(source);
  if (!parsed) return parsed.status();
  ChatTemplate t(Kind::kJinja);
  t.jinja_ = std::make_shared<const jinja::Template>(std::move(*parsed));
  t.source_ = std::make_shared<const std::string>(source);
  // A conversation every chat template must take: constructs that only run when rendering fail here.
  const Expected<std::string> sample = t.render({{"user", "Hello"}}, true, "<s>", "</s>");
  if (!sample) return sample.status();
  return t;
}

const char* ChatTemplate::name() const {
  switch (kind_) {
    case Kind::kChatML: return "chatml";
    case Kind::kLlama3: return "llama3";
    case Kind::kJinja: return "jinja";
  }
  return "?";
}

const char* ChatTemplate::end_token() const {
  switch (kind_) {
    case Kind::kChatML: return "<|im_end|>";
    case Kind::kLlama3: return "<|eot_id|>";
    case Kind::kJinja: return "";
  }
  return "";
}

const std::string& ChatTemplate::source() const {
  static const std::string kNone;
  return source_ ? *source_ : kNone;
}

Expected<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                           const std::string& bos_text, const std::string& eos_text,
                                           const ChatExtras& extras) const {
  std::string out;
  if (kind_ != Kind::kJinja && uses_tools(messages, extras)) {
    return builtin_tools_template(kind_ == Kind::kChatML)
        .render(jinja_context(messages, add_generation_prompt, bos_text, eos_text, extras));
  }
  switch (kind_) {
    case Kind::kChatML: render_chatml(messages, add_generation_prompt, out); return out;
    case Kind::kLlama3: render_llama3(messages, add_generation_prompt, out); return out;
    case Kind::kJinja: return jinja_->render(jinja_context(messages, add_generation_prompt, bos_text, eos_text, extras));
  }
  return out;
}

Expected<RenderedChat> ChatTemplate::render_marked(const std::vector<ChatMessage>& messages,
                                                   bool add_generation_prompt, const std::string& bos_text,
                                                   const std::string& eos_text, const ChatExtras& extras) const {
  Expected<std::string> text = render(messages, add_generation_prompt, bos_text, eos_text, extras);
  if (!text) return text.status();
  RenderedChat out;
  out.text = std::move(*text);
  const bool any_content = std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return !m.content.empty(); });
  if (!any_content) return out;
  // A marker prefix that no content holds: "<edge>kvstash-content-N:" for the smallest N no content
  // names (0 nearly always). One scan collects the N that contents name, so content written to
  // name many of them costs linear time, not one scan of every message per N.
  const std::string base = std::string(1, kMarkerEdge) + "kvstash-content-";
  std::unordered_set<std::uint64_t> named;
  for (const ChatMessage& m : messages) {
    for (std::size_t at = m.content.find(base); at != std::string::npos; at = m.content.find(base, at + 1)) {
      std::size_t end = at + base.size();
      std::uint64_t n = 0;
      int digits = 0;
      while (end < m.content.size() && digits < 19 && m.content[end] >= '0' && m.content[end] <= '9') {
        n = n * 10 + static_cast<std::uint64_t>(m.content[end++] - '0');
        ++digits;
      }
      const bool canonical = digits == 1 || (digits > 1 && m.content[at + base.size()] != '0');
      if (canonical && end < m.content.size() && m.content[end] == ':') named.insert(n);
    }
  }
  std::uint64_t free_n = 0;
  while (named.count(free_n)) ++free_n;
  const std::string prefix = base + std::to_string(free_n) + ":";
  std::vector<ChatMessage> marked = messages;
  for (std::size_t i = 0; i < marked.size(); ++i) {
    // Empty content stays empty: a template may test it ("{% if message.content %}").
    if (!marked[i].content.empty()) marked[i].content = prefix + std::to_string(i) + kMarkerEdge;
  }
  Expected<std::string> marked_text = render(marked, add_generation_prompt, bos_text, eos_text, extras);
  std::optional<std::vector<tokenizer::TextSpan>> spans;
  if (marked_text) spans = locate_content(out.text, *marked_text, prefix, messages);
  if (spans) {
    out.content = std::move(*spans);
  } else {
    out.located = false;
  }
  return out;
}

Expected<ChatTemplateChoice> choose_chat_template(std::string_view gguf_template,
                                                  std::string_view override_name) {
  ChatTemplateChoice choice;
  if (!override_name.empty()) {
    if (override_name == "chatml") {
      choice.kind = ChatTemplate::kChatML;
    } else if (override_name == "llama3") {
      choice.kind = ChatTemplate::kLlama3;
    } else if (override_name.find("{{") != std::string_view::npos || override_name.find("{%") != std::string_view::npos) {
      Expected<ChatTemplate> t = ChatTemplate::from_jinja(override_name);
      if (!t) return invalid_argument("the given chat template " + quote(override_name) + " cannot be used: " + t.status().message());
      choice.kind = std::move(*t);
    } else {
      return invalid_argument("unknown chat template name '" + std::string(override_name) +
                              "' (built-in templates: chatml, llama3; or give a Jinja template with "
                              "--chat-template-file FILE.jinja)");
    }
    return choice;
  }
  if (gguf_template.empty()) {
    choice.kind = ChatTemplate::kChatML;
    choice.warning = "the model has no tokenizer.chat_template; using ChatML";
    return choice;
  }
  Expected<ChatTemplate> t = ChatTemplate::from_jinja(gguf_template);
  if (!t) {
    return invalid_argument("the model's chat template " + quote(gguf_template) + " cannot be used: " +
                            t.status().message() + "; " + kOverrideHint);
  }
  choice.kind = std::move(*t);
  return choice;
}

std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  Expected<std::string> text = chat_template.render(messages, add_generation_prompt);
  return text ? std::move(*text) : std::string();
}

}  // namespace kvstash::server
