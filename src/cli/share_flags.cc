#include "cli/share_flags.h"

#include "cache/store_options.h"

namespace kvstash::cli {

void add_share_flags(CLI::App& app, ShareFlags& f) {
  app.add_option("--dht-port", f.dht_port,
                 "Share KV chunks with other kvstash nodes: the UDP port of this node's DHT node (0 = any free port; "
                 "default: no sharing)");
  app.add_option("--dht-bootstrap", f.bootstrap, "DHT nodes to join through: HOST:PORT[,HOST:PORT...] (default: none, a first node)");
  app.add_option("--peer-url", f.peer_url,
                 "The address peers fetch chunks from, http://HOST:PORT (default: http://--host:--port)");
  app.add_flag("--share-salted", f.share_salted,
               "Also share chunks of requests with a cache_salt (a tenant's namespace; default: they never leave this node)");
  app.add_option("--peer-lookup-timeout-ms", f.lookup_timeout_ms, "Longest wait for the DHT to name a prefix's providers")
      ->capture_default_str();
  app.add_option("--peer-fetch-timeout-ms", f.fetch_timeout_ms,
                 "Wall-clock deadline of every request to a peer (connect, headers and body together)")
      ->capture_default_str();
  app.add_option("--peer-fetch-max-bytes", f.fetch_max_bytes,
                 "Byte cap of every answer from a peer, headers included; larger ones are abandoned at the cap")
      ->capture_default_str();
  app.add_option("--fragment-holders", f.fragment_holders,
                 "With --erasure: peers tried in turn for one fragment before it counts as not placed")
      ->capture_default_str();
  app.add_option("--peer-negative-ttl-ms", f.negative_ttl_ms, "How long \"no peer has this chunk\" is remembered")
      ->capture_default_str();
  app.add_option("--erasure", f.erasure,
                 "Also place each chunk this node computes on peers as K data + M parity fragments (ISA-L "
                 "Reed-Solomon), e.g. 4+2: any K fragments rebuild it (default: whole chunks only)");
  app.add_option("--trust", f.trust,
                 "Whose chunks are used: keys = producers in --trust-keys (and this node); any = also unknown "
                 "producers, spot-checked (--spot-check)")
      ->check(CLI::IsMember({"keys", "any"}))
      ->capture_default_str();
  app.add_option("--spot-check", f.spot_check,
                 "With --trust any: the share of an unknown producer's chunks this node recomputes and compares "
                 "(a mismatch bans the producer); 0..1")
      ->capture_default_str();
  app.add_option("--spot-check-pending-max", f.spot_check_pending_max,
                 "Spot checks waiting for this node's own KV at once; while full, unknown producers' chunks are not "
                 "used at all")
      ->capture_default_str();
  app.add_option("--spot-check-expiry-ms", f.spot_check_expiry_ms,
                 "How long a chunk held for a spot check waits for this node's own KV before the check is dropped "
                 "(counted as expired)")
      ->capture_default_str();
  app.add_option("--peer-reannounce-s", f.reannounce_s, "Seconds between re-announcements of held chunks (< 600, the TTL)")
      ->capture_default_str();
}

Expected<std::optional<share::ShareOptions>> share_options_from(const ShareFlags& f) {
  if (f.dht_port < 0) {
    if (!f.bootstrap.empty() || !f.peer_url.empty() || f.share_salted || !f.erasure.empty()) {
      return invalid_argument("--dht-bootstrap, --peer-url, --share-salted and --erasure need --dht-port (peer sharing is off without it)");
    }
    return std::optional<share::ShareOptions>();
  }
  if (f.dht_port > 65535) return invalid_argument("--dht-port must be in [0, 65535]");
  if (f.lookup_timeout_ms < 1 || f.fetch_timeout_ms < 1 || f.negative_ttl_ms < 0 || f.reannounce_s < 1) {
    return invalid_argument("--peer-*-timeout-ms and --peer-reannounce-s must be positive");
  }
  share::ShareOptions o;
  o.dht.port = f.dht_port;
  std::string_view rest = f.bootstrap;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (item.empty()) continue;
    if (auto hp = share::parse_host_port(item); !hp) return invalid_argument("--dht-bootstrap: " + hp.status().message());
    o.dht.bootstrap.emplace_back(item);
  }
  if (!f.peer_url.empty()) {
    if (auto u = share::parse_peer_url(f.peer_url); !u) return invalid_argument("--peer-url: " + u.status().message());
  }
  o.peer_url = f.peer_url;
  o.share_salted = f.share_salted;
  o.lookup_timeout = std::chrono::milliseconds(f.lookup_timeout_ms);
  o.fetch.timeout = std::chrono::milliseconds(f.fetch_timeout_ms);
  auto cap = cache::parse_byte_size(f.fetch_max_bytes);
  if (!cap || *cap < 4096) return invalid_argument("--peer-fetch-max-bytes: a size of at least 4KiB (e.g. 64MiB)");
  o.fetch.max_bytes = *cap;
  if (f.fragment_holders < 1) return invalid_argument("--fragment-holders must be at least 1");
  o.max_fragment_holders = static_cast<std::size_t>(f.fragment_holders);
  o.negative_ttl = std::chrono::milliseconds(f.negative_ttl_ms);
  o.reannounce_interval = std::chrono::seconds(f.reannounce_s);
  if (f.spot_check < 0 || f.spot_check > 1) return invalid_argument("--spot-check must be in [0, 1]");
  o.trust_any = f.trust == "any";
  o.spot_check = f.spot_check;
  if (f.spot_check_pending_max < 1 || f.spot_check_expiry_ms < 1) {
    return invalid_argument("--spot-check-pending-max and --spot-check-expiry-ms must be positive");
  }
  o.spot_checks.max_pending = static_cast<std::size_t>(f.spot_check_pending_max);
  o.spot_checks.expiry = std::chrono::milliseconds(f.spot_check_expiry_ms);
  if (!f.erasure.empty()) {
    auto scheme = share::parse_erasure_scheme(f.erasure);
    if (!scheme) return invalid_argument("--erasure: " + scheme.status().message());
    o.erasure = *scheme;
  }
  if (o.reannounce_interval >= o.dht.value_ttl) return invalid_argument("--peer-reannounce-s must be below 600 (the DHT value TTL)");
  return std::optional<share::ShareOptions>(std::move(o));
}

}  // namespace kvstash::cli
