#include "share/dht_node.h"

#include <opendht.h>

#include <condition_variable>
#include <mutex>

namespace kvstash::share {
namespace {

// The value type of provider announcements: its expiration is the announcement's TTL. Every
// kvstash node registers it, so a storing node expires values as their producer intended.
constexpr dht::ValueType::Id kProviderType = 0x6b76;
// A longer value in the DHT is junk and is skipped: the longest kvstash puts is a signed directory
// entry (directory_entry.h: 124 bytes and a URL of up to 256); provider URLs are at most 256.
constexpr std::size_t kMaxValueLength = 512;

// The value id of an announcement: the same for every refresh, distinct per provider.
dht::Value::Id value_id(const std::string& value) {
  const auto h = dht::InfoHash::get(value);
  dht::Value::Id id = 0;
  for (int i = 0; i < 8; ++i) id = (id << 8) | h[i];
  return id == 0 ? 1 : id;  // 0 is OpenDHT's "pick one for me"
}

// One lookup's state, shared with OpenDHT's callbacks (which may outlive the caller's wait).
struct LookupState {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<DhtNode::Lookup> results;  // guarded by mu
  std::size_t pending = 0;               // searches not done yet; guarded by mu
};

}  // namespace

std::string chunk_topic(const cache::ChunkKey& key) { return "kvstash-chunk-v1:" + key.hex(); }

Expected<std::pair<std::string, int>> parse_host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return invalid_argument("'" + std::string(text) + "': expected HOST:PORT");
  }
  const std::string port(text.substr(colon + 1));
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p <= 0 || p > 65535) {
    return invalid_argument("'" + std::string(text) + "': bad port");
  }
  std::string host(text.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::make_pair(host, static_cast<int>(p));
}

Expected<std::unique_ptr<DhtNode>> DhtNode::start(const DhtOptions& options) {
  for (const std::string& b : options.bootstrap) {
    if (auto parsed = parse_host_port(b); !parsed) return Status(parsed.status().code(), "--dht-bootstrap " + parsed.status().message());
  }
  if (options.port < 0 || options.port > 65535) return invalid_argument("--dht-port must be in [0, 65535]");
  std::unique_ptr<DhtNode> node(new DhtNode());
  node->runner_ = std::make_unique<dht::DhtRunner>();
  dht::DhtRunner::Config config;
  config.threaded = true;
  config.dht_config.node_config.network = kKvstashNetwork;
  // Nodes behind one NAT (or every node of a loopback test) share an address: OpenDHT's per-address
  // rate limit would throttle them as one. The global limit stays OpenDHT's default.
  config.dht_config.node_config.max_peer_req_per_sec = -1;
  try {
    node->runner_->run(static_cast<in_port_t>(options.port), config);
    // After run(): the type store belongs to the node run() creates.
    node->runner_->registerType(dht::ValueType(kProviderType, "kvstash-provider", options.value_ttl));
    node->port_ = node->runner_->getBoundPort(AF_INET);
  } catch (const std::exception& e) {
    return io_error("dht: cannot start on udp port " + std::to_string(options.port) + ": " + e.what());
  }
  if (node->port_ == 0) return io_error("dht: cannot bind udp port " + std::to_string(options.port));
  node->bootstrap(options.bootstrap);
  return node;
}

DhtNode::~DhtNode() { stop(); }

void DhtNode::stop() {
  if (!runner_) return;
  try {
    runner_->join();  // shuts the node down and joins its threads
  } catch (const std::exception&) {
  }
  runner_.reset();
}

std::string DhtNode::node_id() const { return runner_ ? runner_->getNodeId().toString() : ""; }

void DhtNode::bootstrap(const std::vector<std::string>& host_ports) {
  for (const std::string& b : host_ports) {
    auto parsed = parse_host_port(b);
    if (!parsed || !runner_) continue;
    runner_->bootstrap(parsed->first, std::to_string(parsed->second));
  }
}

void DhtNode::announce(const cache::ChunkKey& key, const std::string& provider_url, std::function<void(bool)> done) {
  put(chunk_topic(key), provider_url, std::move(done));
}

void DhtNode::put(const std::string& topic, const std::string& value, std::function<void(bool)> done) {
  if (!runner_) {
    if (done) done(false);
    return;
  }
  auto v = std::make_shared<dht::Value>(kProviderType, reinterpret_cast<const std::uint8_t*>(value.data()), value.size(),
                                        value_id(value));
  // OpenDHT keys are 160-bit: the topic hashed.
  runner_->put(dht::InfoHash::get(topic), v, [done = std::move(done)](bool ok) {
    if (done) done(ok);
  });
}

std::vector<DhtNode::Lookup> DhtNode::lookup(std::span<const cache::ChunkKey> keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> topics;
  for (const auto& k : keys) topics.push_back(chunk_topic(k));
  return get(topics, timeout);
}

std::vector<DhtNode::Lookup> DhtNode::get(std::span<const std::string> topics, std::chrono::milliseconds timeout) {
  auto state = std::make_shared<LookupState>();
  state->results.resize(topics.size());
  if (!runner_ || topics.empty()) return state->results;
  state->pending = topics.size();
  for (std::size_t i = 0; i < topics.size(); ++i) {
    runner_->get(
        dht::InfoHash::get(topics[i]),
        [state, i](const std::vector<std::shared_ptr<dht::Value>>& values) {
          std::lock_guard lock(state->mu);
          auto& providers = state->results[i].providers;
          for (const auto& v : values) {
            if (!v || v->type != kProviderType || v->data.empty() || v->data.size() > kMaxValueLength) continue;
            std::string url(v->data.begin(), v->data.end());
            if (std::find(providers.begin(), providers.end(), url) == providers.end()) providers.push_back(std::move(url));
          }
          return true;  // keep collecting: every provider is a fallback
        },
        [state, i](bool) {
          std::lock_guard lock(state->mu);
          state->results[i].completed = true;
          --state->pending;
          state->cv.notify_all();
        });
  }
  std::unique_lock lock(state->mu);
  state->cv.wait_for(lock, timeout, [&] { return state->pending == 0; });
  return state->results;
}

std::size_t DhtNode::known_nodes() const {
  if (!runner_) return 0;
  return runner_->getNodesStats(AF_INET).getKnownNodes() + runner_->getNodesStats(AF_INET6).getKnownNodes();
}

std::vector<NodeEntry> DhtNode::neighbours() const {
  std::vector<NodeEntry> out;
  if (!runner_) return out;
  for (const auto& n : runner_->exportNodes()) out.push_back({n.id.toString(), dht::print_addr(n.ss, n.sslen)});
  return out;
}

}  // namespace kvstash::share
