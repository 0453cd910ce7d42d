// Anonymous memory backed by transparent huge pages where the kernel gives them.
//
// Decode streams every weight once per token. From a file mapping (4 KiB pages) each 4 KiB of
// weights costs a TLB entry, and under virtualization a two-level page walk; measured on this
// project's VMs, the same bytes read 4-32% faster from memory madvise'd MADV_HUGEPAGE (BENCHMARKS.md,
// issue 14). The streaming-read limit that decode is compared with is measured in the same kind of
// memory, so the ratio stays like for like.
//
// Thread safety: a HugePageBuffer is a plain owner; concurrent reads of its bytes are fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvstash {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // Maps `bytes` (rounded up to 2 MiB) of zeroed anonymous memory, 2 MiB aligned, and asks for
  // huge pages. Returns an empty buffer (data() == nullptr) if the mapping fails; the caller
  // falls back to what it had.
  static HugePageBuffer allocate(std::size_t bytes);
  // Maps the first `file_bytes` of the open file `fd` read-only (MAP_SHARED: the page cache's own
  // pages, shared by every process that maps the file), 2 MiB aligned so that the file's 2 MiB
  // folios can be mapped whole, and asks for huge pages. data() is the mapping plus
  // `data_offset`, size() the bytes after it. Empty (data() == nullptr) if the mapping fails.
  // Whether the kernel maps the file with huge pages depends on its file system (large folios)
  // and on how the pages came into the page cache: huge_bytes() says.
  static HugePageBuffer map_file(int fd, std::size_t file_bytes, std::size_t data_offset);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  // Whether the kernel accepted MADV_HUGEPAGE (THP "madvise" or "always"); false where THP is
  // off ("never") or unsupported: the memory is then ordinary 4 KiB pages.
  bool huge_pages_advised() const { return advised_; }
  // Bytes of this buffer currently backed by huge pages (AnonHugePages, or FilePmdMapped for a
  // file's mapping, of its range in /proc/self/smaps); -1 if that cannot be read.
  long long huge_bytes() const;
  bool file_backed() const { return file_; }  // map_file()'s

 private:
  void release();
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint8_t* map_ = nullptr;  // what to unmap: data_, or a file mapping's start
  std::size_t map_size_ = 0;
  bool advised_ = false;
  bool file_ = false;
};

}  // namespace kvstash
