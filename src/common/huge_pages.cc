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
  b.data_ = b.map_ = raw + head;
  b.size_ = b.map_size_ = size;
#ifdef MADV_HUGEPAGE
  b.advised_ = ::madvise(b.data_, b.size_, MADV_HUGEPAGE) == 0;
#endif
  return b;
}

HugePageBuffer HugePageBuffer::map_file(int fd, std::size_t file_bytes, std::size_t data_offset) {
  HugePageBuffer b;
  if (file_bytes == 0 || data_offset > file_bytes) return b;
  // Reserve one huge page more than the file, then map the file over the 2 MiB-aligned part: a
  // file's huge folio (2 MiB of the file from a multiple of 2 MiB) can only be mapped whole where
  // the address and the file offset agree modulo 2 MiB.
  const std::size_t size = (file_bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* reserved = ::mmap(nullptr, size + kHugePageBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return b;
  auto* raw = static_cast<std::uint8_t*>(reserved);
  const auto addr = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (addr + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const std::size_t head = aligned - addr;
  void* p = ::mmap(raw + head, file_bytes, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    ::munmap(reserved, size + kHugePageBytes);
    return b;
  }
  // Give back the reservation around the file's mapping.
  if (head > 0) ::munmap(raw, head);
  const std::size_t file_pages = (file_bytes + 4095) / 4096 * 4096;
  if (size + kHugePageBytes - head > file_pages) ::munmap(raw + head + file_pages, size + kHugePageBytes - head - file_pages);
  b.map_ = raw + head;
  b.map_size_ = file_pages;
  b.data_ = b.map_ + data_offset;
  b.size_ = file_bytes - data_offset;
  b.file_ = true;
#ifdef MADV_HUGEPAGE
  b.advised_ = ::madvise(b.map_, b.map_size_, MADV_HUGEPAGE) == 0;
#endif
  return b;
}

void HugePageBuffer::release() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  data_ = map_ = nullptr;
  size_ = map_size_ = 0;
}

HugePageBuffer::~HugePageBuffer() { release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      advised_(other.advised_),
      file_(other.file_) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    advised_ = other.advised_;
    file_ = other.file_;
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
    if (inside && (std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &kib) == 1 ||
                   std::sscanf(line.c_str(), "FilePmdMapped: %lld kB", &kib) == 1)) {
      total += kib * 1024;
    }
  }
  return total;
}

}  // namespace kvstash
