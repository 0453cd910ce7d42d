// `kvstash peers`: what a running node shares with and trusts: its identity (ed25519 public key),
// the URL it announces, its DHT node and neighbours, the producers it trusts and those it banned.
// It asks the node's GET /v1/kv/peers (served when the node runs with --dht-port).
#include <CLI/CLI.hpp>
#include <httplib.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "share/peer_client.h"

namespace kvstash::cli {

int peers_main(int argc, char** argv) {
  CLI::App app("Show a running node's identity, DHT neighbours and trust list (GET /v1/kv/peers)", "kvstash peers");
  std::string url = "http://127.0.0.1:8080";
  bool raw = false;
  app.add_option("--url", url, "The node's HTTP address")->capture_default_str();
  app.add_flag("--json", raw, "Print the node's JSON answer as it is");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  auto where = share::parse_peer_url(url);
  if (!where) {
    std::fprintf(stderr, "peers: --url: %s\n", where.status().message().c_str());
    return 1;
  }
  httplib::Client client(where->first, where->second);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  auto r = client.Get("/v1/kv/peers");
  if (!r) {
    std::fprintf(stderr, "peers: cannot reach %s: %s\n", url.c_str(), httplib::to_string(r.error()).c_str());
    return 1;
  }
  if (r->status != 200) {
    std::fprintf(stderr, "peers: %s answered %d (is it running with --dht-port?)\n", url.c_str(), r->status);
    return 1;
  }
  if (raw) {
    std::printf("%s\n", r->body.c_str());
    return 0;
  }
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "peers: %s: not a peers answer\n", url.c_str());
    return 1;
  }
  std::printf("identity      %s\n", j.value("identity", "").c_str());
  std::printf("peer url      %s\n", j.value("peer_url", "").c_str());
  const auto& dht = j["dht"];
  std::printf("dht node      %s (udp port %d, %d known nodes)\n", dht.value("node_id", "").c_str(), dht.value("port", 0),
              dht.value("known_nodes", 0));
  for (const auto& n : dht["neighbours"]) {
    std::printf("  neighbour   %s %s\n", n.value("id", "").c_str(), n.value("address", "").c_str());
  }
  std::printf("salted chunks %s\n", j.value("share_salted", false) ? "shared (--share-salted)" : "kept on this node");
  for (const auto& k : j["trusted_producers"]) std::printf("trusts        %s\n", k.get<std::string>().c_str());
  for (const auto& k : j["banned_producers"]) std::printf("banned        %s\n", k.get<std::string>().c_str());
  return 0;
}

}  // namespace kvstash::cli
