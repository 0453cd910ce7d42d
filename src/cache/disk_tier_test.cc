#include "cache/disk_tier.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>

#include "cache/test_util.h"

namespace kvstash::cache {
namespace {

using namespace kvstash::cache::testing;
namespace fs = std::filesystem;

std::unique_ptr<DiskTier> open_tier(const std::string& dir, std::uint64_t capacity = 1 << 20,
                                    FileSystem* fsys = nullptr,
                                    std::chrono::milliseconds backoff = std::chrono::hours(1)) {
  auto tier = DiskTier::open({.dir = dir, .capacity_bytes = capacity, .write_backoff = backoff,
                              .fs = fsys});
  EXPECT_TRUE(tier.has_value()) << tier.status().to_string();
  return std::move(*tier);
}

std::uint64_t bytes_on_disk(const std::string& dir) {
  std::uint64_t sum = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) sum += e.file_size();
  }
  return sum;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

// Passes through to POSIX, but can fail or cut short the writes it is asked for.
class FaultyFileSystem final : public FileSystem {
 public:
  std::atomic<bool> enospc{false};
  std::atomic<bool> short_write{false};  // writes half the bytes, then fails like a crash would
  std::atomic<int> writes{0};

  Status make_dirs(const std::string& p) override { return real_->make_dirs(p); }
  Expected<std::vector<FileInfo>> list_dir(const std::string& p) override { return real_->list_dir(p); }
  Expected<Bytes> read_file(const std::string& p, std::uint64_t max) override {
    return real_->read_file(p, max);
  }
  Status write_file_synced(const std::string& p, std::span<const std::uint8_t> b) override {
    ++writes;
    if (enospc) return resource_exhausted("write " + p + ": No space left on device");
    if (short_write) {
      (void)real_->write_file_synced(p, b.first(b.size() / 2));
      return io_error("write " + p + ": short write");
    }
    return real_->write_file_synced(p, b);
  }
  Status rename(const std::string& a, const std::string& b) override { return real_->rename(a, b); }
  Status remove(const std::string& p) override { return real_->remove(p); }
  Status touch(const std::string& p) override { return real_->touch(p); }

 private:
  FileSystem* real_ = posix_file_system();
};

TEST(DiskTier, PutGetContainsEraseSharded) {
  ScratchDir dir;
  auto tier = open_tier(dir.path());
  Bytes c0 = test_chunk(test_meta(test_key(0))), c1 = test_chunk(test_meta(test_key(1)), 300, 2);
  ASSERT_TRUE(tier->put(test_key(0), c0).is_ok());
  ASSERT_TRUE(tier->put(test_key(1), c1).is_ok());
  EXPECT_EQ(*tier->get(test_key(1)), c1);
  const std::string path = tier->path_of(test_key(1));
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(fs::path(path).parent_path().filename().string(), test_key(1).hex().substr(0, 2));
  std::vector<ChunkKey> keys = {test_key(0), test_key(1), test_key(2)};
  EXPECT_EQ(tier->contains(keys), 2u);
  EXPECT_EQ(tier->get(test_key(2)).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(tier->erase(test_key(0)).is_ok());
  EXPECT_EQ(tier->contains(keys), 0u);
  EXPECT_EQ(tier->stats().bytes_used, c1.size());
  // Bytes that are not the named chunk are refused rather than stored.
  EXPECT_EQ(tier->put(test_key(5), c1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->put(test_key(5), Bytes(10, 0)).code(), StatusCode::kInvalidArgument);
}

TEST(DiskTier, RestartRebuildsIndex) {
  ScratchDir dir;
  std::uint64_t total = 0;
  {
    auto tier = open_tier(dir.path());
    for (int i = 0; i < 20; ++i) {
      Bytes c = test_chunk(test_meta(test_key(i)), 100 + i, i);
      total += c.size();
      ASSERT_TRUE(tier->put(test_key(i), c).is_ok());
    }
  }
  auto tier = open_tier(dir.path());
  TierStats s = tier->stats();
  EXPECT_EQ(s.entries, 20u);
  EXPECT_EQ(s.bytes_used, total);
  EXPECT_EQ(s.rejected_chunks, 0u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(*tier->get(test_key(i)), test_chunk(test_meta(test_key(i)), 100 + i, i));
  }
  // A smaller bound at restart evicts down to it.
  auto small = open_tier(dir.path(), total / 2);
  EXPECT_LE(small->stats().bytes_used, total / 2);
  EXPECT_LE(bytes_on_disk(dir.path()), total / 2);
}

TEST(DiskTier, DamagedFilesDetectedRemovedCounted) {
  ScratchDir dir;
  {
    auto tier = open_tier(dir.path());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->put(test_key(i), test_chunk(test_meta(test_key(i)))).is_ok());
  }
  auto tier0 = open_tier(dir.path());
  const std::string truncated = tier0->path_of(test_key(0));
  const std::string flipped = tier0->path_of(test_key(1));
  const std::string renamed = tier0->path_of(test_key(2));
  tier0.reset();
  fs::resize_file(truncated, fs::file_size(truncated) - 10);
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    char c;
    f.read(&c, 1);
    f.seekp(-5, std::ios::end);
    c ^= 0x10;
    f.write(&c, 1);
  }
  // A valid chunk under another key's name.
  write_raw(renamed, test_chunk(test_meta(test_key(3))));

  auto tier = open_tier(dir.path());
  // Truncated and misnamed files fail the header scan at open.
  EXPECT_EQ(tier->stats().rejected_chunks, 2u);
  EXPECT_FALSE(fs::exists(truncated));
  EXPECT_FALSE(fs::exists(renamed));
  EXPECT_EQ(tier->get(test_key(0)).status().code(), StatusCode::kNotFound);
  // The payload bit flip passes the header scan and is caught on get.
  auto got = tier->get(test_key(1));
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt);
  EXPECT_FALSE(fs::exists(flipped));
  EXPECT_EQ(tier->stats().rejected_chunks, 3u);
  EXPECT_EQ(tier->get(test_key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(tier->get(test_key(3)).has_value());
  // Truncated while running: caught on get too.
  fs::resize_file(tier->path_of(test_key(3)), 50);
  EXPECT_EQ(tier->get(test_key(3)).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(tier->stats().entries, 0u);
}

TEST(DiskTier, CrashMidWriteNeverYieldsDamagedChunk) {
  ScratchDir dir;
  Bytes good = test_chunk(test_meta(test_key(1)));
  {
    auto tier = open_tier(dir.path());
    ASSERT_TRUE(tier->put(test_key(1), good).is_ok());
  }
  // What a kill -9 can leave: a temp file, and (without fsync before rename, on a crash of the
  // machine) a final name holding a prefix of a chunk.
  const std::string shard = dir.path() + "/" + test_key(2).hex().substr(0, 2);
  write_raw(shard + "/." + test_key(2).hex() + ".tmp.123.0", good);
  Bytes partial = test_chunk(test_meta(test_key(2)));
  partial.resize(partial.size() - 100);
  write_raw(shard + "/" + test_key(2).hex() + ".kvc", partial);
  Bytes header_only = test_chunk(test_meta(test_key(3)));
  header_only.resize(20);
  write_raw(dir.path() + "/" + test_key(3).hex().substr(0, 2) + "/" + test_key(3).hex() + ".kvc",
            header_only);

  auto tier = open_tier(dir.path());
  EXPECT_EQ(tier->stats().entries, 1u);
  EXPECT_EQ(tier->stats().rejected_chunks, 2u);
  EXPECT_FALSE(fs::exists(shard + "/." + test_key(2).hex() + ".tmp.123.0"));
  EXPECT_EQ(*tier->get(test_key(1)), good);
  EXPECT_FALSE(tier->get(test_key(2)).has_value());
  EXPECT_FALSE(tier->get(test_key(3)).has_value());
}

TEST(DiskTier, ShortWriteLeavesNothing) {
  ScratchDir dir;
  FaultyFileSystem faulty;
  faulty.short_write = true;
  {
    auto tier = open_tier(dir.path(), 1 << 20, &faulty, std::chrono::milliseconds(0));
    EXPECT_FALSE(tier->put(test_key(1), test_chunk(test_meta(test_key(1)))).is_ok());
    EXPECT_EQ(tier->stats().entries, 0u);
    EXPECT_EQ(tier->stats().errors, 1u);
    EXPECT_EQ(bytes_on_disk(dir.path()), 0u);  // the temp file was removed
    faulty.short_write = false;
    // Backoff 0: the next write goes through.
    ASSERT_TRUE(tier->put(test_key(2), test_chunk(test_meta(test_key(2)))).is_ok());
  }
  auto tier = open_tier(dir.path());
  EXPECT_EQ(tier->stats().entries, 1u);
  EXPECT_TRUE(tier->get(test_key(2)).has_value());
}

TEST(DiskTier, EnospcDisablesWritesGetsStillWork) {
  ScratchDir dir;
  FaultyFileSystem faulty;
  auto tier = open_tier(dir.path(), 1 << 20, &faulty);
  Bytes c1 = test_chunk(test_meta(test_key(1)));
  ASSERT_TRUE(tier->put(test_key(1), c1).is_ok());
  faulty.enospc = true;
  EXPECT_EQ(tier->put(test_key(2), test_chunk(test_meta(test_key(2)))).code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(tier->writes_disabled());
  const int writes_before = faulty.writes;
  faulty.enospc = false;
  // Disabled for the backoff (an hour here): refused without touching the disk.
  EXPECT_EQ(tier->put(test_key(3), test_chunk(test_meta(test_key(3)))).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(faulty.writes, writes_before);
  EXPECT_EQ(*tier->get(test_key(1)), c1);
  EXPECT_EQ(tier->stats().errors, 1u);
}

TEST(DiskTier, NeverExceedsBoundUnderRandomWorkload) {
  ScratchDir dir;
  constexpr std::uint64_t kCapacity = 40 * 1024;
  auto tier = open_tier(dir.path(), kCapacity);
  std::mt19937 rng(7);
  for (int i = 0; i < 600; ++i) {
    const int k = static_cast<int>(rng() % 60);
    if (rng() % 5 == 0) {
      (void)tier->erase(test_key(k));
    } else if (rng() % 3 == 0) {
      (void)tier->get(test_key(k));
    } else {
      (void)tier->put(test_key(k), test_chunk(test_meta(test_key(k)), rng() % 6000, k));
    }
    ASSERT_LE(tier->stats().bytes_used, kCapacity);
    if (i % 50 == 0) ASSERT_LE(bytes_on_disk(dir.path()), kCapacity);
  }
  EXPECT_EQ(bytes_on_disk(dir.path()), tier->stats().bytes_used);
  EXPECT_GT(tier->stats().evictions, 0u);
  auto reopened = open_tier(dir.path(), kCapacity);
  EXPECT_EQ(reopened->stats().bytes_used, tier->stats().bytes_used);
}

// Drops a file's pages from the page cache (clean pages: sync first).
void evict_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Issue 10: read_file_once serves cached pages from the page cache and the rest with one O_DIRECT
// read; every size (block-aligned or not, empty) and every mix of the two gives the exact bytes.
TEST(PosixFileSystem, ReadFileOnceReturnsExactBytesCachedColdOrMixed) {
  ScratchDir dir;
  FileSystem* fsys = posix_file_system();
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
                           std::size_t{65536 + 13}, std::size_t{786432 + 100}}) {
    const std::string path = dir.path() + "/f" + std::to_string(size);
    Bytes content = test_payload(size, static_cast<int>(size % 251));
    ASSERT_TRUE(fsys->write_file_synced(path, content).is_ok());
    EXPECT_EQ(*fsys->read_file_once(path), content) << size << " cached";
    evict_from_page_cache(path);
    EXPECT_EQ(*fsys->read_file_once(path), content) << size << " cold";
    evict_from_page_cache(path);
    ASSERT_TRUE(fsys->read_file(path, 5000).has_value());  // the head cached, the tail not
    EXPECT_EQ(*fsys->read_file_once(path), content) << size << " mixed";
  }
  EXPECT_EQ(fsys->read_file_once(dir.path() + "/absent").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvstash::cache
