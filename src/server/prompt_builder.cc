#include "server/prompt_builder.h"

#include <algorithm>
#include <string>

namespace kvstash::server {
namespace {

std::optional<ApiError> check_tool_text(const ParsedRequest& parsed, const Tokenizer& tok) {
  const auto refuse = [](const std::string& param) {
    return bad_request("'" + param + "' holds special-token text (such as \"<|im_end|>\"), which would become the "
                           "template's markup; remove it, or start the server with --parse-special-in-content",
                       param, "special_tokens_in_content");
  };
  if (!parsed.tools.tools_json.empty() && tok.contains_special(parsed.tools.tools_json)) return refuse("tools");
  for (std::size_t i = 0; i < parsed.messages.size(); ++i) {
    const ChatMessage& m = parsed.messages[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    for (std::size_t c = 0; c < m.tool_calls.size(); ++c) {
      const ToolCall& call = m.tool_calls[c];
      if (tok.contains_special(call.id + call.name + call.arguments)) {
        return refuse(p + ".tool_calls[" + std::to_string(c) + "]");
      }
    }
    if (tok.contains_special(m.tool_call_id + m.name)) return refuse(p);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> build_generation_request(const ParsedRequest& parsed, const ModelInfo& model,
                                                 const ChatTemplate& chat_template,
                                                 GenerationRequest& out, const PromptOptions& options) {
  out = GenerationRequest{};
  const Tokenizer& tok = *model.tokenizer;
  if (tok.add_bos() && tok.bos_id() >= 0) out.prompt.push_back(tok.bos_id());
  if (parsed.endpoint == Endpoint::kChatCompletions) {
    // Tools and tool calls are rendered as the template's own text (no content markers follow
    // them): special-token text in them would become control tokens, so it is refused.
    if (!options.parse_special_in_content) {
      if (auto err = check_tool_text(parsed, tok)) return err;
    }
    Expected<RenderedChat> rendered = chat_template.render_marked(parsed.messages, /*add_generation_prompt=*/true,
                                                                  tok.token_text(tok.bos_id()), tok.token_text(tok.eos_id()),
                                                                  ChatExtras{parsed.tools.tools_json});
    if (!rendered) return bad_request(rendered.status().message(), "messages", "invalid_chat_template");
    std::string& text = rendered->text;
    std::vector<TextSpan>& content = rendered->content;
    const std::string bos_text = tok.token_text(tok.bos_id());
    if (!out.prompt.empty() && !bos_text.empty() && text.compare(0, bos_text.size(), bos_text) == 0) {
      text.erase(0, bos_text.size());
      for (TextSpan& span : content) {  // content never starts inside the template's BOS text
        const std::size_t cut = std::min(span.offset, bos_text.size());
        span.offset -= cut;
      }
    }
    std::vector<TokenId> ids;
    if (options.parse_special_in_content) {
      ids = tok.encode(text, /*parse_special=*/true);
    } else if (rendered->located) {
      ids = tok.encode_with_plain_spans(text, content);
    } else {
      // The template changed content past recognition: safe only when no content holds special-token text.
      for (const ChatMessage& m : parsed.messages) {
        if (tok.encode(m.content, /*parse_special=*/true) != tok.encode(m.content, /*parse_special=*/false)) {
          return bad_request("a message's content holds special-token text (such as \"<|im_end|>\"), which this server "
                             "keeps as plain text, but this chat template rewrites content so that it cannot be told "
                             "apart from the template's markup; remove it, or start the server with "
                             "--parse-special-in-content",
                             "messages", "special_tokens_in_content");
        }
      }
      ids = tok.encode(text, /*parse_special=*/true);
    }
    out.prompt.insert(out.prompt.end(), ids.begin(), ids.end());
    const std::string end_text = chat_template.end_token();
    if (std::optional<TokenId> end = end_text.empty() ? std::nullopt : tok.find_token(end_text)) {
      out.stop_tokens.push_back(*end);
    }
  } else if (parsed.prompt_is_tokens) {
    // A token-id prompt is taken as given: the client chose whether it starts with BOS.
    out.prompt = parsed.prompt_tokens;
    for (std::size_t i = 0; i < out.prompt.size(); ++i) {
      if (out.prompt[i] < 0 || out.prompt[i] >= model.n_vocab) {
        return bad_request("token id " + std::to_string(out.prompt[i]) + " at 'prompt[" +
                               std::to_string(i) + "]' is out of range (vocabulary size " +
                               std::to_string(model.n_vocab) + ")",
                           "prompt", "invalid_token");
      }
    }
  } else {
    std::vector<TokenId> ids = tok.encode(parsed.prompt_text, /*parse_special=*/false);
    out.prompt.insert(out.prompt.end(), ids.begin(), ids.end());
  }

  const int prompt_tokens = static_cast<int>(out.prompt.size());
  if (prompt_tokens == 0) return bad_request("the prompt is empty after tokenization", "prompt", "empty_prompt");
  if (prompt_tokens >= model.n_ctx) {
    return bad_request("the prompt has " + std::to_string(prompt_tokens) +
                           " tokens, which leaves no room to generate in the context of " +
                           std::to_string(model.n_ctx) + " tokens",
                       parsed.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt",
                       "context_length_exceeded");
  }
  const int room = model.n_ctx - prompt_tokens;
  if (parsed.max_tokens) {
    if (*parsed.max_tokens > room) {
      return bad_request("max_tokens is " + std::to_string(*parsed.max_tokens) + " but the prompt (" +
                             std::to_string(prompt_tokens) + " tokens) leaves room for " +
                             std::to_string(room) + " in the context of " + std::to_string(model.n_ctx),
                         "max_tokens", "context_length_exceeded");
    }
    out.max_tokens = *parsed.max_tokens;
  } else {
    out.max_tokens = std::min(room, kDefaultMaxTokens);
  }
  out.sampling = parsed.sampling;
  out.n = parsed.n;
  for (const auto& [token, bias] : out.sampling.logit_bias) {
    if (token >= model.n_vocab) {
      return bad_request("token id " + std::to_string(token) + " in 'logit_bias' is out of range (vocabulary size " +
                             std::to_string(model.n_vocab) + ")",
                         "logit_bias", "invalid_token");
    }
  }
  if (parsed.response_format.kind != ResponseFormat::Kind::kText) {
    if (!options.structured_outputs) {
      return bad_request("'response_format' is not supported by this server", "response_format", "unsupported_parameter");
    }
    if (auto err = options.structured_outputs->apply(parsed.response_format, out.sampling)) return err;
  }
  if (parsed.tools.choice == ToolChoice::kRequired || parsed.tools.choice == ToolChoice::kNamed) {
    if (!options.structured_outputs) {
      return bad_request("tool_choice \"required\" or a named function is not supported by this server", "tool_choice",
                         "unsupported_parameter");
    }
    if (auto err = options.structured_outputs->apply_tool_choice(parsed.tools, options.tool_format, parsed.response_format,
                                                                 out.sampling)) {
      return err;
    }
  }
  out.cache_salt = parsed.cache_salt;
  out.kv_budget = parsed.kv_budget;
  if (parsed.ignore_eos) {
    // The chat template's end-of-turn token is the chat's EOS: ignoring EOS ignores it too.
    out.stop_at_end_of_generation = false;
    out.stop_tokens.clear();
  }
  out.top_logprobs = parsed.logprobs ? parsed.top_logprobs : 0;
  return std::nullopt;
}

}  // namespace kvstash::server
