#include "cache/store_options.h"

#include <gtest/gtest.h>

#include "cache/test_util.h"

namespace kvstash::cache {
namespace {

TEST(StoreOptions, ParseByteSize) {
  EXPECT_EQ(*parse_byte_size("4GiB"), std::uint64_t{4} << 30);
  EXPECT_EQ(*parse_byte_size("50gib"), std::uint64_t{50} << 30);
  EXPECT_EQ(*parse_byte_size("512MiB"), std::uint64_t{512} << 20);
  EXPECT_EQ(*parse_byte_size("10GB"), 10000000000u);
  EXPECT_EQ(*parse_byte_size("1.5G"), std::uint64_t{3} << 29);
  EXPECT_EQ(*parse_byte_size("64k"), 65536u);
  EXPECT_EQ(*parse_byte_size("4096"), 4096u);
  for (const char* bad : {"", "GiB", "4XB", "1.2.3G", "-1G"}) {
    EXPECT_FALSE(parse_byte_size(bad).has_value()) << bad;
  }
}

TEST(StoreOptions, ParseRedisUrl) {
  auto one = parse_redis_url("redis://cache.local:6380");
  ASSERT_TRUE(one.has_value());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0], (RedisEndpoint{"cache.local", 6380}));
  auto many = parse_redis_url("redis://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3");
  ASSERT_TRUE(many.has_value());
  ASSERT_EQ(many->size(), 3u);
  EXPECT_EQ((*many)[1], (RedisEndpoint{"10.0.0.2", 7001}));
  EXPECT_EQ((*many)[2].port, 6379);
  for (const char* bad : {"", "redis://", "redis://h:0", "redis://h:99999", "h:abc", "a:1,,b:2"}) {
    EXPECT_FALSE(parse_redis_url(bad).has_value()) << bad;
  }
}

TEST(StoreOptions, OpenBuildsConfiguredTiers) {
  testing::ScratchDir dir;
  StoreOptions options;
  options.ram_bytes = 1 << 20;
  options.disk_dir = dir.path() + "/kv";
  auto store = open_tiered_store(options);
  ASSERT_TRUE(store.has_value()) << store.status().to_string();
  ASSERT_EQ((*store)->tier_count(), 2u);
  EXPECT_EQ((*store)->tier(0).name(), "memory");
  EXPECT_EQ((*store)->tier(1).name(), "disk");
}

}  // namespace
}  // namespace kvstash::cache
