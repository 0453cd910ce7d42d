// Chat templates rendered natively (no Jinja engine): the two families the engine runs.
//
//   ChatML (Qwen2):  <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   Llama 3:         <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//                    <|start_header_id|>assistant<|end_header_id|>\n\n
//
// A GGUF file's `tokenizer.chat_template` (a Jinja string) is recognised by its marker tokens,
// not executed. The rendered text never contains BOS: the caller prepends the BOS id when the
// tokenizer asks for one (Llama 3's template writes "<|begin_of_text|>" itself, which would
// otherwise double it). Llama 3's template trims each message's content; so does this one.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::server {

enum class ChatTemplateKind { kChatML, kLlama3 };

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool" (validated by the parser)
  std::string content;  // text parts already joined
};

// "chatml" or "llama3".
const char* chat_template_name(ChatTemplateKind kind);
// The text of the token that ends an assistant turn: "<|im_end|>" or "<|eot_id|>".
const char* chat_template_end_token(ChatTemplateKind kind);

struct ChatTemplateChoice {
  ChatTemplateKind kind = ChatTemplateKind::kChatML;
  std::string warning;  // non-empty when the caller should log something (no template: ChatML)
};

// Picks the template: `override_name` ("chatml"/"llama3") wins when non-empty; otherwise the
// GGUF template string is recognised by its markers; an empty one falls back to ChatML with a
// warning. Errors (kInvalidArgument): an unknown override name; an unrecognised GGUF template
// (the message quotes its first 80 characters).
Expected<ChatTemplateChoice> choose_chat_template(std::string_view gguf_template,
                                                  std::string_view override_name);

// Renders the conversation, ending with the assistant header when add_generation_prompt.
std::string render_chat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

}  // namespace kvstash::server
