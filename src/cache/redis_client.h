// RedisClient: hiredis connections to one Redis server or a Redis Cluster, with bounded timeouts,
// redirects and fail-fast reconnection. Internal to the cache module (RedisTier is its user).
//
// Cluster: at the first connection the client asks CLUSTER SLOTS; a server without cluster support
// makes it a single-server client. Keys go to the node owning CRC16(key) mod 16384 (hash tags
// honoured). MOVED updates that slot and refreshes the whole map; ASK sends ASKING plus the command
// to the named node once, without changing the map. A reshard is thus followed on the fly.
//
// Faults: every connect is bounded by connect_timeout and every command by command_timeout. A node
// that fails (refused, reset, timed out) is marked down: until its backoff passes (doubling from
// backoff_min to backoff_max) every command for it fails at once with kUnavailable, with no network
// i/o; then one reconnect is tried. The transition to down and back is logged once each.
//
// Thread safety: all methods are safe from many threads; one mutex (mu_) serialises them, since a
// hiredis context is single-threaded. A command therefore waits at most for the commands queued
// before it, each bounded by the timeouts above.
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::cache {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  std::string to_string() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const RedisEndpoint&, const RedisEndpoint&) = default;
};

struct RedisOptions {
  std::vector<RedisEndpoint> seeds;                 // --cache-redis; any node of a cluster will do
  std::chrono::milliseconds connect_timeout{200};   // per connection attempt
  std::chrono::milliseconds command_timeout{1000};  // per command round trip
  std::chrono::milliseconds backoff_min{100};       // first wait before reconnecting a down node
  std::chrono::milliseconds backoff_max{5000};      // the wait stops doubling here
  int max_redirects = 5;                            // MOVED/ASK hops per command
};

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// The cluster slot of a key: CRC16-XMODEM of the key (or of its {hash tag}) mod 16384.
std::uint16_t redis_key_slot(std::string_view key);
std::uint16_t crc16_xmodem(std::string_view data);

class RedisClient {
 public:
  explicit RedisClient(RedisOptions options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Runs args (args[0] the command name) on the node owning `key`, following redirects. A reply of
  // type REDIS_REPLY_ERROR other than a redirect comes back as a reply, not as a Status. Errors:
  // kUnavailable (unreachable, timed out, down, too many redirects).
  Expected<RedisReplyPtr> command(std::string_view key, const std::vector<std::string_view>& args);
  // Runs args on one given node (SCAN, FLUSH-like maintenance).
  Expected<RedisReplyPtr> command_at(const RedisEndpoint& node, const std::vector<std::string_view>& args);
  // The masters: every node that owns a slot, or the one server.
  Expected<std::vector<RedisEndpoint>> masters();
  bool cluster_mode();

 private:
  struct Node {
    RedisEndpoint endpoint;
    redisContext* ctx = nullptr;
    std::chrono::steady_clock::time_point down_until{};
    std::chrono::milliseconds backoff{0};
    bool logged_down = false;
  };
  static constexpr int kSlots = 16384;

  Status ensure_topology_locked();      // first contact: cluster or single
  Status refresh_slots_locked(Node& from);
  void learn_owner_locked(int slot, const RedisEndpoint& owner);  // when a refresh fails
  Node& node_locked(const RedisEndpoint& endpoint);
  Status connect_locked(Node& node);
  void mark_down_locked(Node& node, const std::string& why);
  Expected<RedisReplyPtr> run_locked(Node& node, const std::vector<std::string_view>& args, bool asking);

  const RedisOptions options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;  // by "host:port"; guarded by mu_
  bool topology_known_ = false;                         // guarded by mu_
  bool cluster_ = false;                                // guarded by mu_
  std::vector<int> slot_owner_;   // slot -> index into slot_nodes_, -1 unknown; guarded by mu_
  std::vector<RedisEndpoint> slot_nodes_;  // guarded by mu_
};

}  // namespace kvstash::cache
