#include "server/responses_api.h"

#include <algorithm>
#include <cctype>

#include "server/response_json.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

std::optional<ResponsesError> fail(std::string message, std::string param = "", int status = 400) {
  return ResponsesError{status, std::move(message), std::move(param)};
}

// The text of a message item's content: a string, or input_text / output_text parts.
std::optional<ResponsesError> content_text(const json& content, const std::string& where, std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return fail(where + ": must be a string or an array of content parts", where);
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string type = part.is_object() ? part.value("type", std::string()) : std::string();
    if (type != "input_text" && type != "output_text" && type != "text") {
      return fail(where + "[" + std::to_string(i) + "]: content part type '" + type +
                      "' is not supported (supported: input_text, output_text)",
                  where);
    }
    if (!part.contains("text") || !part["text"].is_string()) return fail(where + "[" + std::to_string(i) + "].text: must be a string", where);
    out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

void ResponseStore::expire_locked(std::chrono::steady_clock::time_point now) {
  while (!order_.empty()) {
    auto it = entries_.find(order_.front());
    if (it != entries_.end() && it->second.expires > now && entries_.size() <= max_entries_) break;
    if (it != entries_.end()) entries_.erase(it);
    order_.pop_front();
  }
}

void ResponseStore::put(const std::string& id, StoredResponse entry) {
  std::lock_guard lock(mu_);
  entry.expires = std::chrono::steady_clock::now() + ttl_;
  entries_[id] = std::move(entry);
  order_.push_back(id);
  expire_locked(std::chrono::steady_clock::now());
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  expire_locked(std::chrono::steady_clock::now());
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.tenant != tenant) return std::nullopt;
  return it->second;
}

std::string ResponseStore::new_id() const { return new_response_id("resp_" + node_tag_); }

namespace {
constexpr std::size_t kTagDigits = 8, kRandomDigits = 24;  // new_response_id makes 24
bool all_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
}  // namespace

std::string response_owner_tag(std::string_view id) {
  constexpr std::string_view kPrefix = "resp_";
  if (id.size() != kPrefix.size() + kTagDigits + kRandomDigits || id.substr(0, kPrefix.size()) != kPrefix) return "";
  const std::string_view digits = id.substr(kPrefix.size());
  return all_hex(digits) ? std::string(digits.substr(0, kTagDigits)) : "";
}

std::string response_node_tag(std::string_view public_key_hex) {
  if (public_key_hex.size() < kTagDigits) return "";
  std::string tag(public_key_hex.substr(0, kTagDigits));
  std::transform(tag.begin(), tag.end(), tag.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return all_hex(tag) ? tag : "";
}

bool ResponseStore::erase(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.tenant != tenant) return false;
  entries_.erase(it);  // its id stays in order_ until it reaches the front (skipped there)
  return true;
}

std::size_t ResponseStore::size() {
  std::lock_guard lock(mu_);
  expire_locked(std::chrono::steady_clock::now());
  return entries_.size();
}

std::optional<ResponsesError> translate_responses_request(const std::string& body, ResponseStore& store,
                                                          const std::string& tenant, ResponsesTranslation& out) {
  const json req = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return fail("the body must be a JSON object");
  // What the Responses API has and this server does not run: refused by name.
  for (const char* name : {"background", "conversation", "reasoning", "include", "prompt", "max_tool_calls",
                           "context_management", "prompt_cache_options"}) {
    if (!req.contains(name)) continue;
    const json& v = req[name];
    const bool off = v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_array() || v.is_object()) && v.empty());
    if (!off) return fail(std::string("'") + name + "' is not supported by this server", name);
  }
  // Every other field is one this translation reads, or one whose only values here change nothing;
  // a field it does not know is refused by name, never dropped.
  static const char* const kKnown[] = {
      "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "parallel_tool_calls",
      "prompt_cache_key", "prompt_cache_retention", "user", "safety_identifier", "seed", "ignore_eos", "stream",
      "stream_options", "store", "previous_response_id", "tools", "tool_choice", "text", "metadata", "service_tier",
      "truncation", "top_logprobs", "background", "conversation", "reasoning", "include", "prompt", "max_tool_calls",
      "context_management", "prompt_cache_options"};
  for (const auto& [key, value] : req.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) return fail("'" + key + "' is not supported by this server", key);
  }
  if (req.contains("truncation") && !req["truncation"].is_null() && req["truncation"] != "disabled") {
    return fail("'truncation': only \"disabled\" is supported (a conversation longer than the context is an error, never cut)",
                "truncation");
  }
  if (req.contains("service_tier") && !req["service_tier"].is_null() && req["service_tier"] != "auto" &&
      req["service_tier"] != "default") {
    return fail("'service_tier': only \"auto\" and \"default\" are supported", "service_tier");
  }
  if (req.contains("top_logprobs") && !req["top_logprobs"].is_null() && req["top_logprobs"] != 0) {
    return fail("'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions with logprobs)", "top_logprobs");
  }
  if (req.contains("text") && !req["text"].is_null()) {
    if (!req["text"].is_object()) return fail("'text' must be an object", "text");
    for (const auto& [key, value] : req["text"].items()) {
      if (key == "format") continue;
      if (key == "verbosity" && (value.is_null() || value == "medium")) continue;
      return fail("text." + key + (key == "verbosity" ? ": only \"medium\" is supported" : ": not supported by this server"), "text");
    }
  }
  if (!req.contains("model") || !req["model"].is_string()) return fail("'model' is required (a string)", "model");
  out.model = req["model"].get<std::string>();
  json chat = {{"model", out.model}};
  if (req.contains("max_output_tokens") && !req["max_output_tokens"].is_null()) chat["max_tokens"] = req["max_output_tokens"];
  for (const char* k : {"temperature", "top_p", "parallel_tool_calls", "prompt_cache_key", "prompt_cache_retention", "user",
                        "seed", "ignore_eos"}) {
    if (req.contains(k) && !req[k].is_null()) chat[k] = req[k];
  }
  if (req.contains("stream") && req["stream"].is_boolean() && req["stream"].get<bool>()) {
    out.stream = true;
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};
  }
  if (req.contains("store") && req["store"].is_boolean()) out.store = req["store"].get<bool>();

  json messages = json::array();
  if (req.contains("previous_response_id") && !req["previous_response_id"].is_null()) {
    if (!req["previous_response_id"].is_string()) return fail("'previous_response_id' must be a string", "previous_response_id");
    out.previous_response_id = req["previous_response_id"].get<std::string>();
    std::optional<StoredResponse> previous = store.get(out.previous_response_id, tenant);
    if (!previous) {
      return fail("previous response '" + out.previous_response_id + "' not found (unknown, expired, deleted or not stored)",
                  "previous_response_id", 404);
    }
    messages = previous->messages;
  }
  if (!req.contains("input")) return fail("'input' is required", "input");
  const json& input = req["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (std::size_t i = 0; i < input.size(); ++i) {
      const json& item = input[i];
      const std::string at = "input[" + std::to_string(i) + "]";
      if (!item.is_object()) return fail(at + ": must be an object", "input");
      const std::string type = item.value("type", std::string("message"));
      if (type == "message") {
        const std::string role = item.value("role", std::string());
        if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
          return fail(at + ".role: '" + role + "' (supported: user, assistant, system, developer)", "input");
        }
        std::string text;
        if (!item.contains("content")) return fail(at + ".content: required", "input");
        if (auto e = content_text(item["content"], at + ".content", text)) return e;
        messages.push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
      } else if (type == "function_call") {
        if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("name") || !item["name"].is_string()) {
          return fail(at + ": a function_call needs 'call_id' and 'name'", "input");
        }
        json call = {{"id", item["call_id"]}, {"type", "function"},
                     {"function", {{"name", item["name"]}, {"arguments", item.value("arguments", std::string("{}"))}}}};
        // Consecutive calls are one assistant turn.
        if (!messages.empty() && messages.back()["role"] == "assistant" && messages.back().contains("tool_calls")) {
          messages.back()["tool_calls"].push_back(call);
        } else {
          messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
        }
      } else if (type == "function_call_output") {
        if (!item.contains("call_id") || !item["call_id"].is_string()) return fail(at + ".call_id: required", "input");
        std::string output;
        if (item.contains("output")) {
          if (auto e = content_text(item["output"], at + ".output", output)) return e;
        }
        messages.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output}});
      } else {
        return fail(at + ".type: '" + type + "' is not supported (supported: message, function_call, function_call_output)", "input");
      }
    }
  } else {
    return fail("'input' must be a string or an array of items", "input");
  }
  if (messages.empty()) return fail("'input' holds no message", "input");
  out.messages = messages;
  json all = json::array();
  if (req.contains("instructions") && req["instructions"].is_string()) {
    all.push_back({{"role", "system"}, {"content", req["instructions"]}});
    out.echo["instructions"] = req["instructions"];
  }
  for (const json& m : messages) all.push_back(m);
  chat["messages"] = all;

  if (req.contains("tools") && req["tools"].is_array() && !req["tools"].empty()) {
    json tools = json::array();
    for (std::size_t i = 0; i < req["tools"].size(); ++i) {
      const json& t = req["tools"][i];
      const std::string type = t.is_object() ? t.value("type", std::string()) : std::string();
      if (type != "function") {
        return fail("tools[" + std::to_string(i) + "].type: '" + type + "' is not supported (supported: function)", "tools");
      }
      json fn = {{"name", t.value("name", std::string())}, {"parameters", t.value("parameters", json::object())}};
      if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
      if (t.contains("strict") && t["strict"].is_boolean()) fn["strict"] = t["strict"];
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    chat["tools"] = tools;
    out.echo["tools"] = req["tools"];
  }
  if (req.contains("tool_choice") && !req["tool_choice"].is_null()) {
    const json& c = req["tool_choice"];
    if (c.is_string()) {
      chat["tool_choice"] = c;
    } else if (c.is_object() && c.value("type", std::string()) == "function" && c.contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      return fail("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}", "tool_choice");
    }
    out.echo["tool_choice"] = c;
  }
  if (req.contains("text") && req["text"].is_object() && req["text"].contains("format")) {
    const json& f = req["text"]["format"];
    const std::string type = f.is_object() ? f.value("type", std::string()) : std::string();
    if (type == "json_schema") {
      json schema = {{"name", f.value("name", std::string("response"))}, {"schema", f.value("schema", json::object())}};
      if (f.contains("strict")) schema["strict"] = f["strict"];
      chat["response_format"] = {{"type", "json_schema"}, {"json_schema", schema}};
    } else if (type == "json_object") {
      chat["response_format"] = {{"type", "json_object"}};
    } else if (type != "text") {
      return fail("text.format.type: '" + type + "' (supported: text, json_schema, json_object)", "text");
    }
    out.echo["text"] = req["text"];
  }
  // A stored response keeps its prompt's KV as long as its conversation (docs/prompt-caching.md), unless
  // the client asked for a retention of its own (which the chat path validates and bounds).
  if (out.store && !chat.contains("prompt_cache_retention")) {
    chat["prompt_cache_retention"] = std::to_string(store.ttl().count()) + "s";
  }
  for (const char* k : {"temperature", "top_p", "max_output_tokens", "metadata"}) {
    if (req.contains(k)) out.echo[k] = req[k];
  }
  out.chat = std::move(chat);
  return std::nullopt;
}

ResponsesExchange::ResponsesExchange(std::shared_ptr<http::Exchange> inner, ResponsesTranslation translation,
                                     ResponseStore* store, std::string tenant)
    : inner_(std::move(inner)),
      t_(std::move(translation)),
      store_(store),
      tenant_(std::move(tenant)),
      id_(store_ ? store_->new_id() : new_response_id("resp_")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

json ResponsesExchange::response_object(const std::string& status) {
  json output = json::array();
  if (!text_.empty() || message_index_ >= 0) {
    output.push_back({{"type", "message"}, {"id", message_id_.empty() ? new_response_id("msg_") : message_id_}, {"status", "completed"},
                      {"role", "assistant"},
                      {"content", json::array({{{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}}})}});
  }
  for (const json& call : calls_) output.push_back(call);
  const std::int64_t input = usage_.value("prompt_tokens", std::int64_t{0});
  const std::int64_t completion = usage_.value("completion_tokens", std::int64_t{0});
  std::int64_t cached = 0;
  if (usage_.contains("prompt_tokens_details") && usage_["prompt_tokens_details"].is_object()) {
    cached = usage_["prompt_tokens_details"].value("cached_tokens", std::int64_t{0});
  }
  json r = {{"id", id_},
            {"object", "response"},
            {"created_at", created_},
            {"status", status},
            {"model", t_.model},
            {"output", output},
            {"previous_response_id", t_.previous_response_id.empty() ? json(nullptr) : json(t_.previous_response_id)},
            {"store", t_.store},
            {"error", nullptr},
            {"incomplete_details", finish_reason_ == "length" ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
            {"usage", {{"input_tokens", input},
                       {"input_tokens_details", {{"cached_tokens", cached}}},
                       {"output_tokens", completion},
                       {"output_tokens_details", {{"reasoning_tokens", 0}}},
                       {"total_tokens", input + completion}}}};
  for (const char* k : {"instructions", "tools", "tool_choice", "text", "temperature", "top_p", "max_output_tokens", "metadata"}) {
    r[k] = t_.echo.contains(k) ? t_.echo[k] : json(nullptr);
  }
  if (r["tools"].is_null()) r["tools"] = json::array();
  if (r["tool_choice"].is_null()) r["tool_choice"] = "auto";
  if (r["metadata"].is_null()) r["metadata"] = json::object();
  r["parallel_tool_calls"] = true;
  return r;
}

void ResponsesExchange::remember(const json& response) {
  if (!t_.store || !store_) return;
  json messages = t_.messages;
  json answer = {{"role", "assistant"}, {"content", text_}};
  if (!calls_.empty()) {
    json tool_calls = json::array();
    for (const json& c : calls_) {
      tool_calls.push_back({{"id", c["call_id"]}, {"type", "function"}, {"function", {{"name", c["name"]}, {"arguments", c["arguments"]}}}});
    }
    answer["tool_calls"] = tool_calls;
    if (text_.empty()) answer["content"] = nullptr;
  }
  messages.push_back(answer);
  store_->put(id_, StoredResponse{tenant_, std::move(messages), response, {}});
}

void ResponsesExchange::respond(http::Response response) {
  json body = json::parse(response.body, nullptr, false);
  if (response.status == 200 && !body.is_discarded() && body.contains("choices") && !body["choices"].empty()) {
    const json& choice = body["choices"][0];
    finish_reason_ = choice.value("finish_reason", std::string("stop"));
    const json& msg = choice.contains("message") ? choice["message"] : json::object();
    if (msg.contains("content") && msg["content"].is_string()) text_ = msg["content"].get<std::string>();
    if (!text_.empty()) message_index_ = 0;
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (const json& c : msg["tool_calls"]) {
        const json& fn = c.contains("function") ? c["function"] : json::object();
        calls_.push_back({{"type", "function_call"}, {"id", new_response_id("fc_")}, {"call_id", c.value("id", new_response_id("call_"))},
                          {"name", fn.value("name", std::string())}, {"arguments", fn.value("arguments", std::string("{}"))},
                          {"status", "completed"}});
      }
    }
    usage_ = body.value("usage", json::object());
    const json r = response_object(finish_reason_ == "length" ? "incomplete" : "completed");
    remember(r);
    response.body = r.dump();
  }
  inner_->respond(std::move(response));
}

bool ResponsesExchange::send(const json& event) {
  json e = event;
  e["sequence_number"] = sequence_++;
  return inner_->write("event: " + e["type"].get<std::string>() + "\ndata: " + e.dump() + "\n\n");
}

bool ResponsesExchange::close_message() {
  if (!message_open_) return true;
  message_open_ = false;
  const json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
  return send({{"type", "response.output_text.done"}, {"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0}, {"text", text_}}) &&
         send({{"type", "response.content_part.done"}, {"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0}, {"part", part}}) &&
         send({{"type", "response.output_item.done"}, {"output_index", message_index_},
               {"item", {{"type", "message"}, {"id", message_id_}, {"status", "completed"}, {"role", "assistant"}, {"content", json::array({part})}}}});
}

bool ResponsesExchange::close_call() {
  if (!call_open_) return true;
  call_open_ = false;
  json& call = calls_.back();
  call["status"] = "completed";
  const int index = (message_index_ >= 0 ? 1 : 0) + static_cast<int>(calls_.size()) - 1;
  return send({{"type", "response.function_call_arguments.done"}, {"item_id", call["id"]}, {"output_index", index}, {"arguments", call["arguments"]}}) &&
         send({{"type", "response.output_item.done"}, {"output_index", index}, {"item", call}});
}

bool ResponsesExchange::write(std::string data) {
  pending_ += data;
  for (;;) {
    const std::size_t end = pending_.find("\n\n");
    if (end == std::string::npos) return true;
    const std::string event = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    if (event.rfind("data: ", 0) == 0 && !on_chunk(event.substr(6))) return false;
  }
}

void ResponsesExchange::end() {
  if (started_ && !finished_) on_chunk("[DONE]");
  inner_->end();
}

bool ResponsesExchange::on_chunk(const std::string& data) {
  if (finished_) return true;
  if (data == "[DONE]") {
    finished_ = true;
    if (!close_message() || !close_call()) return false;
    const json r = response_object(finish_reason_ == "length" ? "incomplete" : "completed");
    remember(r);
    return send({{"type", finish_reason_ == "length" ? "response.incomplete" : "response.completed"}, {"response", r}});
  }
  const json chunk = json::parse(data, nullptr, false);
  if (chunk.is_discarded()) return true;
  if (chunk.contains("error")) {
    finished_ = true;
    const std::string message = chunk["error"].is_object() ? chunk["error"].value("message", std::string("error")) : "error";
    return send({{"type", "error"}, {"code", nullptr}, {"message", message}, {"param", nullptr}});
  }
  if (!started_) {
    started_ = true;
    const json r = response_object("in_progress");
    if (!send({{"type", "response.created"}, {"response", r}}) || !send({{"type", "response.in_progress"}, {"response", r}})) return false;
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
  if (!chunk.contains("choices") || !chunk["choices"].is_array()) return true;
  for (const json& choice : chunk["choices"]) {
    const json& delta = choice.contains("delta") ? choice["delta"] : json::object();
    if (delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty()) {
      if (message_index_ < 0) {
        message_index_ = static_cast<int>(calls_.size());
        message_id_ = new_response_id("msg_");
        message_open_ = true;
        if (!send({{"type", "response.output_item.added"}, {"output_index", message_index_},
                   {"item", {{"type", "message"}, {"id", message_id_}, {"status", "in_progress"}, {"role", "assistant"}, {"content", json::array()}}}}) ||
            !send({{"type", "response.content_part.added"}, {"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}})) {
          return false;
        }
      }
      const std::string piece = delta["content"].get<std::string>();
      text_ += piece;
      if (!send({{"type", "response.output_text.delta"}, {"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0}, {"delta", piece}})) {
        return false;
      }
    }
    if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
      for (const json& c : delta["tool_calls"]) {
        const json& fn = c.contains("function") ? c["function"] : json::object();
        if (c.contains("id") || fn.contains("name")) {  // a new call
          if (!close_message() || !close_call()) return false;
          calls_.push_back({{"type", "function_call"}, {"id", new_response_id("fc_")}, {"call_id", c.value("id", new_response_id("call_"))},
                            {"name", fn.value("name", std::string())}, {"arguments", ""}, {"status", "in_progress"}});
          call_open_ = true;
          const int index = (message_index_ >= 0 ? 1 : 0) + static_cast<int>(calls_.size()) - 1;
          if (!send({{"type", "response.output_item.added"}, {"output_index", index}, {"item", calls_.back()}})) return false;
        }
        if (call_open_ && fn.contains("arguments") && fn["arguments"].is_string() && !fn["arguments"].get<std::string>().empty()) {
          const std::string piece = fn["arguments"].get<std::string>();
          calls_.back()["arguments"] = calls_.back()["arguments"].get<std::string>() + piece;
          const int index = (message_index_ >= 0 ? 1 : 0) + static_cast<int>(calls_.size()) - 1;
          if (!send({{"type", "response.function_call_arguments.delta"}, {"item_id", calls_.back()["id"]}, {"output_index", index}, {"delta", piece}})) {
            return false;
          }
        }
      }
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) finish_reason_ = choice["finish_reason"].get<std::string>();
  }
  return true;
}

}  // namespace kvstash::server
