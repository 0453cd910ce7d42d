// Fuzzes the OpenAI request parser (server::parse_request): every POST body of /v1/chat/completions
// and /v1/completions goes through it first. The first byte picks the endpoint, the rest is the
// body. A body the parser accepts must satisfy what the parser's header promises its callers
// (chat: messages never empty; at most 4 stop strings; top_logprobs within 0..20; n == 1 implied);
// a broken promise aborts, as a crash would.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/request_parser.h"

using kvstash::server::Endpoint;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Endpoint endpoint = data[0] & 1 ? Endpoint::kCompletions : Endpoint::kChatCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  kvstash::server::ParsedRequest parsed;
  const auto error = kvstash::server::parse_request(endpoint, body, parsed);
  if (error) {
    if (error->http_status != 400 || error->message.empty()) std::abort();
    (void)error->to_json();
    return 0;
  }
  if (endpoint == Endpoint::kChatCompletions && parsed.messages.empty()) std::abort();
  if (parsed.stop.size() > kvstash::server::kMaxStopStrings) std::abort();
  if (parsed.top_logprobs < 0 || parsed.top_logprobs > kvstash::server::kMaxTopLogprobs) std::abort();
  if (parsed.max_tokens && *parsed.max_tokens < 0) std::abort();
  return 0;
}
