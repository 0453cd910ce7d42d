#include "share/peer_client.h"

#include <cctype>

#include "share/bounded_http.h"

namespace kvstash::share {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}


}  // namespace

std::string hex_encode(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

Expected<std::string> hex_decode(std::string_view hex) {
  if (hex.size() % 2 != 0) return invalid_argument("hex: odd length");
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("hex: not a hex digit");
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

Expected<std::pair<std::string, int>> parse_peer_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return invalid_argument("peer url '" + std::string(url) + "': expected http://HOST:PORT");
  std::string_view rest = url.substr(kScheme.size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || rest.find('/') != std::string_view::npos) {
    return invalid_argument("peer url '" + std::string(url) + "': expected http://HOST:PORT");
  }
  const std::string port(rest.substr(colon + 1));
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p <= 0 || p > 65535) return invalid_argument("peer url '" + std::string(url) + "': bad port");
  return std::make_pair(std::string(rest.substr(0, colon)), static_cast<int>(p));
}

namespace {

// One request to a peer under `limits` (peer_client.h: one deadline, one byte cap), counted.
Expected<BoundedAnswer> request(const std::string& peer_url, std::string method, std::string target,
                                std::vector<std::pair<std::string, std::string>> headers, std::string_view body,
                                const FetchLimits& limits) {
  auto where = parse_peer_url(peer_url);
  if (!where) return where.status();
  BoundedCall call;
  call.host = where->first;
  call.port = where->second;
  call.method = std::move(method);
  call.target = std::move(target);
  call.headers = std::move(headers);
  call.body = body;
  call.deadline = std::chrono::steady_clock::now() + limits.timeout;
  call.max_bytes = limits.max_bytes;
  BoundedEnd end = BoundedEnd::kError;
  auto answer = bounded_request(call, &end);
  if (limits.counters) {
    limits.counters->requests.fetch_add(1, std::memory_order_relaxed);
    if (end == BoundedEnd::kDeadline) limits.counters->deadline_hit.fetch_add(1, std::memory_order_relaxed);
    if (end == BoundedEnd::kCap) limits.counters->cap_hit.fetch_add(1, std::memory_order_relaxed);
  }
  if (!answer) return unavailable("peer " + peer_url + ": " + answer.status().message());
  return answer;
}

// GET {peer}{path}: the body and the value of `header` (lowercase; may be absent) of a 200.
Expected<BoundedAnswer> bounded_get(const std::string& peer_url, const std::string& path, const FetchLimits& limits) {
  auto answer = request(peer_url, "GET", path, {}, {}, limits);
  if (!answer) return answer.status();
  if (answer->status == 404) return not_found("peer " + peer_url + ": no " + path);
  if (answer->status != 200) return unavailable("peer " + peer_url + ": status " + std::to_string(answer->status));
  return answer;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Expected<FetchedChunk> fetch_chunk(const std::string& peer_url, const std::string& key_hex, const FetchLimits& limits) {
  auto got = bounded_get(peer_url, "/v1/kv/chunks/" + key_hex, limits);
  if (!got) return got.status();
  auto manifest = hex_decode(got->header(lower(kManifestHeader)));
  if (!manifest || manifest->empty()) return corrupt("peer " + peer_url + ": no valid " + kManifestHeader + " header");
  return FetchedChunk{std::move(got->body), std::move(*manifest)};
}

Expected<cache::Bytes> fetch_response_record(const std::string& peer_url, const std::string& key_hex,
                                             const FetchLimits& limits) {
  auto got = bounded_get(peer_url, "/v1/kv/responses/" + key_hex, limits);
  if (!got) return got.status();
  return std::move(got->body);
}

Expected<FetchedFragment> fetch_fragment(const std::string& peer_url, const std::string& key_hex, int index,
                                         const FetchLimits& limits) {
  auto got = bounded_get(peer_url, "/v1/kv/fragments/" + key_hex + "/" + std::to_string(index), limits);
  if (!got) return got.status();
  auto set = hex_decode(got->header(lower(kFragmentSetHeader)));
  auto manifest = hex_decode(got->header(lower(kManifestHeader)));
  if (!set || !manifest || set->empty() || manifest->empty()) return corrupt("peer " + peer_url + ": fragment without its set or manifest");
  return FetchedFragment{std::move(got->body), std::move(*set), std::move(*manifest)};
}

Status put_fragment(const std::string& peer_url, const std::string& key_hex, int index, const cache::Bytes& bytes,
                    const std::string& set, const std::string& manifest, const FetchLimits& limits) {
  auto answer = request(peer_url, "PUT", "/v1/kv/fragments/" + key_hex + "/" + std::to_string(index),
                        {{kFragmentSetHeader, hex_encode(set)},
                         {kManifestHeader, hex_encode(manifest)},
                         {"Content-Type", "application/octet-stream"}},
                        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), limits);
  if (!answer) return answer.status();
  if (answer->status >= 400 && answer->status < 500) {
    return invalid_argument("peer " + peer_url + " refused the fragment: status " + std::to_string(answer->status));
  }
  if (answer->status != 200 && answer->status != 201) return unavailable("peer " + peer_url + ": status " + std::to_string(answer->status));
  return Status::ok();
}

}  // namespace kvstash::share
