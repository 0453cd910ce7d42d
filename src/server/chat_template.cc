#include "server/chat_template.h"

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
