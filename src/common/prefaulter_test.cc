#include "common/prefaulter.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/huge_pages.h"

namespace kvstash {
namespace {

// Pages of [p, p + n) resident in memory, by mincore.
std::size_t resident_pages(const std::uint8_t* p, std::size_t n) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((n + page - 1) / page);
  if (::mincore(const_cast<std::uint8_t*>(p), n, vec.data()) != 0) return 0;
  std::size_t r = 0;
  for (unsigned char v : vec) r += v & 1;
  return r;
}

// Waits (bounded: 30 s, far past any machine's need) until `bytes` are populated.
bool wait_populated(const Prefaulter& f, std::size_t bytes) {
  for (int i = 0; i < 3000 && f.populated() < bytes && f.supported(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f.populated() >= bytes;
}

TEST(Prefaulter, BacksWhatIsWantedAndNoMoreWithoutChangingAByte) {
  HugePageBuffer buf = HugePageBuffer::allocate(std::size_t{16} << 20);
  ASSERT_NE(buf.data(), nullptr);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::memset(buf.data(), 0x5a, 100);  // written before: must survive
  Prefaulter f(buf.data(), buf.size());
  const std::size_t want = std::size_t{8} << 20;
  f.want(want);
  ASSERT_TRUE(f.supported()) << "this kernel refuses MADV_POPULATE_WRITE (needs Linux 5.14)";
  ASSERT_TRUE(wait_populated(f, want));
  EXPECT_EQ(f.populated(), want);  // steps of 2 MiB: exactly what was asked, not the whole buffer
  EXPECT_EQ(resident_pages(buf.data(), want), want / page);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(buf.data()[i], 0x5a);
  for (std::size_t i = 100; i < want; i += 4093) ASSERT_EQ(buf.data()[i], 0) << i;
  // More than the range: clamped to it.
  f.want(std::size_t{1} << 40);
  ASSERT_TRUE(wait_populated(f, buf.size()));
  EXPECT_EQ(f.populated(), buf.size());
  EXPECT_EQ(resident_pages(buf.data(), buf.size()), buf.size() / page);
}

TEST(Prefaulter, ConcurrentWritesKeepTheirBytes) {
  // The engine writes KV into blocks while the thread backs the pages around them.
  HugePageBuffer buf = HugePageBuffer::allocate(std::size_t{32} << 20);
  ASSERT_NE(buf.data(), nullptr);
  Prefaulter f(buf.data(), buf.size());
  f.want(buf.size());
  for (std::size_t off = 0; off < buf.size(); off += 65536) std::memset(buf.data() + off, static_cast<int>(off >> 16) | 1, 512);
  ASSERT_TRUE(wait_populated(f, buf.size()));
  for (std::size_t off = 0; off < buf.size(); off += 65536) {
    ASSERT_EQ(buf.data()[off + 511], static_cast<std::uint8_t>((off >> 16) | 1)) << off;
    ASSERT_EQ(buf.data()[off + 512], 0) << off;
  }
}

TEST(Prefaulter, StopsPromptlyAndNeverStartsForNothing) {
  HugePageBuffer buf = HugePageBuffer::allocate(std::size_t{256} << 20);
  ASSERT_NE(buf.data(), nullptr);
  {
    Prefaulter idle(buf.data(), buf.size());  // no want(): no thread, nothing backed
    EXPECT_EQ(idle.populated(), 0u);
  }
  EXPECT_EQ(resident_pages(buf.data(), buf.size()), 0u);
  {
    Prefaulter f(buf.data(), buf.size());
    f.want(buf.size());
  }  // the destructor joins: whatever it backed, nothing runs after it
  Prefaulter none(nullptr, 1 << 20);  // no range (the pool's fallback storage)
  none.want(1 << 20);
  EXPECT_EQ(none.populated(), 0u);
}

}  // namespace
}  // namespace kvstash
