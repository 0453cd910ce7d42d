#include "server/chat_template.h"

namespace kvstash::server {
namespace {

// Shown when an unrecognised template is refused: enough to identify it, short enough for a log.
constexpr std::size_t kTemplateQuoteChars = 80;

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

}  // namespace

const char* chat_template_name(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::kLlama3 ? "llama3" : "chatml";
}

const char* chat_template_end_token(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
}

Expected<ChatTemplateChoice> choose_chat_template(std::string_view gguf_template,
                                                  std::string_view override_name) {
  ChatTemplateChoice choice;
  if (!override_name.empty()) {
    if (override_name == "chatml") {
      choice.kind = ChatTemplateKind::kChatML;
    } else if (override_name == "llama3") {
      choice.kind = ChatTemplateKind::kLlama3;
    } else {
      return invalid_argument("unknown chat template name '" + std::string(override_name) +
                              "' (built-in templates: chatml, llama3)");
    }
    return choice;
  }
  if (gguf_template.empty()) {
    choice.kind = ChatTemplateKind::kChatML;
    choice.warning = "the model has no tokenizer.chat_template; using ChatML";
    return choice;
  }
  if (gguf_template.find("<|im_start|>") != std::string_view::npos) {
    choice.kind = ChatTemplateKind::kChatML;
    return choice;
  }
  if (gguf_template.find("<|start_header_id|>") != std::string_view::npos) {
    choice.kind = ChatTemplateKind::kLlama3;
    return choice;
  }
  return invalid_argument("unrecognised chat template \"" +
                          std::string(gguf_template.substr(0, kTemplateQuoteChars)) +
                          "\"; pass --chat-template chatml or --chat-template llama3");
}

std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  std::string out;
  if (kind == ChatTemplateKind::kLlama3) {
    render_llama3(messages, add_generation_prompt, out);
  } else {
    render_chatml(messages, add_generation_prompt, out);
  }
  return out;
}

}  // namespace kvstash::server
