// GET /v1/kv/info and GET /v1/kv/events of a real `kvstash serve`: the snapshot names the keys of
// what was served (pool: the block chain; memory: the chunk chain), a subscriber resumes from a
// sequence number, and one that asks from outside the retained window (or another epoch) gets a
// gap and a fresh snapshot.
#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "router/router_test_util.h"

namespace kvstash::router::testing {
namespace {

using server::testing::ServeProcess;

std::vector<int> prompt(int seed, int n) {
  std::vector<int> out;
  std::uint32_t x = 2654435761u * static_cast<std::uint32_t>(seed + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(3 + static_cast<int>((x >> 8) % 240));
  }
  return out;
}

class KvEventsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    model_path_ = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    auto m = load_router_model(model_path_, "", 0);
    ASSERT_TRUE(m) << m.status().to_string();
    model_ = std::move(*m);
  }
  std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--cache-ram", "64MiB", "--chunk-tokens", "32", "--identity", scratch_.path() + "/" + name + ".key"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<ServeProcess>(model_path_, args, scratch_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << p->log();
    return p;
  }
  std::string model_path_;
  std::unique_ptr<RouterModel> model_;
  cache::testing::ScratchDir scratch_;
};

TEST_F(KvEventsE2E, InfoAndSnapshotNameTheServedPromptsKeys) {
  auto node = serve("node");
  ASSERT_TRUE(node->ready());
  const std::vector<int> p = prompt(1, 150);
  ASSERT_FALSE(node->complete(p, 4).is_null()) << node->last_error();
  ASSERT_TRUE(node->wait_writes_done());

  httplib::Client c("127.0.0.1", node->port());
  auto r = c.Get("/v1/kv/info");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json info = json::parse(r->body);
  EXPECT_EQ(info["version"], 1);
  EXPECT_EQ(info["model_fingerprint"].get<std::string>().size(), 64u);
  EXPECT_EQ(info["kv_format"], "f16-blk16-v2");
  EXPECT_EQ(info["block_size"], 16);
  EXPECT_EQ(info["chunk_tokens"], 32);
  EXPECT_EQ(info["event_sources"], json::array({"pool", "memory"}));
  EXPECT_EQ(info["public_key"].get<std::string>().size(), 64u);  // the node's ed25519 key, hex
  EXPECT_EQ(info["public_key"], json::parse(c.Get("/v1/kv/info")->body)["public_key"]);

  const RequestKeys keys = keys_of(*model_, kv_info_of(node->port()), p);
  ASSERT_EQ(keys.block_keys.size(), 9u);  // (150 [+ BOS] - 1) / 16
  std::vector<json> snap = read_snapshot(node->port());
  ASSERT_FALSE(snap.empty());
  EXPECT_EQ(snap.front()["type"], "hello");
  EXPECT_EQ(snap.front()["epoch"], info["events_epoch"]);
  const auto pool = snapshot_keys(snap, "pool");
  const auto memory = snapshot_keys(snap, "memory");
  for (const auto& k : keys.block_keys) EXPECT_TRUE(pool.count(k.hex())) << "block key missing from the pool snapshot";
  for (const auto& k : keys.chunk_keys) EXPECT_TRUE(memory.count(k.hex())) << "chunk key missing from the memory snapshot";
  // A salted prompt's keys are other keys.
  const RequestKeys salted = keys_of(*model_, kv_info_of(node->port()), p, "tenant");
  EXPECT_FALSE(pool.count(salted.block_keys.front().hex()));
}

TEST_F(KvEventsE2E, ResumesFromASequenceNumber) {
  auto node = serve("node");
  ASSERT_TRUE(node->ready());
  ASSERT_FALSE(node->complete(prompt(2, 100), 2).is_null()) << node->last_error();
  std::vector<json> snap = read_snapshot(node->port());
  ASSERT_GE(snap.size(), 2u);
  const std::string epoch = snap.front()["epoch"];
  const std::uint64_t seq = snap.back()["seq"];
  ASSERT_GT(seq, 0u);

  // While nobody listens: a new prompt. Resuming from `seq` replays its events, nothing older.
  const std::vector<int> p = prompt(3, 100);
  ASSERT_FALSE(node->complete(p, 2).is_null()) << node->last_error();
  const RequestKeys keys = keys_of(*model_, kv_info_of(node->port()), p);
  std::set<std::string> stored;
  std::uint64_t first_seq = 0;
  std::vector<json> resumed = read_events(node->port(), "since=" + std::to_string(seq) + "&epoch=" + epoch, [&](const std::vector<json>& m) {
    const json& last = m.back();
    if (last.value("type", "") != "events") return false;
    for (const auto& e : last["events"]) {
      if (first_seq == 0) first_seq = e[0];
      if (e[1] == "stored" && e[2] == "pool") stored.insert(e[3].get<std::string>());
    }
    return stored.count(keys.block_keys.back().hex()) > 0;
  });
  for (const json& m : resumed) EXPECT_NE(m.value("type", ""), "snapshot") << "a resume sends no snapshot";
  EXPECT_EQ(first_seq, seq + 1);
  for (const auto& k : keys.block_keys) EXPECT_TRUE(stored.count(k.hex()));
}

TEST_F(KvEventsE2E, AGapOrAnotherEpochGetsAFreshSnapshot) {
  auto node = serve("node", {"--kv-events-retained", "8"});
  ASSERT_TRUE(node->ready());
  ASSERT_FALSE(node->complete(prompt(4, 200), 2).is_null()) << node->last_error();  // > 8 events
  std::vector<json> snap = read_snapshot(node->port());
  const std::string epoch = snap.front()["epoch"];
  ASSERT_GT(snap.back()["seq"].get<std::uint64_t>(), 9u);

  for (const std::string& query : {"since=1&epoch=" + epoch, std::string("since=1&epoch=0123456789abcdef")}) {
    std::vector<json> again = read_snapshot(node->port(), query);
    ASSERT_GE(again.size(), 3u) << query;
    EXPECT_EQ(again[0]["type"], "hello");
    EXPECT_EQ(again[1]["type"], "gap") << query;
    EXPECT_EQ(again.back()["type"], "snapshot_end");
    EXPECT_EQ(snapshot_keys(again, "pool"), snapshot_keys(snap, "pool"));
  }
  // A malformed since is a 400, not a stream.
  httplib::Client c("127.0.0.1", node->port());
  auto bad = c.Get("/v1/kv/events?since=abc");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

}  // namespace
}  // namespace kvstash::router::testing
