#include "server/anthropic_api.h"

#include <chrono>

#include "server/response_json.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

std::optional<MessagesError> fail(std::string message) { return MessagesError{std::move(message)}; }

// Anthropic's TTLs: "5m" (the default) and "1h".
std::optional<int> ttl_of(const json& cache_control, std::string* error) {
  if (!cache_control.is_object() || cache_control.value("type", "") != "ephemeral") {
    *error = "cache_control: only {\"type\": \"ephemeral\"} is supported";
    return std::nullopt;
  }
  const std::string ttl = cache_control.contains("ttl") && cache_control["ttl"].is_string() ? cache_control["ttl"].get<std::string>() : "5m";
  if (ttl == "5m") return 300;
  if (ttl == "1h") return 3600;
  *error = "cache_control.ttl: '" + ttl + "' (supported: '5m', '1h')";
  return std::nullopt;
}

// The text of a content given as a string or as text blocks; records a breakpoint on any block.
std::optional<MessagesError> text_of(const json& content, const std::string& where, std::string& out, bool& breakpoint, int& ttl) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return fail(where + ": must be a string or an array of content blocks");
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) return fail(at + ": a content block needs a 'type'");
    const std::string type = block["type"].get<std::string>();
    if (type != "text") return fail(at + ": content block type '" + type + "' is not supported here (supported: 'text')");
    if (!block.contains("text") || !block["text"].is_string()) return fail(at + ".text: must be a string");
    out += block["text"].get<std::string>();
    if (block.contains("cache_control")) {
      std::string error;
      const auto t = ttl_of(block["cache_control"], &error);
      if (!t) return fail(at + "." + error);
      breakpoint = true;
      ttl = std::max(ttl, *t);
    }
  }
  return std::nullopt;
}

std::string stop_reason_of(const std::string& finish_reason) {
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  return "end_turn";
}

// Anthropic's usage from the chat answer's: what the KV cache served is read, the rest of the
// pinned prefix is written now, the remainder is input (anthropic_api.h).
json usage_of(const json& usage, bool has_breakpoint) {
  const std::int64_t prompt = usage.value("prompt_tokens", std::int64_t{0});
  std::int64_t cached = 0, pinned = 0;
  if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object()) {
    cached = usage["prompt_tokens_details"].value("cached_tokens", std::int64_t{0});
    pinned = usage["prompt_tokens_details"].value("pinned_tokens", std::int64_t{0});
  }
  std::int64_t read = cached, creation = 0;
  if (has_breakpoint && pinned > 0) {
    read = std::min(cached, pinned);
    creation = pinned - read;
  }
  return json{{"input_tokens", prompt - read - creation},
              {"output_tokens", usage.value("completion_tokens", std::int64_t{0})},
              {"cache_creation_input_tokens", creation},
              {"cache_read_input_tokens", read}};
}

}  // namespace

std::string anthropic_error_body(int status, const std::string& message) {
  const char* type = status == 400   ? "invalid_request_error"
                     : status == 401 ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error"
                     : status == 503 ? "overloaded_error"
                                     : "api_error";
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}}.dump();
}

std::optional<MessagesError> translate_messages_request(const std::string& body, MessagesTranslation& out) {
  json req = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return fail("the body must be a JSON object");
  static const char* const kKnown[] = {"model", "max_tokens", "messages", "system", "stop_sequences", "temperature",
                                       "top_p", "top_k", "stream", "tools", "tool_choice", "metadata"};
  for (const auto& [key, value] : req.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) return fail("'" + key + "' is not supported (supported: model, max_tokens, messages, system, stop_sequences, temperature, top_p, top_k, stream, tools, tool_choice, metadata)");
  }
  if (!req.contains("model") || !req["model"].is_string()) return fail("model: required, a string");
  if (!req.contains("max_tokens") || !req["max_tokens"].is_number_integer()) return fail("max_tokens: required, an integer");
  if (!req.contains("messages") || !req["messages"].is_array()) return fail("messages: required, an array");
  out.model = req["model"].get<std::string>();
  json chat = json::object();
  chat["model"] = out.model;
  chat["max_tokens"] = req["max_tokens"];
  for (const char* k : {"temperature", "top_p", "top_k"}) {
    if (req.contains(k)) chat[k] = req[k];
  }
  if (req.contains("stop_sequences")) chat["stop"] = req["stop_sequences"];
  if (req.contains("stream")) {
    if (!req["stream"].is_boolean()) return fail("stream: must be a boolean");
    out.stream = req["stream"].get<bool>();
    if (out.stream) {
      chat["stream"] = true;
      chat["stream_options"] = {{"include_usage", true}};
    }
  }
  if (req.contains("metadata")) {
    const json& m = req["metadata"];
    if (!m.is_object()) return fail("metadata: must be an object");
    if (m.contains("user_id") && m["user_id"].is_string()) chat["user"] = m["user_id"];
  }

  json messages = json::array();
  json pins = json::array();
  auto add_pin = [&](int ttl) { pins.push_back({{"messages", static_cast<int>(messages.size())}, {"ttl_s", ttl}}); };
  bool tools_breakpoint = false;
  int tools_ttl = 0;
  if (req.contains("tools")) {
    if (!req["tools"].is_array()) return fail("tools: must be an array");
    json tools = json::array();
    for (std::size_t i = 0; i < req["tools"].size(); ++i) {
      const json& t = req["tools"][i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) return fail(at + ".name: required, a string");
      if (t.contains("type") && t["type"] != "custom") {
        return fail(at + ".type: server tools ('" + t["type"].dump() + "') are not supported; give custom tools with an input_schema");
      }
      if (!t.contains("input_schema") || !t["input_schema"].is_object()) return fail(at + ".input_schema: required, an object");
      json fn = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", fn}});
      if (t.contains("cache_control")) {
        std::string error;
        const auto ttl = ttl_of(t["cache_control"], &error);
        if (!ttl) return fail(at + "." + error);
        tools_breakpoint = true;
        tools_ttl = std::max(tools_ttl, *ttl);
      }
    }
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (req.contains("tool_choice")) {
    const json& c = req["tool_choice"];
    if (!c.is_object() || !c.contains("type") || !c["type"].is_string()) return fail("tool_choice: an object with a 'type'");
    const std::string type = c["type"].get<std::string>();
    if (type == "auto") {
      chat["tool_choice"] = "auto";
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "none") {
      chat["tool_choice"] = "none";
    } else if (type == "tool") {
      if (!c.contains("name") || !c["name"].is_string()) return fail("tool_choice.name: required for type 'tool'");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      return fail("tool_choice.type: '" + type + "' (supported: auto, any, tool, none)");
    }
    if (c.contains("disable_parallel_tool_use") && c["disable_parallel_tool_use"] == true) chat["parallel_tool_calls"] = false;
  }

  if (req.contains("system")) {
    std::string text;
    bool breakpoint = false;
    int ttl = 0;
    if (auto e = text_of(req["system"], "system", text, breakpoint, ttl)) return e;
    messages.push_back({{"role", "system"}, {"content", text}});
    if (breakpoint) add_pin(ttl);
  }
  // Tools render with the system prompt: their breakpoint pins through it.
  if (tools_breakpoint) add_pin(tools_ttl);

  for (std::size_t i = 0; i < req["messages"].size(); ++i) {
    const json& m = req["messages"][i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return fail(at + ".role: required");
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant") return fail(at + ".role: '" + role + "' (supported: user, assistant; the system prompt is the top-level 'system')");
    if (!m.contains("content")) return fail(at + ".content: required");
    const json& content = m["content"];
    bool breakpoint = false;
    int ttl = 0;
    if (content.is_string()) {
      messages.push_back({{"role", role}, {"content", content}});
      continue;
    }
    if (!content.is_array()) return fail(at + ".content: must be a string or an array of content blocks");
    std::string text;
    json tool_calls = json::array();
    for (std::size_t j = 0; j < content.size(); ++j) {
      const json& block = content[j];
      const std::string bat = at + ".content[" + std::to_string(j) + "]";
      if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) return fail(bat + ": a content block needs a 'type'");
      const std::string type = block["type"].get<std::string>();
      if (block.contains("cache_control")) {
        std::string error;
        const auto t = ttl_of(block["cache_control"], &error);
        if (!t) return fail(bat + "." + error);
        breakpoint = true;
        ttl = std::max(ttl, *t);
      }
      if (type == "text") {
        if (!block.contains("text") || !block["text"].is_string()) return fail(bat + ".text: must be a string");
        text += block["text"].get<std::string>();
      } else if (type == "tool_use" && role == "assistant") {
        if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") || !block["name"].is_string()) {
          return fail(bat + ": tool_use needs 'id' and 'name'");
        }
        const json input = block.contains("input") ? block["input"] : json::object();
        tool_calls.push_back({{"id", block["id"]}, {"type", "function"},
                              {"function", {{"name", block["name"]}, {"arguments", input.dump()}}}});
      } else if (type == "tool_result" && role == "user") {
        if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) return fail(bat + ".tool_use_id: required");
        std::string result;
        bool b = false;
        int t = 0;
        if (block.contains("content")) {
          if (auto e = text_of(block["content"], bat + ".content", result, b, t)) return e;
        }
        if (block.value("is_error", false)) result = "Error: " + result;
        messages.push_back({{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", result}});
      } else {
        return fail(bat + ": content block type '" + type + "' is not supported in a " + role +
                    " message (supported: text" + (role == "user" ? ", tool_result" : ", tool_use") + ")");
      }
    }
    if (!text.empty() || !tool_calls.empty() || role == "assistant") {
      json msg = {{"role", role}, {"content", text}};
      if (!tool_calls.empty()) {
        msg["tool_calls"] = tool_calls;
        if (text.empty()) msg["content"] = nullptr;
      }
      messages.push_back(msg);
    }
    if (breakpoint) add_pin(ttl);
  }
  if (messages.empty()) return fail("messages: at least one message");
  chat["messages"] = messages;
  if (!pins.empty()) {
    chat["kvstash_pins"] = pins;
    for (const json& p : pins) out.pin_messages = std::max(out.pin_messages, p["messages"].get<int>());
  }
  out.chat = std::move(chat);
  return std::nullopt;
}

json chat_to_message(const json& completion, const std::string& model, bool has_breakpoint) {
  json content = json::array();
  std::string finish = "stop";
  if (completion.contains("choices") && completion["choices"].is_array() && !completion["choices"].empty()) {
    const json& choice = completion["choices"][0];
    finish = choice.value("finish_reason", std::string("stop"));
    const json& msg = choice.contains("message") ? choice["message"] : json::object();
    if (msg.contains("content") && msg["content"].is_string() && !msg["content"].get<std::string>().empty()) {
      content.push_back({{"type", "text"}, {"text", msg["content"]}});
    }
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (const json& call : msg["tool_calls"]) {
        const json& fn = call.contains("function") ? call["function"] : json::object();
        json input = json::parse(fn.value("arguments", std::string("{}")), nullptr, false);
        if (input.is_discarded()) input = json::object();
        content.push_back({{"type", "tool_use"}, {"id", call.value("id", new_response_id("toolu_"))},
                           {"name", fn.value("name", std::string())}, {"input", input}});
      }
    }
  }
  return json{{"id", new_response_id("msg_")},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model},
              {"content", content},
              {"stop_reason", stop_reason_of(finish)},
              {"stop_sequence", nullptr},
              {"usage", usage_of(completion.value("usage", json::object()), has_breakpoint)}};
}

AnthropicExchange::AnthropicExchange(std::shared_ptr<http::Exchange> inner, std::string model, bool has_breakpoint)
    : inner_(std::move(inner)), model_(std::move(model)), has_breakpoint_(has_breakpoint) {}

void AnthropicExchange::respond(http::Response response) {
  json body = json::parse(response.body, nullptr, false);
  if (response.status != 200) {
    std::string message = "error";
    if (!body.is_discarded() && body.contains("error") && body["error"].is_object()) {
      message = body["error"].value("message", message);
    }
    response.body = anthropic_error_body(response.status, message);
  } else if (!body.is_discarded()) {
    response.body = chat_to_message(body, model_, has_breakpoint_).dump();
  }
  response.content_type = "application/json";
  inner_->respond(std::move(response));
}

void AnthropicExchange::begin_stream(http::Response head) { inner_->begin_stream(std::move(head)); }

bool AnthropicExchange::write(std::string data) {
  pending_ += data;
  for (;;) {
    const std::size_t end = pending_.find("\n\n");
    if (end == std::string::npos) return true;
    const std::string event = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    // One event is one "data: ..." line (the chat path writes no other fields).
    for (std::size_t pos = 0; pos < event.size();) {
      std::size_t eol = event.find('\n', pos);
      if (eol == std::string::npos) eol = event.size();
      const std::string line = event.substr(pos, eol - pos);
      pos = eol + 1;
      if (line.rfind("data: ", 0) == 0 && !on_chunk(line.substr(6))) return false;
    }
  }
}

void AnthropicExchange::end() {
  if (!finished_) finish_message();
  inner_->end();
}

bool AnthropicExchange::send(const char* event, const json& data) {
  return inner_->write(std::string("event: ") + event + "\ndata: " + data.dump() + "\n\n");
}

bool AnthropicExchange::close_block() {
  if (!block_open_) return true;
  block_open_ = false;
  const bool ok = send("content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_}});
  block_is_text_ = false;
  return ok;
}

bool AnthropicExchange::finish_message() {
  if (!started_ || finished_) return true;
  finished_ = true;
  if (!close_block()) return false;
  json usage = usage_of(usage_, has_breakpoint_);
  if (!send("message_delta", {{"type", "message_delta"},
                              {"delta", {{"stop_reason", stop_reason_.empty() ? "end_turn" : stop_reason_}, {"stop_sequence", nullptr}}},
                              {"usage", usage}})) {
    return false;
  }
  return send("message_stop", {{"type", "message_stop"}});
}

bool AnthropicExchange::on_chunk(const std::string& data) {
  if (data == "[DONE]") return finish_message();
  json chunk = json::parse(data, nullptr, false);
  if (chunk.is_discarded()) return true;
  if (chunk.contains("error")) {
    const std::string message = chunk["error"].is_object() ? chunk["error"].value("message", std::string("error")) : "error";
    finished_ = true;
    return send("error", json::parse(anthropic_error_body(500, message)));
  }
  if (!started_) {
    started_ = true;
    json message = {{"id", new_response_id("msg_")}, {"type", "message"}, {"role", "assistant"}, {"model", model_},
                    {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                    {"usage", {{"input_tokens", 0}, {"output_tokens", 0}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}}}};
    if (!send("message_start", {{"type", "message_start"}, {"message", message}})) return false;
    if (!send("ping", {{"type", "ping"}})) return false;
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
  if (!chunk.contains("choices") || !chunk["choices"].is_array()) return true;
  for (const json& choice : chunk["choices"]) {
    const json& delta = choice.contains("delta") ? choice["delta"] : json::object();
    if (delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty()) {
      if (!block_is_text_) {
        if (!close_block()) return false;
        ++block_index_;
        block_open_ = true;
        block_is_text_ = true;
        if (!send("content_block_start", {{"type", "content_block_start"}, {"index", block_index_},
                                          {"content_block", {{"type", "text"}, {"text", ""}}}})) {
          return false;
        }
      }
      if (!send("content_block_delta", {{"type", "content_block_delta"}, {"index", block_index_},
                                        {"delta", {{"type", "text_delta"}, {"text", delta["content"]}}}})) {
        return false;
      }
    }
    if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
      for (const json& call : delta["tool_calls"]) {
        const json& fn = call.contains("function") ? call["function"] : json::object();
        if (call.contains("id") || fn.contains("name")) {  // a new call begins
          if (!close_block()) return false;
          ++block_index_;
          block_open_ = true;
          if (!send("content_block_start",
                    {{"type", "content_block_start"}, {"index", block_index_},
                     {"content_block", {{"type", "tool_use"}, {"id", call.value("id", new_response_id("toolu_"))},
                                        {"name", fn.value("name", std::string())}, {"input", json::object()}}}})) {
            return false;
          }
        }
        if (fn.contains("arguments") && fn["arguments"].is_string() && !fn["arguments"].get<std::string>().empty()) {
          if (!send("content_block_delta", {{"type", "content_block_delta"}, {"index", block_index_},
                                            {"delta", {{"type", "input_json_delta"}, {"partial_json", fn["arguments"]}}}})) {
            return false;
          }
        }
      }
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      stop_reason_ = stop_reason_of(choice["finish_reason"].get<std::string>());
    }
  }
  return true;
}

}  // namespace kvstash::server
