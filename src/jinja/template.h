// A Jinja template, parsed once and rendered many times: the subset of Jinja2 that the chat
// templates of published models use, with Jinja2's output byte for byte (as Hugging Face
// configures it: trim_blocks, lstrip_blocks, its `tojson`, `raise_exception` and
// `strftime_now`, and the immutable sandbox, in which list and dict methods that mutate fail).
// What is supported: docs/jinja.md.
//
// Errors are values: parse() fails with kInvalidArgument naming the construct that is not
// supported or not valid, and its line; render() fails with kInvalidArgument for a runtime
// error (an undefined value used, a type error, raise_exception("...") with its message).
//
// Thread safety: a Template is immutable after parse(); render() may run on many threads at once.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "jinja/value.h"
#include "kvstash/status.h"

namespace kvstash::jinja {

struct Stmt;

struct RenderOptions {
  // The time strftime_now() formats (seconds since the epoch, UTC); 0 = the current time.
  std::time_t now = 0;
};

class Template {
 public:
  static Expected<Template> parse(std::string_view source);

  // Renders with the variables of `context` (a dict: messages, add_generation_prompt, ...) on
  // top of the globals (range, dict, namespace, raise_exception, strftime_now).
  Expected<std::string> render(const Dict& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace kvstash::jinja
