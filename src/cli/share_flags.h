// The serve flags of peer-to-peer KV sharing (issue 13) and their parsing into ShareOptions:
//
//   --dht-port 4222  --dht-bootstrap HOST:PORT[,HOST:PORT...]  --peer-url http://HOST:PORT
//   --share-salted  --peer-lookup-timeout-ms 500  --peer-fetch-timeout-ms 2000  --erasure 4+2
//   --trust keys|any  --spot-check 0.1  --spot-check-pending-max 256  --spot-check-expiry-ms 60000
//         --peer-fetch-max-bytes 64MiB  --fragment-holders 3
//
// Sharing is on when --dht-port is given. Thread safety: plain values and pure functions.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "share/share_node.h"

namespace kvstash::cli {

struct ShareFlags {
  int dht_port = -1;              // -1 = no sharing
  std::string bootstrap;          // comma-separated HOST:PORT
  std::string peer_url;           // "" = this server's own address
  bool share_salted = false;
  int lookup_timeout_ms = 500;
  int fetch_timeout_ms = 2000;
  std::string fetch_max_bytes = "64MiB";  // one peer answer, head and body
  int fragment_holders = 3;               // holders tried per fragment
  int negative_ttl_ms = 2000;
  int reannounce_s = 300;
  std::string erasure;            // "K+M"; "" = whole chunks only
  std::string trust = "keys";     // "keys": --trust-keys only; "any": unknown producers too, spot-checked
  double spot_check = 0.1;
  long long spot_check_pending_max = 256;
  long long spot_check_expiry_ms = 60000;
};

void add_share_flags(CLI::App& app, ShareFlags& flags);

// The options, or nullopt when sharing is off. Errors name the flag.
Expected<std::optional<share::ShareOptions>> share_options_from(const ShareFlags& flags);

}  // namespace kvstash::cli
