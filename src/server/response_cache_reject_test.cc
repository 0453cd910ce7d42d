// A bad response record is erased without waiting on the store's write queues (issue 31): with one
// tier's writer stuck in a put, a lookup that meets a planted bad record still answers (a miss)
// and the record is gone from the tier that held it. Before, the lookup worker flush()ed the
// whole store first and waited as long as the stuck writer.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "cache/chunk_codec.h"
#include "cache/memory_tier.h"
#include "cache/response_record.h"
#include "cache/tiered_store.h"
#include "server/response_cache.h"

namespace kvstash::server {
namespace {

// A tier whose puts wait while its gate is closed (a redis or peer that stopped answering).
class StuckPutTier final : public cache::Tier {
 public:
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::atomic<int> puts_waiting{0};
  std::string name() const override { return "stuck"; }
  std::size_t contains(std::span<const cache::ChunkKey> keys) override { return inner_.contains(keys); }
  Expected<cache::Bytes> get(const cache::ChunkKey& key) override { return inner_.get(key); }
  Status put(const cache::ChunkKey& key, std::span<const std::uint8_t> bytes) override {
    ++puts_waiting;
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
    --puts_waiting;
    return inner_.put(key, bytes);
  }
  Status erase(const cache::ChunkKey& key) override { return inner_.erase(key); }
  cache::TierStats stats() const override { return inner_.stats(); }
  Expected<std::vector<cache::ChunkKey>> list_keys() override { return inner_.list_keys(); }
  Status clear() override { return inner_.clear(); }

 private:
  cache::MemoryTier inner_{64 << 20};
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

TEST(ResponseCacheReject, BadRecordIsErasedWithoutWaitingForTheWriteQueues) {
  std::vector<std::unique_ptr<cache::Tier>> tiers;
  tiers.push_back(std::make_unique<cache::MemoryTier>(64 << 20));
  auto stuck_tier = std::make_unique<StuckPutTier>();
  StuckPutTier* stuck = stuck_tier.get();
  tiers.push_back(std::move(stuck_tier));
  const cache::ModelFingerprint fingerprint{};
  ResponseCache cache(std::make_unique<cache::TieredStore>(std::move(tiers)), fingerprint, ResponseCacheOptions{},
                      nullptr, nullptr);

  // Another record's write is stuck in the slow tier's writer.
  stuck->close();
  cache::ChunkKey other;
  other.bytes[0] = 1;
  const std::vector<std::uint8_t> payload(64, 7);
  ASSERT_TRUE(cache.records().store(cache::response_envelope_meta(other, fingerprint), payload).is_ok());
  for (int i = 0; i < 2000 && stuck->puts_waiting.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(stuck->puts_waiting.load(), 1);

  // A bad record (a valid envelope around bytes that are no response record) in the memory tier.
  cache::ChunkKey bad;
  bad.bytes[0] = 2;
  Expected<cache::Bytes> planted = cache::encode_chunk(cache::response_envelope_meta(bad, fingerprint), payload);
  ASSERT_TRUE(planted.has_value());
  ASSERT_TRUE(cache.records().tier(0).put(bad, *planted).is_ok());

  std::promise<bool> found;
  cache.lookup(bad, [&](std::optional<cache::ResponseRecord> r) { found.set_value(r.has_value()); });
  std::future<bool> answer = found.get_future();
  // A bound, not a timing assertion: the writer stays stuck until the test opens it.
  const bool answered = answer.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  const cache::ChunkKey keys[] = {bad};
  const std::size_t still_held = cache.records().tier(0).contains(keys);
  stuck->open();  // whatever happened: nothing may stay stuck behind the test
  ASSERT_TRUE(answered) << "the lookup waited on the stuck writer";
  EXPECT_FALSE(answer.get());
  EXPECT_EQ(still_held, 0u);
  cache.records().flush();
}

}  // namespace
}  // namespace kvstash::server
