// DhtNode: this process's node of the kvstash DHT (OpenDHT underneath), for one job: who provides
// which KV chunk.
//
// A provider announces `chunk key → its peer URL` (announce()); the value lives on the DHT nodes
// closest to the key for `value_ttl` and is refreshed by announcing it again (the same value id:
// storing nodes refresh it rather than keep two). lookup() asks for the providers of many keys at
// once and waits at most a bounded time. Announcements are not signed: a false one costs a fetcher
// one refused fetch (every chunk is checked against its signed manifest), never a wrong chunk.
//
// The DHT is a private network (NetId kKvstashNetwork): kvstash nodes never join OpenDHT's public
// network by accident. OpenDHT's own threads run the node; this class only hands it work.
//
// Thread safety: every method may be called from any thread. Callbacks given to OpenDHT only touch
// state owned by shared objects they hold (a lookup that timed out is abandoned safely).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/chunk_key.h"
#include "kvstash/status.h"

namespace dht {
class DhtRunner;
}

namespace kvstash::share {

// "kvst": the kvstash DHT's network id; nodes of other networks ignore it.
inline constexpr std::uint32_t kKvstashNetwork = 0x6b767374;

struct DhtOptions {
  int port = 0;                                 // UDP port; 0 = any free port (see port())
  std::vector<std::string> bootstrap;           // "HOST:PORT" of nodes to join through; empty = first node
  std::chrono::seconds value_ttl{600};          // how long an announcement lives unless refreshed
};

struct NodeEntry {
  std::string id;       // the DHT node id, hex
  std::string address;  // "IP:PORT"
};

class DhtNode {
 public:
  // Binds the UDP port, starts OpenDHT's threads and starts joining through `bootstrap`.
  // Errors: kIoError when the port cannot be bound; kInvalidArgument for a malformed HOST:PORT.
  static Expected<std::unique_ptr<DhtNode>> start(const DhtOptions& options);
  ~DhtNode();  // stop()
  DhtNode(const DhtNode&) = delete;
  DhtNode& operator=(const DhtNode&) = delete;

  int port() const { return port_; }
  std::string node_id() const;
  // Joins through more nodes (HOST:PORT each); asynchronous.
  void bootstrap(const std::vector<std::string>& host_ports);

  // Announces that `provider_url` serves `key`. `done(ok)` runs on an OpenDHT thread once the
  // value was stored on some node (ok) or not (no node reached).
  void announce(const cache::ChunkKey& key, const std::string& provider_url, std::function<void(bool)> done = {});
  // The same for any topic and value (fragment holders, the node directory): the DHT key is
  // SHA-1(topic), the value id a hash of the value, so re-putting a value refreshes it.
  void put(const std::string& topic, const std::string& value, std::function<void(bool)> done = {});

  struct Lookup {
    std::vector<std::string> providers;  // the values as put (peer URLs, signed entries), unvalidated
    bool completed = false;              // the DHT search finished before the timeout
  };
  // The providers of each key, searched in parallel; returns when every search is done or at
  // `timeout`, whichever is first (what arrived until then is returned).
  std::vector<Lookup> lookup(std::span<const cache::ChunkKey> keys, std::chrono::milliseconds timeout);
  // The values put under each topic (Lookup::providers holds them), as lookup().
  std::vector<Lookup> get(std::span<const std::string> topics, std::chrono::milliseconds timeout);

  // DHT nodes this node knows (good + dubious, IPv4 and IPv6) and their list (for `kvstash peers`).
  std::size_t known_nodes() const;
  std::vector<NodeEntry> neighbours() const;

  // Leaves the DHT and joins OpenDHT's threads. Idempotent.
  void stop();

 private:
  DhtNode() = default;
  std::unique_ptr<dht::DhtRunner> runner_;
  int port_ = 0;
};

// The DHT topic of a chunk's providers: "kvstash-chunk-v1:" + hex(key).
std::string chunk_topic(const cache::ChunkKey& key);

// "host:port" → (host, port); kInvalidArgument naming the text otherwise.
Expected<std::pair<std::string, int>> parse_host_port(std::string_view text);

}  // namespace kvstash::share
