// RedisClient: a pool of hiredis connections to one Redis server or a Redis Cluster, with AUTH,
// bounded timeouts, pipelining, redirects and fail-fast reconnection. Internal to the cache module
// (RedisTier is its user).
//
// Connections: each node has up to pool_size connections, opened on demand and kept. A command
// borrows one for its round trip and gives it back; no lock is held during network i/o, so
// commands to one node run in parallel up to pool_size, and a multi-MiB SET does not hold up a GET
// on another connection. When every connection of a node is lent, a command waits for one at most
// command_timeout, then fails with kUnavailable.
//
// AUTH: with a password, every new connection sends `AUTH [user] password` (user = an ACL user;
// empty = the default user) before its first command. A refused AUTH (WRONGPASS) or a server that
// wants one and got none (NOAUTH) is kPermissionDenied-like: connect_now() returns it as
// kInvalidArgument with a message naming the node and the cause (a startup error, not a fault to
// wait out); on the request path it marks the node down like any other failure.
//
// Cluster: at the first contact the client asks CLUSTER SLOTS; a server without cluster support
// makes it a single-server client. Keys go to the node owning CRC16(key) mod 16384 (hash tags
// honoured). MOVED updates that slot and refreshes the whole map; ASK sends ASKING plus the command
// to the named node once, without changing the map. A reshard is thus followed on the fly.
//
// Pipelines: pipeline() groups commands by the node owning their key and sends each group on one
// connection, all requests first, then all replies: one round trip per node. A command of a group
// that gets a redirect is then re-run alone through command().
//
// Faults: every connect is bounded by connect_timeout and every command by command_timeout. A node
// that fails (refused, reset, timed out) is marked down and its idle connections closed: until its
// backoff passes (doubling from backoff_min to backoff_max) every command for it fails at once with
// kUnavailable, with no network i/o; then one reconnect is tried. The transition to down and back
// is logged once each.
//
// Thread safety: all methods are safe from many threads. mu_ guards the topology and every node's
// pool and down state; it is never held during network i/o (connect, AUTH, commands). A borrowed
// connection is used by one thread only.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
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
  std::string user;                                 // ACL user for AUTH; empty = the default user
  std::string password;                             // empty = no AUTH
  std::size_t pool_size = 8;                        // connections per node (--cache-redis-pool)
  std::chrono::milliseconds connect_timeout{200};   // per connection attempt (TCP + AUTH)
  std::chrono::milliseconds command_timeout{1000};  // per round trip; also the wait for a connection
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

// One command of a pipeline: `key` routes it (cluster), args[0] is the command name.
struct RedisCommand {
  std::string_view key;
  std::vector<std::string_view> args;
};

class RedisClient {
 public:
  explicit RedisClient(RedisOptions options);
  ~RedisClient();  // closes every connection; no command may be running
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Contacts the seeds now (topology, AUTH, server version) and describes what it found, e.g.
  // "redis 7.0.15 standalone at 127.0.0.1:6379, user alice, pool 8": for the startup log. Errors:
  // kInvalidArgument when a server refuses the credentials (or wants some), kUnavailable when no
  // seed answers.
  Expected<std::string> connect_now();

  // Runs args (args[0] the command name) on the node owning `key`, following redirects. A reply of
  // type REDIS_REPLY_ERROR other than a redirect comes back as a reply, not as a Status. Errors:
  // kUnavailable (unreachable, timed out, down, no free connection in time, too many redirects).
  Expected<RedisReplyPtr> command(std::string_view key, const std::vector<std::string_view>& args);
  // The commands' replies, in order; one round trip per node involved (see the file comment).
  std::vector<Expected<RedisReplyPtr>> pipeline(std::span<const RedisCommand> commands);
  // Runs args on one given node (SCAN, FLUSH-like maintenance).
  Expected<RedisReplyPtr> command_at(const RedisEndpoint& node, const std::vector<std::string_view>& args);
  // The masters: every node that owns a slot, or the one server.
  Expected<std::vector<RedisEndpoint>> masters();
  bool cluster_mode();

  // Connections open now over all nodes (lent and idle); for tests.
  std::size_t open_connections();

 private:
  struct Node {
    RedisEndpoint endpoint;
    std::vector<redisContext*> idle;  // guarded by mu_
    std::size_t open = 0;             // idle + lent + being connected; guarded by mu_
    std::uint64_t generation = 0;     // bumped when marked down: lent connections are then closed
    std::chrono::steady_clock::time_point down_until{};  // guarded by mu_
    std::chrono::milliseconds backoff{0};                // guarded by mu_
    bool logged_down = false;                            // guarded by mu_
  };
  // A connection borrowed from a node's pool; given back (or closed) by release().
  struct Lease {
    Node* node = nullptr;
    redisContext* ctx = nullptr;
    std::uint64_t generation = 0;
  };
  static constexpr int kSlots = 16384;

  Expected<Lease> acquire(const RedisEndpoint& endpoint);
  // healthy = the connection may serve another command; otherwise it is closed and, with
  // `why`, the node is marked down.
  void release(Lease& lease, bool healthy, const std::string& why = {});
  Expected<redisContext*> open_connection(const RedisEndpoint& endpoint);  // no lock held
  Expected<RedisReplyPtr> run_on(const RedisEndpoint& endpoint, const std::vector<std::string_view>& args,
                                 bool asking);
  Status ensure_topology();          // first contact: cluster or single
  Status refresh_slots(const RedisEndpoint& from);
  RedisEndpoint owner_of(std::string_view key);  // requires a known topology
  Node& node_locked(const RedisEndpoint& endpoint);
  void mark_down_locked(Node& node, const std::string& why);
  void learn_owner_locked(int slot, const RedisEndpoint& owner);  // when a refresh fails

  const RedisOptions options_;
  std::mutex mu_;
  std::condition_variable freed_;                       // a connection was given back or closed
  std::map<std::string, std::unique_ptr<Node>> nodes_;  // by "host:port"; guarded by mu_
  bool topology_known_ = false;                         // guarded by mu_
  bool cluster_ = false;                                // guarded by mu_
  std::vector<int> slot_owner_;   // slot -> index into slot_nodes_, -1 unknown; guarded by mu_
  std::vector<RedisEndpoint> slot_nodes_;  // guarded by mu_
};

}  // namespace kvstash::cache
