#include "server/tool_request.h"

#include <set>

namespace kvstash::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

ApiError wrong_type(const std::string& param, const char* expected, const json& v) {
  return bad_request("'" + param + "' must be " + expected + ", got " + type_name(v), param, "invalid_type");
}

// The field's value, or nullptr when absent or null (OpenAI treats null as "not given").
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxToolNameChars) return false;
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '_' || c == '-')) return false;
  }
  return true;
}

std::optional<ApiError> parse_function(const json& tool, const std::string& p, ToolFunction& out) {
  if (!tool.is_object()) return wrong_type(p, "an object", tool);
  const json* type = field(tool, "type");
  if (!type) return bad_request("'" + p + ".type' is required", p + ".type", "missing_field");
  if (!type->is_string() || *type != "function") {
    return bad_request("'" + p + ".type' must be \"function\" (the only tool type this server supports)", p + ".type",
                       "unsupported_tool_type");
  }
  const json* function = field(tool, "function");
  if (!function) return bad_request("'" + p + ".function' is required", p + ".function", "missing_field");
  if (!function->is_object()) return wrong_type(p + ".function", "an object", *function);
  const std::string fp = p + ".function";
  const json* name = field(*function, "name");
  if (!name) return bad_request("'" + fp + ".name' is required", fp + ".name", "missing_field");
  if (!name->is_string()) return wrong_type(fp + ".name", "a string", *name);
  out.name = name->get<std::string>();
  if (!valid_name(out.name)) {
    return bad_request("'" + fp + ".name' must be 1 to 64 letters, digits, '_' or '-'", fp + ".name", "invalid_value");
  }
  if (const json* d = field(*function, "description")) {
    if (!d->is_string()) return wrong_type(fp + ".description", "a string", *d);
    out.description = d->get<std::string>();
  }
  if (const json* params = field(*function, "parameters")) {
    if (!params->is_object()) return wrong_type(fp + ".parameters", "an object (a JSON schema)", *params);
  }
  if (const json* strict = field(*function, "strict")) {
    if (!strict->is_boolean()) return wrong_type(fp + ".strict", "a boolean", *strict);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_choice(const json& body, ToolRequest& out) {
  const json* choice = field(body, "tool_choice");
  if (!choice) {
    out.choice = ToolChoice::kAuto;
    return std::nullopt;
  }
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") {
      out.choice = ToolChoice::kNone;
    } else if (c == "auto") {
      out.choice = ToolChoice::kAuto;
    } else if (c == "required") {
      out.choice = ToolChoice::kRequired;
    } else {
      return bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                         "\"function\": {\"name\": ...}}, got \"" + c.substr(0, 64) + "\"",
                         "tool_choice", "invalid_value");
    }
  } else if (choice->is_object()) {
    const json* type = field(*choice, "type");
    if (!type || !type->is_string() || *type != "function") {
      return bad_request("'tool_choice.type' must be \"function\"", "tool_choice.type", "invalid_value");
    }
    const json* function = field(*choice, "function");
    const json* name = function && function->is_object() ? field(*function, "name") : nullptr;
    if (!name || !name->is_string()) {
      return bad_request("'tool_choice.function.name' is required (a string)", "tool_choice.function.name",
                         "missing_field");
    }
    out.choice = ToolChoice::kNamed;
    out.named_function = name->get<std::string>();
  } else {
    return wrong_type("tool_choice", "a string or an object", *choice);
  }
  if (!out.has_tools() && (out.choice == ToolChoice::kRequired || out.choice == ToolChoice::kNamed)) {
    return bad_request("'tool_choice' requires 'tools'", "tool_choice", "invalid_value");
  }
  if (out.choice == ToolChoice::kNamed) {
    bool declared = false;
    for (const ToolFunction& f : out.functions) declared = declared || f.name == out.named_function;
    if (!declared) {
      return bad_request("'tool_choice' names function '" + out.named_function.substr(0, 64) +
                             "', which is not in 'tools'",
                         "tool_choice.function.name", "invalid_value");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_tool_request(const json& body, std::string_view raw_body, ToolRequest& out) {
  out = ToolRequest{};
  if (const json* parallel = field(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) return wrong_type("parallel_tool_calls", "a boolean", *parallel);
    out.parallel = parallel->get<bool>();
  }
  const json* tools = field(body, "tools");
  if (tools) {
    if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
    if (tools->size() > kMaxTools) {
      return bad_request("'tools' may hold at most 128 functions", "tools", "too_many_tools");
    }
    std::set<std::string> names;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const std::string p = "tools[" + std::to_string(i) + "]";
      ToolFunction f;
      if (auto err = parse_function((*tools)[i], p, f)) return err;
      if (!names.insert(f.name).second) {
        return bad_request("'" + p + ".function.name': function '" + f.name + "' is declared twice",
                           p + ".function.name", "invalid_value");
      }
      out.functions.push_back(std::move(f));
    }
    if (!out.functions.empty()) {
      // Again with the keys in the client's order: templates print the schemas as given. The body
      // parsed once already, so this cannot fail.
      const ordered_json ordered = ordered_json::parse(raw_body, nullptr, /*allow_exceptions=*/false);
      const ordered_json& ordered_tools = ordered.at("tools");
      out.tools_json = ordered_tools.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
      for (std::size_t i = 0; i < out.functions.size(); ++i) {
        const ordered_json& function = ordered_tools[i]["function"];
        auto params = function.find("parameters");
        if (params != function.end() && !params->is_null()) out.functions[i].parameters_json = params->dump();
      }
    }
  }
  return parse_choice(body, out);
}

std::optional<ApiError> parse_message_tool_fields(const json& message, const std::string& param,
                                                  const std::string& role, std::vector<ToolCall>& tool_calls,
                                                  std::string& tool_call_id, std::string& name) {
  if (const json* n = field(message, "name")) {
    if (!n->is_string()) return wrong_type(param + ".name", "a string", *n);
    name = n->get<std::string>();
  }
  const json* calls = field(message, "tool_calls");
  if (calls && role != "assistant") {
    return bad_request("'" + param + ".tool_calls' is only allowed on assistant messages", param + ".tool_calls",
                       "invalid_value");
  }
  if (calls) {
    if (!calls->is_array()) return wrong_type(param + ".tool_calls", "an array", *calls);
    for (std::size_t i = 0; i < calls->size(); ++i) {
      const json& c = (*calls)[i];
      const std::string p = param + ".tool_calls[" + std::to_string(i) + "]";
      if (!c.is_object()) return wrong_type(p, "an object", c);
      ToolCall call;
      const json* id = field(c, "id");
      if (!id) return bad_request("'" + p + ".id' is required", p + ".id", "missing_field");
      if (!id->is_string()) return wrong_type(p + ".id", "a string", *id);
      call.id = id->get<std::string>();
      const json* type = field(c, "type");
      if (type && (!type->is_string() || *type != "function")) {
        return bad_request("'" + p + ".type' must be \"function\"", p + ".type", "unsupported_tool_type");
      }
      const json* function = field(c, "function");
      if (!function) return bad_request("'" + p + ".function' is required", p + ".function", "missing_field");
      if (!function->is_object()) return wrong_type(p + ".function", "an object", *function);
      const json* fname = field(*function, "name");
      if (!fname) return bad_request("'" + p + ".function.name' is required", p + ".function.name", "missing_field");
      if (!fname->is_string()) return wrong_type(p + ".function.name", "a string", *fname);
      call.name = fname->get<std::string>();
      const json* args = field(*function, "arguments");
      if (!args) {
        return bad_request("'" + p + ".function.arguments' is required", p + ".function.arguments", "missing_field");
      }
      if (!args->is_string()) return wrong_type(p + ".function.arguments", "a string (JSON text)", *args);
      call.arguments = args->get<std::string>();
      tool_calls.push_back(std::move(call));
    }
  }
  if (role == "tool") {
    const json* id = field(message, "tool_call_id");
    if (!id) return bad_request("'" + param + ".tool_call_id' is required", param + ".tool_call_id", "missing_field");
    if (!id->is_string()) return wrong_type(param + ".tool_call_id", "a string", *id);
    tool_call_id = id->get<std::string>();
  }
  return std::nullopt;
}

ordered_json tool_call_schema(const ToolRequest& tools, const std::string& arguments_key) {
  ordered_json variants = ordered_json::array();
  for (const ToolFunction& f : tools.functions) {
    if (tools.choice == ToolChoice::kNamed && f.name != tools.named_function) continue;
    ordered_json parameters = f.parameters_json.empty()
                                  ? ordered_json{{"type", "object"}}
                                  : ordered_json::parse(f.parameters_json, nullptr, /*allow_exceptions=*/false);
    ordered_json schema = {{"type", "object"},
                           {"properties", {{"name", {{"const", f.name}}}, {arguments_key, std::move(parameters)}}},
                           {"required", {"name", arguments_key}},
                           {"additionalProperties", false}};
    variants.push_back(std::move(schema));
  }
  if (variants.size() == 1) return variants[0];
  return {{"anyOf", std::move(variants)}};
}

}  // namespace kvstash::server
