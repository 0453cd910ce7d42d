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

TEST(StoreOptions, ParseRedisTargetWithCredentials) {
  auto plain = parse_redis_target("redis://h:7000");
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->user.empty());
  EXPECT_TRUE(plain->password.empty());
  auto acl = parse_redis_target("redis://alice:p%40ss:w@10.0.0.1:7000,10.0.0.2:7001");
  ASSERT_TRUE(acl.has_value()) << acl.status().to_string();
  EXPECT_EQ(acl->user, "alice");
  EXPECT_EQ(acl->password, "p@ss:w");
  ASSERT_EQ(acl->nodes.size(), 2u);
  EXPECT_EQ(acl->nodes[0], (RedisEndpoint{"10.0.0.1", 7000}));
  EXPECT_EQ(acl->nodes[1], (RedisEndpoint{"10.0.0.2", 7001}));
  auto default_user = parse_redis_target("redis://:secret@cache.local");
  ASSERT_TRUE(default_user.has_value());
  EXPECT_EQ(default_user->user, "");
  EXPECT_EQ(default_user->password, "secret");
  EXPECT_EQ(default_user->nodes[0].port, 6379);
  auto password_only = parse_redis_target("secret@cache.local:6380");
  ASSERT_TRUE(password_only.has_value());
  EXPECT_EQ(password_only->password, "secret");
  // The URL without credentials still parses through the old entry point.
  auto nodes = parse_redis_url("redis://u:p@h:1");
  ASSERT_TRUE(nodes.has_value());
  EXPECT_EQ((*nodes)[0], (RedisEndpoint{"h", 1}));
  for (const char* bad : {"redis://u:@h:1", "redis://u:p%4@h", "redis://a:b@h:1,c:d@h:2", "redis://u:p@"}) {
    EXPECT_FALSE(parse_redis_target(bad).has_value()) << bad;
  }
}

TEST(StoreOptions, ParseDurationAndRedisFlags) {
  EXPECT_EQ(*parse_duration("0"), std::chrono::seconds(0));
  EXPECT_EQ(*parse_duration("3600"), std::chrono::seconds(3600));
  EXPECT_EQ(*parse_duration("90s"), std::chrono::seconds(90));
  EXPECT_EQ(*parse_duration("30m"), std::chrono::seconds(1800));
  EXPECT_EQ(*parse_duration("12h"), std::chrono::seconds(43200));
  EXPECT_EQ(*parse_duration("7d"), std::chrono::seconds(604800));
  for (const char* bad : {"", "h", "-5", "1.5h", "3w"}) EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
  StoreOptions o;
  ASSERT_TRUE(apply_redis_flags("redis://bob:pw@h:1", "1h", 3, o).is_ok());
  EXPECT_EQ(o.redis.size(), 1u);
  EXPECT_EQ(o.redis_user, "bob");
  EXPECT_EQ(o.redis_password, "pw");
  EXPECT_EQ(o.redis_ttl, std::chrono::seconds(3600));
  EXPECT_EQ(o.redis_pool, 3u);
  EXPECT_FALSE(apply_redis_flags("", "", 0, o).is_ok());
  EXPECT_FALSE(apply_redis_flags("", "1y", 8, o).is_ok());
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
