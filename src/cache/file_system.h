// FileSystem: the few file operations the disk tier needs, behind an interface so tests can
// inject faults (ENOSPC, short writes, crashes between write and rename).
//
// Paths are plain strings; errors are Status values: ENOSPC and EDQUOT are kResourceExhausted,
// a missing file is kNotFound, anything else the OS refuses is kIoError.
//
// Thread safety: PosixFileSystem holds no state and is safe from any thread; test doubles must be
// too, since the disk tier calls them from request threads and the write-behind thread.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "cache/chunk_codec.h"
#include "kvstash/status.h"

namespace kvstash::cache {

struct FileInfo {
  std::string name;            // the entry's name inside the listed directory
  bool is_dir = false;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;   // last modification; the disk tier's access time (see touch)
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // mkdir -p.
  virtual Status make_dirs(const std::string& path) = 0;
  virtual Expected<std::vector<FileInfo>> list_dir(const std::string& path) = 0;
  // At most max_bytes from the start of the file.
  virtual Expected<Bytes> read_file(const std::string& path,
                                    std::uint64_t max_bytes = std::numeric_limits<std::uint64_t>::max()) = 0;
  // The whole file, for a file read once and then kept elsewhere (a chunk load: the store promotes
  // it to the memory tier). The leading pages the page cache holds are copied from it; the rest is read
  // from the device in one O_DIRECT request, neither waiting on the page cache's readahead steps
  // nor caching the chunk a second time (BENCHMARKS.md, issue 10). Where O_DIRECT is refused
  // (tmpfs), plain reads. Same errors as read_file(). The default is read_file(path).
  virtual Expected<Bytes> read_file_once(const std::string& path) { return read_file(path); }
  // Creates or truncates path, writes all of bytes, fsyncs and closes. On error the file may be
  // left partially written; the caller removes it.
  virtual Status write_file_synced(const std::string& path, std::span<const std::uint8_t> bytes) = 0;
  // Atomic replace of `to` by `from` (same directory).
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  virtual Status remove(const std::string& path) = 0;
  // Sets the file's modification time to now: it records access without a write.
  virtual Status touch(const std::string& path) = 0;
};

// The process-wide POSIX implementation.
FileSystem* posix_file_system();

}  // namespace kvstash::cache
