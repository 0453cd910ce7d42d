// Chat templates: the model's own (the GGUF's `tokenizer.chat_template`, a Jinja template run by
// the jinja module, with Jinja2's output byte for byte) or one of two built-in formats rendered
// natively, chosen by name:
//
//   chatml (Qwen2):  <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   llama3:          <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//                    <|start_header_id|>assistant<|end_header_id|>\n\n
//
// A Jinja template gets the variables Hugging Face passes: messages ({role, content, and the tool
// fields: tool_calls, tool_call_id, name}), tools (when the request declares any),
// add_generation_prompt, bos_token, eos_token. The built-ins render tool calls and results in
// their families' syntax (Hermes <tool_call> for ChatML, Llama 3.1's JSON and ipython role). The built-ins never write BOS; a Jinja template
// may (Llama 3's writes "<|begin_of_text|>"): the prompt builder drops a leading BOS text when it
// prepends the BOS id itself.
//
// Thread safety: a ChatTemplate is immutable; render() may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"
#include "server/tool_request.h"
#include "tokenizer/special_tokens.h"

namespace kvstash::jinja {
class Template;
}

namespace kvstash::server {

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

  std::string role;     // "system", "user", "assistant" or "tool" (validated by the parser)
  std::string content;  // text parts already joined
  // Tool fields (tool_request.h). An assistant turn that only calls tools (null content in the
  // API) has content "": as vLLM passes it, since many published templates (Qwen3, gpt-oss,
  // Phi-3.5, Granite, Ministral, ...) fail on None.
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
  std::string name;                  // "" = none
};

// What a conversation declares besides its messages.
struct ChatExtras {
  std::string tools_json;  // the request's `tools` array as sent; "" = no tools (the template sees none)
};

// A rendered conversation and where the messages' content lies in it, so that the prompt builder
// can tokenize content as text and only the template's own markup as control tokens.
struct RenderedChat {
  std::string text;                           // exactly what render() returns
  std::vector<tokenizer::TextSpan> content;   // sorted, not overlapping
  // false when the template changed a message's content beyond trimming (or rendered it in a way
  // the markers below could not follow): `content` is then empty and unknown.
  bool located = true;
};

class ChatTemplate {
 public:
  static const ChatTemplate kChatML;
  static const ChatTemplate kLlama3;

  // Parses a Jinja chat template and renders a one-message conversation with it, so that a
  // template using a construct the interpreter lacks fails now, with an error naming it
  // (kInvalidArgument), rather than on the first request.
  static Expected<ChatTemplate> from_jinja(std::string_view source);

  const char* name() const;  // "chatml", "llama3" or "jinja"
  bool is_jinja() const { return kind_ == Kind::kJinja; }
  // The text of the token that ends an assistant turn for a built-in ("<|im_end|>",
  // "<|eot_id|>"); "" for a Jinja template (the tokenizer's end-of-generation tokens apply).
  const char* end_token() const;

  // Renders the conversation, ending with the assistant's header when add_generation_prompt.
  // bos_text / eos_text: the tokenizer's BOS / EOS token texts (Jinja's bos_token, eos_token).
  // Errors (kInvalidArgument): what the template raised ("System role not supported", ...).
  Expected<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const std::string& bos_text = "", const std::string& eos_text = "",
                               const ChatExtras& extras = {}) const;

  // render(), plus where each message's content landed. The template runs a second time with
  // each content replaced by a unique marker; the text between markers is the template's own,
  // and each marker stands for the content as given or trimmed (Llama 3 trims). The text is
  // render()'s byte for byte whatever the markers find.
  Expected<RenderedChat> render_marked(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                       const std::string& bos_text = "", const std::string& eos_text = "",
                                       const ChatExtras& extras = {}) const;

  // The Jinja template's text ("" for a built-in): tool_calls.h tells the model's call syntax by it.
  const std::string& source() const;

  bool operator==(const ChatTemplate& other) const { return kind_ == other.kind_ && jinja_ == other.jinja_; }

 private:
  enum class Kind { kChatML, kLlama3, kJinja };
  explicit ChatTemplate(Kind kind) : kind_(kind) {}

  Kind kind_;
  std::shared_ptr<const jinja::Template> jinja_;
  std::shared_ptr<const std::string> source_;
};

// The name the server's code used when there were only the two built-ins.
using ChatTemplateKind = ChatTemplate;

inline const char* chat_template_name(const ChatTemplate& t) { return t.name(); }
inline const char* chat_template_end_token(const ChatTemplate& t) { return t.end_token(); }

struct ChatTemplateChoice {
  ChatTemplate kind = ChatTemplate::kChatML;
  std::string warning;  // non-empty when the caller should log something (no template: ChatML)
};

// Picks the template. `override_name` wins when non-empty: "chatml" or "llama3", or the text of a
// Jinja template (what --chat-template-file reads; any text holding "{{" or "{%"). Otherwise the
// GGUF's template runs as Jinja; an empty one falls back to ChatML with a warning. Errors
// (kInvalidArgument): an unknown override name; a template that does not parse or render (the
// message names the construct, quotes the template's first 80 characters and the flags that
// override it).
Expected<ChatTemplateChoice> choose_chat_template(std::string_view gguf_template,
                                                  std::string_view override_name);

// render() for callers that know the template cannot fail (the built-ins); "" on an error.
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

}  // namespace kvstash::server
