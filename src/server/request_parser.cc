#include "server/request_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <random>

namespace kvstash::server {
namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

ApiError wrong_type(const std::string& param, const char* expected, const json& v) {
  return bad_request("'" + param + "' must be " + expected + ", got " + type_name(v), param,
                     "invalid_type");
}

// The field's value, or nullptr when absent or null (OpenAI treats null as "not given").
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> get_int(const json& obj, const char* name, std::optional<std::int64_t>& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return wrong_type(name, "an integer", *v);
  out = v->is_number_unsigned() && v->get<std::uint64_t>() > INT64_MAX
            ? INT64_MAX
            : v->get<std::int64_t>();
  return std::nullopt;
}

std::optional<ApiError> get_number(const json& obj, const char* name, std::optional<double>& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return wrong_type(name, "a number", *v);
  out = v->get<double>();
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& obj, const char* name, bool& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(name, "a boolean", *v);
  out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> get_string(const json& obj, const char* name, std::string& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) return wrong_type(name, "a string", *v);
  out = v->get<std::string>();
  return std::nullopt;
}

// A seed for a request that names none, so that two such sampled requests differ (OpenAI's
// behaviour). One generator seeded once from the OS; the mutex makes it safe from any thread.
std::uint64_t fresh_seed() {
  static std::mutex mutex;
  static std::mt19937_64 generator{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mutex);
  return generator();
}

bool known_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" ||
         role == "developer";
}

std::optional<ApiError> parse_content(const json& content, const std::string& param,
                                      std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return wrong_type(param, "a string or an array of content parts", content);
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return wrong_type(p, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "text") {
      return bad_request("'" + p + ".type' must be \"text\" (only text content is supported)",
                         p + ".type", "unsupported_content");
    }
    const json* text = field(part, "text");
    if (!text || !text->is_string()) {
      return bad_request("'" + p + ".text' must be a string", p + ".text", "invalid_type");
    }
    out += text->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& body, ParsedRequest& out) {
  const json* messages = field(body, "messages");
  if (!messages) return bad_request("'messages' is required", "messages", "missing_field");
  if (!messages->is_array()) return wrong_type("messages", "an array", *messages);
  if (messages->empty()) return bad_request("'messages' must not be empty", "messages", "empty_messages");
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(p, "an object", m);
    const json* role = field(m, "role");
    if (!role) return bad_request("'" + p + ".role' is required", p + ".role", "missing_field");
    if (!role->is_string()) return wrong_type(p + ".role", "a string", *role);
    ChatMessage message;
    message.role = role->get<std::string>();
    if (!known_role(message.role)) {
      return bad_request("unknown role '" + message.role + "' in '" + p +
                             ".role' (expected system, user, assistant, tool or developer)",
                         p + ".role", "invalid_role");
    }
    if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
    const json* content = field(m, "content");
    if (!content) {
      // An assistant turn that only made tool calls has null content; any other needs content.
      if (message.role != "assistant") {
        return bad_request("'" + p + ".content' is required", p + ".content", "missing_field");
      }
    } else if (auto err = parse_content(*content, p + ".content", message.content)) {
      return err;
    }
    // Tool fields (tool_request.h): tool_calls, tool_call_id, name.
    if (auto err = parse_message_tool_fields(m, p, message.role, message.tool_calls, message.tool_call_id,
                                             message.name)) {
      return err;
    }
    out.messages.push_back(std::move(message));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& body, ParsedRequest& out) {
  const json* prompt = field(body, "prompt");
  if (!prompt) return bad_request("'prompt' is required", "prompt", "missing_field");
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
    if (out.prompt_text.empty()) return bad_request("'prompt' must not be empty", "prompt", "empty_prompt");
    return std::nullopt;
  }
  if (!prompt->is_array()) return wrong_type("prompt", "a string or an array of token ids", *prompt);
  if (prompt->empty()) return bad_request("'prompt' must not be empty", "prompt", "empty_prompt");
  for (std::size_t i = 0; i < prompt->size(); ++i) {
    const json& t = (*prompt)[i];
    if (t.is_string() || t.is_array()) {
      return bad_request("batched prompts (an array of strings or of token arrays) are not supported; "
                         "send one prompt per request",
                         "prompt", "unsupported_batch");
    }
    if (!t.is_number_integer()) {
      return wrong_type("prompt[" + std::to_string(i) + "]", "an integer token id", t);
    }
    std::int64_t id = t.is_number_unsigned() && t.get<std::uint64_t>() > INT64_MAX ? INT64_MAX
                                                                                   : t.get<std::int64_t>();
    if (id < 0 || id > INT32_MAX) {
      return bad_request("token id " + std::to_string(id) + " in 'prompt[" + std::to_string(i) +
                             "]' is out of range",
                         "prompt", "invalid_token");
    }
    out.prompt_tokens.push_back(static_cast<TokenId>(id));
  }
  out.prompt_is_tokens = true;
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& body, ParsedRequest& out) {
  const json* stop = field(body, "stop");
  if (!stop) return std::nullopt;
  if (stop->is_string()) {
    out.stop.push_back(stop->get<std::string>());
    return std::nullopt;
  }
  if (!stop->is_array()) return wrong_type("stop", "a string or an array of strings", *stop);
  if (stop->size() > kMaxStopStrings) {
    return bad_request("'stop' may hold at most 4 strings", "stop", "too_many_stop_strings");
  }
  for (std::size_t i = 0; i < stop->size(); ++i) {
    if (!(*stop)[i].is_string()) return wrong_type("stop[" + std::to_string(i) + "]", "a string", (*stop)[i]);
    out.stop.push_back((*stop)[i].get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json& body, ParsedRequest& out) {
  std::optional<double> temperature, top_p;
  std::optional<std::int64_t> top_k, seed, n, max_tokens, max_completion_tokens;
  for (auto err : {get_number(body, "temperature", temperature), get_number(body, "top_p", top_p),
                   get_int(body, "top_k", top_k), get_int(body, "seed", seed), get_int(body, "n", n),
                   get_int(body, "max_tokens", max_tokens),
                   get_int(body, "max_completion_tokens", max_completion_tokens)}) {
    if (err) return err;
  }
  out.sampling.temperature = kDefaultTemperature;
  if (temperature) {
    if (*temperature < 0.0 || *temperature > 2.0) {
      return bad_request("'temperature' must be between 0 and 2", "temperature", "out_of_range");
    }
    out.sampling.temperature = static_cast<float>(*temperature);
  }
  if (top_p) {
    if (!(*top_p > 0.0 && *top_p <= 1.0)) {
      return bad_request("'top_p' must be greater than 0 and at most 1", "top_p", "out_of_range");
    }
    out.sampling.top_p = static_cast<float>(*top_p);
  }
  if (top_k) {
    if (*top_k < 0 || *top_k > INT32_MAX) return bad_request("'top_k' must be >= 0", "top_k", "out_of_range");
    out.sampling.top_k = static_cast<int>(*top_k);
  }
  out.sampling.seed = seed ? static_cast<std::uint64_t>(*seed) : fresh_seed();
  out.seed_given = seed.has_value();
  if (n) {
    if (*n < 1 || *n > INT32_MAX) return bad_request("'n' must be at least 1", "n", "out_of_range");
    out.n = static_cast<int>(*n);
  }
  const char* max_name = max_completion_tokens ? "max_completion_tokens" : "max_tokens";
  std::optional<std::int64_t> max = max_completion_tokens ? max_completion_tokens : max_tokens;
  if (max) {
    if (*max < 1) return bad_request(std::string("'") + max_name + "' must be >= 1", max_name, "out_of_range");
    out.max_tokens = static_cast<int>(std::min<std::int64_t>(*max, INT32_MAX));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_logprobs(const json& body, ParsedRequest& out) {
  const json* logprobs = field(body, "logprobs");
  if (out.endpoint == Endpoint::kChatCompletions) {
    if (auto err = get_bool(body, "logprobs", out.logprobs)) return err;
    std::optional<std::int64_t> top;
    if (auto err = get_int(body, "top_logprobs", top)) return err;
    if (top) {
      if (*top < 0 || *top > kMaxTopLogprobs) {
        return bad_request("'top_logprobs' must be between 0 and 20", "top_logprobs", "out_of_range");
      }
      if (!out.logprobs) {
        return bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs", "invalid_value");
      }
      out.top_logprobs = static_cast<int>(*top);
    }
    return std::nullopt;
  }
  // Completions: logprobs is the number of alternatives (0 = only the chosen token's).
  if (!logprobs) return std::nullopt;
  if (!logprobs->is_number_integer()) return wrong_type("logprobs", "an integer", *logprobs);
  std::int64_t k = logprobs->get<std::int64_t>();
  if (k < 0 || k > kMaxTopLogprobs) {
    return bad_request("'logprobs' must be between 0 and 20", "logprobs", "out_of_range");
  }
  out.logprobs = true;
  out.top_logprobs = static_cast<int>(k);
  return std::nullopt;
}

// Fields of OpenAI's request that this server does not implement. A request that sets one gets
// a 400 naming it rather than an answer that silently ignores it. A value that means "off"
// (null, 0, false, {}, [], "none"/"auto" with no tools for tool_choice) changes nothing and is
// accepted.
std::optional<ApiError> reject_unsupported(const json& body, Endpoint endpoint) {
  static const char* kFields[] = {"tools", "tool_choice", "functions", "function_call", "best_of", "echo", "suffix",
                                  "parallel_tool_calls", "audio", "modalities", "prediction", "reasoning_effort",
                                  "web_search_options"};
  for (const char* name : kFields) {
    // Chat implements tool calling (tool_request.h); completions have no tools in OpenAI's API.
    const std::string_view n(name);
    if (endpoint == Endpoint::kChatCompletions && (n == "tools" || n == "tool_choice" || n == "parallel_tool_calls")) {
      continue;
    }
    const json* v = field(body, name);
    if (!v) continue;
    const bool off = (v->is_number() && v->get<double>() == 0.0) || (v->is_boolean() && !v->get<bool>()) ||
                     ((v->is_object() || v->is_array()) && v->empty()) ||
                     (v->is_string() && (*v == "none" || *v == "auto") && std::string(name) == "tool_choice");
    if (off) continue;
    return bad_request(std::string("'") + name + "' is not supported by this server", name, "unsupported_parameter");
  }
  return std::nullopt;
}

// ---- Sampling knobs (issue 33): logit_bias, penalties, min_p, typical_p -------------------------
// Ranges are OpenAI's where OpenAI has the field, llama-server's otherwise. llama-server's and
// vLLM's sampling fields that this server does not implement are refused by name (400
// unsupported_parameter) unless their value means "off"; fields no server defines (foo_bar) are
// ignored, as llama-server and vLLM ignore them, so that SDKs' newer fields (user, metadata,
// store, ...) never break a request.

std::optional<ApiError> reject_unimplemented_samplers(const json& body) {
  // What "off" is for each: llama-server's defaults.
  static const std::pair<const char*, double> kFields[] = {
      {"mirostat", 0},          {"mirostat_tau", 5.0},     {"mirostat_eta", 0.1}, {"dry_multiplier", 0},
      {"dry_base", 1.75},       {"dry_allowed_length", 2}, {"dry_penalty_last_n", -1}, {"xtc_probability", 0},
      {"xtc_threshold", 0.1},   {"tfs_z", 1.0},        {"dynatemp_range", 0},
      {"dynatemp_exponent", 1}, {"min_keep", 0},           {"n_probs", 0}};
  for (const auto& [name, off] : kFields) {
    const json* v = field(body, name);
    if (!v || (v->is_number() && v->get<double>() == off)) continue;
    return bad_request(std::string("'") + name + "' is not supported by this server", name, "unsupported_parameter");
  }
  for (const char* name : {"dry_sequence_breakers", "samplers"}) {
    const json* v = field(body, name);
    if (!v || ((v->is_array() || v->is_object() || v->is_string()) && v->empty())) continue;
    return bad_request(std::string("'") + name + "' is not supported by this server", name, "unsupported_parameter");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_range(const json& body, const char* name, double lo, double hi, bool lo_open, float& out) {
  std::optional<double> v;
  if (auto err = get_number(body, name, v)) return err;
  if (!v) return std::nullopt;
  if (*v > hi || *v < lo || (lo_open && *v == lo)) {
    char range[96];
    std::snprintf(range, sizeof range, lo_open ? "greater than %g and at most %g" : "between %g and %g", lo, hi);
    return bad_request(std::string("'") + name + "' must be " + range, name, "out_of_range");
  }
  out = static_cast<float>(*v);
  return std::nullopt;
}

// OpenAI's form {"<token id>": bias}; llama-server's [[id, bias], ...] with false for a ban too.
std::optional<ApiError> parse_logit_bias(const json& body, SamplingParams& s) {
  const json* v = field(body, "logit_bias");
  if (!v) return std::nullopt;
  auto add = [&s](const std::string& param, std::int64_t id, const json& bias) -> std::optional<ApiError> {
    if (id < 0 || id > INT32_MAX) return bad_request("token id " + std::to_string(id) + " in '" + param + "' is out of range", param, "invalid_token");
    double b = 0;
    if (bias.is_boolean() && !bias.get<bool>()) {
      b = -100.0;  // llama-server: false bans the token
    } else if (bias.is_number()) {
      b = bias.get<double>();
    } else {
      return wrong_type(param, "a number between -100 and 100", bias);
    }
    if (!(b >= -100.0 && b <= 100.0)) return bad_request("'" + param + "' must be between -100 and 100", param, "out_of_range");
    s.logit_bias.emplace_back(static_cast<TokenId>(id), static_cast<float>(b));
    return std::nullopt;
  };
  if (v->is_object()) {
    for (const auto& [key, bias] : v->items()) {
      const std::string param = "logit_bias." + key;
      std::size_t used = 0;
      std::int64_t id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || key.empty()) {
        return bad_request("'logit_bias' keys must be token ids, got \"" + key + "\"", "logit_bias", "invalid_token");
      }
      if (auto err = add(param, id, bias)) return err;
    }
  } else if (v->is_array()) {
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& pair = (*v)[i];
      const std::string param = "logit_bias[" + std::to_string(i) + "]";
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer()) {
        return wrong_type(param, "a [token id, bias] pair", pair);
      }
      if (auto err = add(param, pair[0].get<std::int64_t>(), pair[1])) return err;
    }
  } else {
    return wrong_type("logit_bias", "an object of token id to bias", *v);
  }
  if (s.logit_bias.size() > kMaxLogitBias) {
    return bad_request("'logit_bias' may hold at most " + std::to_string(kMaxLogitBias) + " tokens", "logit_bias", "out_of_range");
  }
  // Sorted and unique (the last bias given for a token wins), so equal requests hash equally.
  std::stable_sort(s.logit_bias.begin(), s.logit_bias.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<TokenId, float>> unique;
  for (const auto& e : s.logit_bias) {
    if (!unique.empty() && unique.back().first == e.first) {
      unique.back() = e;
    } else {
      unique.push_back(e);
    }
  }
  s.logit_bias = std::move(unique);
  return std::nullopt;
}

std::optional<ApiError> parse_sampling_knobs(const json& body, ParsedRequest& out) {
  if (auto err = reject_unimplemented_samplers(body)) return err;
  SamplingParams& s = out.sampling;
  if (auto err = parse_logit_bias(body, s)) return err;
  if (auto err = parse_range(body, "presence_penalty", -2.0, 2.0, false, s.presence_penalty)) return err;
  if (auto err = parse_range(body, "frequency_penalty", -2.0, 2.0, false, s.frequency_penalty)) return err;
  // vLLM names it repetition_penalty, llama-server repeat_penalty: one knob, so both must agree.
  float repeat_penalty = 1.0f;
  if (auto err = parse_range(body, "repetition_penalty", 0.0, 10.0, true, s.repetition_penalty)) return err;
  if (auto err = parse_range(body, "repeat_penalty", 0.0, 10.0, true, repeat_penalty)) return err;
  if (field(body, "repeat_penalty")) {
    if (field(body, "repetition_penalty") && repeat_penalty != s.repetition_penalty) {
      return bad_request("'repeat_penalty' and 'repetition_penalty' name one setting; they differ", "repeat_penalty", "invalid_value");
    }
    s.repetition_penalty = repeat_penalty;
  }
  std::optional<std::int64_t> last_n;
  if (auto err = get_int(body, "repeat_last_n", last_n)) return err;
  if (last_n) {
    if (*last_n < -1 || *last_n > INT32_MAX) {
      return bad_request("'repeat_last_n' must be -1 (the whole sequence), 0 (off) or a token count", "repeat_last_n", "out_of_range");
    }
    s.repeat_last_n = static_cast<int>(*last_n);
  }
  if (auto err = parse_range(body, "min_p", 0.0, 1.0, false, s.min_p)) return err;
  if (auto err = parse_range(body, "typical_p", 0.0, 1.0, true, s.typical_p)) return err;
  // llama-server: -1 (any negative) is off.
  std::optional<double> sigma;
  if (auto err = get_number(body, "top_n_sigma", sigma)) return err;
  if (sigma && *sigma >= 0) {
    if (*sigma > 100) return bad_request("'top_n_sigma' must be at most 100 (negative: off)", "top_n_sigma", "out_of_range");
    s.top_n_sigma = static_cast<float>(*sigma);
  }
  return std::nullopt;
}
// ---- end of the sampling knobs ------------------------------------------------------------------

// ---- Prompt caching (issue 35): prompt_cache_key, prompt_cache_retention, kvstash_pins ----------
// The longest pin any request may ask; the server cuts it further to --pin-max-ttl.
constexpr std::int64_t kMaxPinSeconds = 7 * 24 * 3600;

std::optional<ApiError> parse_prompt_caching(const json& body, ParsedRequest& out) {
  if (auto err = get_string(body, "prompt_cache_key", out.prompt_cache_key)) return err;
  if (out.prompt_cache_key.size() > 1024) {
    return bad_request("'prompt_cache_key' is longer than 1024 characters", "prompt_cache_key", "out_of_range");
  }
  if (const json* r = field(body, "prompt_cache_retention")) {
    if (!r->is_null()) {
      if (!r->is_string()) return wrong_type("prompt_cache_retention", "a string", *r);
      const std::string v = r->get<std::string>();
      // OpenAI's values: "in_memory" (its default: minutes) and "24h"; durations as 30m, 2h too.
      std::int64_t seconds = 0;
      if (v == "in_memory" || v == "in-memory") {
        seconds = 300;
      } else {
        std::size_t used = 0;
        long long n = -1;
        try {
          n = std::stoll(v, &used);
        } catch (...) {
        }
        const std::string unit = v.substr(used);
        const std::int64_t scale = unit == "s" || unit.empty() ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
        if (n > 0 && scale > 0) seconds = n * scale;
      }
      if (seconds <= 0 || seconds > kMaxPinSeconds) {
        return bad_request("'prompt_cache_retention' must be \"in_memory\", \"24h\" or a duration such as \"30m\" (at most 7d)",
                           "prompt_cache_retention", "invalid_value");
      }
      out.pins.push_back({-1, std::chrono::seconds(seconds)});
    }
  }
  if (const json* pins = field(body, "kvstash_pins")) {
    if (out.endpoint != Endpoint::kChatCompletions) {
      return bad_request("'kvstash_pins' is for chat requests (breakpoints after a message)", "kvstash_pins", "unsupported_parameter");
    }
    if (!pins->is_array() || pins->size() > 4) return bad_request("'kvstash_pins' must be an array of at most 4 pins", "kvstash_pins", "invalid_value");
    for (const json& p : *pins) {
      const json* m = p.is_object() ? field(p, "messages") : nullptr;
      const json* t = p.is_object() ? field(p, "ttl_s") : nullptr;
      if (!m || !t || !m->is_number_integer() || !t->is_number_integer() || m->get<std::int64_t>() < 1 ||
          m->get<std::int64_t>() > static_cast<std::int64_t>(out.messages.size()) || t->get<std::int64_t>() < 1 ||
          t->get<std::int64_t>() > kMaxPinSeconds) {
        return bad_request("'kvstash_pins' entries are {\"messages\": 1..number of messages, \"ttl_s\": 1..604800}", "kvstash_pins",
                           "invalid_value");
      }
      out.pins.push_back({static_cast<int>(m->get<std::int64_t>()), std::chrono::seconds(t->get<std::int64_t>())});
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_object(const json& body, ParsedRequest& out) {
  if (auto err = reject_unsupported(body, out.endpoint)) return err;
  // OpenAI requires `model` on both endpoints; a client that leaves it out is told, not guessed for.
  if (!field(body, "model")) return bad_request("'model' is required (the id from GET /v1/models)", "model", "missing_required_parameter");
  if (auto err = get_string(body, "model", out.model)) return err;
  if (out.endpoint == Endpoint::kChatCompletions) {
    if (auto err = parse_messages(body, out)) return err;
  } else if (auto err = parse_prompt(body, out)) {
    return err;
  }
  if (auto err = parse_sampling(body, out)) return err;
  if (auto err = parse_sampling_knobs(body, out)) return err;
  if (auto err = parse_stop(body, out)) return err;
  if (auto err = get_bool(body, "stream", out.stream)) return err;
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) return wrong_type("stream_options", "an object", *options);
    const json* usage = field(*options, "include_usage");
    if (usage) {
      if (!usage->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *usage);
      out.include_usage = usage->get<bool>();
    }
  }
  if (auto err = parse_logprobs(body, out)) return err;
  if (auto err = get_bool(body, "ignore_eos", out.ignore_eos)) return err;
  if (auto err = get_bool(body, "response_cache", out.response_cache)) return err;
  if (auto err = get_bool(body, "kvstash_store_sync", out.store_sync)) return err;
  if (out.store_sync && out.stream) {
    return bad_request("'kvstash_store_sync' is for non-streamed requests", "kvstash_store_sync", "unsupported_parameter");
  }
  std::optional<std::int64_t> kv_budget;
  if (auto err = get_int(body, "kv_budget", kv_budget)) return err;
  if (kv_budget) {
    // The engine checks the lower bound against its protected sets (a 400 naming the numbers).
    if (*kv_budget < -1 || *kv_budget > (std::int64_t{1} << 30)) {
      return bad_request("'kv_budget' must be -1 (the server's budget), 0 (none) or a token count", "kv_budget", "out_of_range");
    }
    out.kv_budget = static_cast<int>(*kv_budget);
  }
  if (auto err = parse_prompt_caching(body, out)) return err;
  return get_string(body, "cache_salt", out.cache_salt);
}

// ---- Structured outputs (issue 33): response_format / json_schema / grammar -------------------
// The schema's properties are generated in the order the client wrote them, which `json` (keys
// sorted) loses: the body is read again, keys in order, when it has either field.
std::optional<ApiError> parse_structured_output(const json& body, std::string_view text, ParsedRequest& out) {
  if (!field(body, "response_format") && !field(body, "json_schema") && !field(body, "grammar")) return std::nullopt;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
  if (auto err = parse_response_format(ordered, out.response_format)) return err;
  if (out.response_format.kind != ResponseFormat::Kind::kText && out.ignore_eos) {
    return bad_request("'ignore_eos' cannot be combined with a response format: the output ends where the format does",
                       "ignore_eos", "invalid_value");
  }
  return std::nullopt;
}
// ---- end of structured outputs ------------------------------------------------------------------

// nlohmann's message without its "[json.exception.parse_error.101] " tag: a client needs where and
// why its body is wrong, not the JSON library's exception class and number.
std::string json_error_text(const json::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0) {
    if (const auto end = what.find("] "); end != std::string::npos) what.erase(0, end + 2);
  }
  return what;
}

}  // namespace

std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, ParsedRequest& out) {
  out = ParsedRequest{};
  out.endpoint = endpoint;
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::parse_error& e) {
    const std::string what = json_error_text(e);
    bool utf8 = what.find("UTF-8") != std::string::npos || what.find("surrogate") != std::string::npos;
    return bad_request(std::string(utf8 ? "invalid UTF-8 in request body: " : "malformed JSON: ") + what,
                       "", utf8 ? "invalid_utf8" : "invalid_json");
  } catch (const json::exception& e) {
    // A number too large for a double (1e400) is out_of_range, not a parse_error.
    return bad_request("invalid JSON value: " + json_error_text(e), "", "invalid_json");
  }
  if (!parsed.is_object()) {
    return bad_request(std::string("request body must be a JSON object, got ") + type_name(parsed), "",
                       "invalid_json");
  }
  try {
    if (auto err = parse_object(parsed, out)) return err;
    // Tool calling, chat only (tool_request.h); it reads the tools again from the text, in order.
    if (endpoint == Endpoint::kChatCompletions) {
      if (auto err = parse_tool_request(parsed, body, out.tools)) return err;
    }
    return parse_structured_output(parsed, body, out);
  } catch (const json::exception& e) {
    // Every access above is type-checked first; this is a safety net so that no exception
    // escapes the module.
    return bad_request("invalid request: " + json_error_text(e));
  }
}

}  // namespace kvstash::server
