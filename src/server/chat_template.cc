#include "server/chat_template.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_set>

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

jinja::Dict jinja_context(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::string& bos_text, const std::string& eos_text) {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    jinja::Dict message;
    message.set("role", jinja::Value(m.role));
    message.set("content", jinja::Value(m.content));
    list.emplace_back(std::move(message));
  }
  jinja::Dict context;
  context.set("messages", jinja::Value(std::move(list)));
  context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  context.set("bos_token", jinja::Value(bos_text));
  context.set("eos_token", jinja::Value(eos_text));
  return context;
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

Expected<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                           const std::string& bos_text, const std::string& eos_text) const {
  std::string out;
  switch (kind_) {
    case Kind::kChatML: render_chatml(messages, add_generation_prompt, out); return out;
    case Kind::kLlama3: render_llama3(messages, add_generation_prompt, out); return out;
    case Kind::kJinja: return jinja_->render(jinja_context(messages, add_generation_prompt, bos_text, eos_text));
  }
  return out;
}

Expected<RenderedChat> ChatTemplate::render_marked(const std::vector<ChatMessage>& messages,
                                                   bool add_generation_prompt, const std::string& bos_text,
                                                   const std::string& eos_text) const {
  Expected<std::string> text = render(messages, add_generation_prompt, bos_text, eos_text);
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
  Expected<std::string> marked_text = render(marked, add_generation_prompt, bos_text, eos_text);
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
