#include "share/peer_client.h"

#include <httplib.h>

namespace kvstash::share {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void set_timeouts(httplib::Client& client, std::chrono::milliseconds timeout) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout - seconds);
  client.set_connection_timeout(seconds.count(), micros.count());
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  client.set_tcp_nodelay(true);
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

// GET {peer}{path}, bounded in time and bytes; the body and the value of `header` (may be empty).
Expected<std::pair<cache::Bytes, std::string>> bounded_get(const std::string& peer_url, const std::string& path,
                                                           const char* header, const FetchLimits& limits) {
  auto where = parse_peer_url(peer_url);
  if (!where) return where.status();
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + limits.timeout;
  httplib::Client client(where->first, where->second);
  set_timeouts(client, limits.timeout);

  cache::Bytes body;
  int status = 0;
  std::string header_value;
  bool too_big = false, too_slow = false;
  auto result = client.Get(
      path,
      [&](const httplib::Response& r) {
        status = r.status;
        header_value = r.get_header_value(header);
        if (status != 200) return false;
        const std::string length = r.get_header_value("Content-Length");
        if (!length.empty()) {
          const std::uint64_t n = std::strtoull(length.c_str(), nullptr, 10);
          if (n > limits.max_bytes) {
            too_big = true;
            return false;
          }
          body.reserve(n);
        }
        return true;
      },
      [&](const char* data, std::size_t n) {
        if (body.size() + n > limits.max_bytes) {
          too_big = true;
          return false;
        }
        if (Clock::now() > deadline) {
          too_slow = true;
          return false;
        }
        body.insert(body.end(), data, data + n);
        return true;
      });
  if (too_big) return unavailable("peer " + peer_url + ": answer larger than " + std::to_string(limits.max_bytes) + " bytes");
  if (too_slow) return unavailable("peer " + peer_url + ": fetch took longer than " + std::to_string(limits.timeout.count()) + " ms");
  if (status == 404) return not_found("peer " + peer_url + ": no " + path);
  if (status != 200) {
    if (!result && status == 0) return unavailable("peer " + peer_url + ": " + httplib::to_string(result.error()));
    return unavailable("peer " + peer_url + ": status " + std::to_string(status));
  }
  if (!result) return unavailable("peer " + peer_url + ": " + httplib::to_string(result.error()));
  return std::make_pair(std::move(body), std::move(header_value));
}

}  // namespace

Expected<FetchedChunk> fetch_chunk(const std::string& peer_url, const std::string& key_hex, const FetchLimits& limits) {
  auto got = bounded_get(peer_url, "/v1/kv/chunks/" + key_hex, kManifestHeader, limits);
  if (!got) return got.status();
  auto manifest = hex_decode(got->second);
  if (!manifest || manifest->empty()) return corrupt("peer " + peer_url + ": no valid " + kManifestHeader + " header");
  return FetchedChunk{std::move(got->first), std::move(*manifest)};
}

Expected<cache::Bytes> fetch_response_record(const std::string& peer_url, const std::string& key_hex,
                                             const FetchLimits& limits) {
  auto got = bounded_get(peer_url, "/v1/kv/responses/" + key_hex, kManifestHeader, limits);
  if (!got) return got.status();
  return std::move(got->first);
}

Expected<FetchedFragment> fetch_fragment(const std::string& peer_url, const std::string& key_hex, int index,
                                         const FetchLimits& limits) {
  auto where = parse_peer_url(peer_url);
  if (!where) return where.status();
  httplib::Client client(where->first, where->second);
  set_timeouts(client, limits.timeout);
  auto r = client.Get("/v1/kv/fragments/" + key_hex + "/" + std::to_string(index));
  if (!r) return unavailable("peer " + peer_url + ": " + httplib::to_string(r.error()));
  if (r->status == 404) return not_found("peer " + peer_url + ": no fragment " + std::to_string(index));
  if (r->status != 200) return unavailable("peer " + peer_url + ": status " + std::to_string(r->status));
  if (r->body.size() > limits.max_bytes) return unavailable("peer " + peer_url + ": fragment too large");
  auto set = hex_decode(r->get_header_value(kFragmentSetHeader));
  auto manifest = hex_decode(r->get_header_value(kManifestHeader));
  if (!set || !manifest || set->empty() || manifest->empty()) return corrupt("peer " + peer_url + ": fragment without its set or manifest");
  return FetchedFragment{cache::Bytes(r->body.begin(), r->body.end()), std::move(*set), std::move(*manifest)};
}

Status put_fragment(const std::string& peer_url, const std::string& key_hex, int index, const cache::Bytes& bytes,
                    const std::string& set, const std::string& manifest, const FetchLimits& limits) {
  auto where = parse_peer_url(peer_url);
  if (!where) return where.status();
  httplib::Client client(where->first, where->second);
  set_timeouts(client, limits.timeout);
  httplib::Headers headers = {{kFragmentSetHeader, hex_encode(set)}, {kManifestHeader, hex_encode(manifest)}};
  auto r = client.Put("/v1/kv/fragments/" + key_hex + "/" + std::to_string(index), headers,
                      std::string(bytes.begin(), bytes.end()), "application/octet-stream");
  if (!r) return unavailable("peer " + peer_url + ": " + httplib::to_string(r.error()));
  if (r->status >= 400 && r->status < 500) return invalid_argument("peer " + peer_url + " refused the fragment: " + r->body);
  if (r->status != 200 && r->status != 201) return unavailable("peer " + peer_url + ": status " + std::to_string(r->status));
  return Status::ok();
}

}  // namespace kvstash::share
