// Fuzzes the Jinja interpreter: the input is a template's source, parsed and, when it parses,
// rendered over a fixed chat context (messages of every role, a tool call, tools, the generation
// prompt flag, bos/eos) like the one the server builds (server/chat_template.cc). A chat template
// comes from the model's GGUF file or --chat-template, so it is untrusted input: parse() and
// render() must fail with a Status, never crash, hang or exhaust memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "jinja/template.h"

namespace {

using kvstash::jinja::Dict;
using kvstash::jinja::List;
using kvstash::jinja::Value;

Value message(const char* role, const char* content) {
  Dict m;
  m.set("role", Value(role));
  m.set("content", Value(content));
  return Value(std::move(m));
}

Dict make_context() {
  Dict call;
  call.set("name", Value("get_weather"));
  Dict arguments;
  arguments.set("city", Value("Paris"));
  arguments.set("days", Value(3));
  call.set("arguments", Value(std::move(arguments)));
  Dict tool_call;
  tool_call.set("type", Value("function"));
  tool_call.set("function", Value(std::move(call)));
  Value assistant = message("assistant", "");
  assistant.as_dict().set("tool_calls", Value(List{Value(std::move(tool_call))}));

  Dict tool;
  tool.set("type", Value("function"));
  Dict function;
  function.set("name", Value("get_weather"));
  function.set("description", Value("Weather for a city"));
  tool.set("function", Value(std::move(function)));

  Dict context;
  context.set("messages", Value(List{message("system", "Be brief."), message("user", "Hi <|im_start|> ü 😀"),
                                     std::move(assistant), message("tool", "{\"t\": 21.5}"),
                                     message("assistant", "It is 21.5."), message("user", "Thanks!")}));
  context.set("tools", Value(List{Value(std::move(tool))}));
  context.set("add_generation_prompt", Value(true));
  context.set("bos_token", Value("<s>"));
  context.set("eos_token", Value("</s>"));
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Dict context = make_context();
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = kvstash::jinja::Template::parse(source);
  if (!parsed) return 0;
  kvstash::jinja::RenderOptions options;
  options.now = 1700000000;  // strftime_now() renders the same every run
  (void)parsed->render(context, options);
  return 0;
}
