#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

namespace kvstash {

HugePageBuffer HugePageBuffer::allocate(std::size_t bytes) {
  HugePageBuffer b;
  if (bytes == 0) return b;
  const std::size_t size = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // Map one huge page more and trim, so the start is 2 MiB aligned and every page can be huge.
  const std::size_t mapped = size + kHugePageBytes;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return b;
  auto* raw = static_cast<std::uint8_t*>(p);
  const auto addr = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (addr + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const std::size_t head = aligned - addr, tail = mapped - head - size;
  if (head > 0) ::munmap(raw, head);
  if (tail > 0) ::munmap(raw + head + size, tail);
  b.data_ = raw + head;
  b.size_ = size;
#ifdef MADV_HUGEPAGE
  b.advised_ = ::madvise(b.data_, b.size_, MADV_HUGEPAGE) == 0;
#endif
  return b;
}

HugePageBuffer::~HugePageBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), advised_(other.advised_) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    advised_ = other.advised_;
  }
  return *this;
}

long long HugePageBuffer::huge_bytes() const {
  if (data_ == nullptr) return 0;
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return -1;
  const auto begin = reinterpret_cast<std::uintptr_t>(data_), end = begin + size_;
  long long total = 0;
  bool inside = false;
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    // A mapping's header line: "lo-hi perms offset dev inode [path]".
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) {
      inside = lo < end && hi > begin;
      continue;
    }
    long long kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &kib) == 1) total += kib * 1024;
  }
  return total;
}

}  // namespace kvstash
