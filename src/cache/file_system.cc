#include "cache/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace kvstash::cache {
namespace {

Status errno_status(const std::string& what, const std::string& path, int err) {
  std::string message = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(message));
  if (err == ENOENT) return not_found(std::move(message));
  return io_error(std::move(message));
}

// O_DIRECT wants buffer, offset and length aligned to the device's logical block; 4 KiB covers
// every block size Linux file systems use.
constexpr std::size_t kDirectAlign = 4096;

// Bytes at the start of fd's file (of `size` bytes) that are in the page cache now.
std::size_t cached_prefix(int fd, std::size_t size) {
  if (size == 0) return 0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 0;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  std::size_t pages = 0;
  if (::mincore(map, size, resident.data()) == 0) {
    while (pages < resident.size() && (resident[pages] & 1)) ++pages;
  }
  ::munmap(map, size);
  return std::min(size, pages * page);
}

class PosixFileSystem final : public FileSystem {
 public:
  Status make_dirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return errno_status("mkdir", path, ec.value());
    return Status::ok();
  }

  Expected<std::vector<FileInfo>> list_dir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (!dir) return errno_status("opendir", path, errno);
    std::vector<FileInfo> out;
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st;
      if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // raced away
      out.push_back({name, S_ISDIR(st.st_mode), static_cast<std::uint64_t>(st.st_size),
                     std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
    }
    ::closedir(dir);
    return out;
  }

  Expected<Bytes> read_file(const std::string& path, std::uint64_t max_bytes) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_status("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return errno_status("stat", path, err);
    }
    Bytes out(std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size), max_bytes));
    std::size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        return errno_status("read", path, err);
      }
      if (n == 0) break;  // shrank under us: return what is there, the codec will say truncated
      done += static_cast<std::size_t>(n);
    }
    out.resize(done);
    ::close(fd);
    return out;
  }

  Expected<Bytes> read_file_once(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_status("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return errno_status("stat", path, err);
    }
    const std::size_t size = static_cast<std::size_t>(st.st_size);
    Bytes out(size);
    std::size_t done = 0;
    // 1. The leading pages the page cache holds, copied from it. Residency comes from mincore() on
    //    a mapping never touched: asking with a RWF_NOWAIT read instead starts the kernel's
    //    readahead of the very pages the O_DIRECT read then fetches again (measured: half the
    //    bandwidth, BENCHMARKS.md issue 10).
    const std::size_t cached = cached_prefix(fd, size);
    while (done < cached) {
      const ssize_t n = ::pread(fd, out.data() + done, cached - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // errors and a shrunk file are met again below
      done += static_cast<std::size_t>(n);
    }
    // 2. The rest in one O_DIRECT read from the aligned offset at or below `done`.
    if (done < size) {
      const int direct = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (direct >= 0) {
        const std::size_t start = done / kDirectAlign * kDirectAlign;
        const std::size_t length = (size - start + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
        std::unique_ptr<std::uint8_t, decltype(&std::free)> buffer(
            static_cast<std::uint8_t*>(std::aligned_alloc(kDirectAlign, length)), &std::free);
        std::size_t got = 0;
        for (int tries = 0; buffer && start + got < size && tries < 64; ++tries) {
          const ssize_t n = ::pread(direct, buffer.get() + got, length - got, static_cast<off_t>(start + got));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) break;  // EINVAL (alignment not accepted), an i/o error, or the end: plain reads below
          got += static_cast<std::size_t>(n);
          if (got % kDirectAlign != 0) break;  // a short read not on a block boundary: the rest plainly
        }
        ::close(direct);
        const std::size_t end = std::min(size, start + got);
        if (end > done) {
          std::memcpy(out.data() + done, buffer.get() + (done - start), end - done);
          done = end;
        }
      }
    }
    // 3. Whatever is left (O_DIRECT refused or cut short), with plain reads.
    while (done < size) {
      const ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return errno_status("read", path, err);
      }
      if (n == 0) break;  // shrank under us: return what is there, the codec will say truncated
      done += static_cast<std::size_t>(n);
    }
    out.resize(done);
    ::close(fd);
    return out;
  }

  Status write_file_synced(const std::string& path, std::span<const std::uint8_t> bytes) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno_status("create", path, errno);
    std::size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        ::close(fd);
        return errno_status("write", path, err);
      }
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) {
      int err = errno;
      ::close(fd);
      return errno_status("fsync", path, err);
    }
    if (::close(fd) != 0) return errno_status("close", path, errno);
    return Status::ok();
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_status("rename", from, errno);
    return Status::ok();
  }

  Status remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_status("unlink", path, errno);
    return Status::ok();
  }

  Status touch(const std::string& path) override {
    if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0) return errno_status("touch", path, errno);
    return Status::ok();
  }
};

}  // namespace

FileSystem* posix_file_system() {
  static PosixFileSystem fs;
  return &fs;
}

}  // namespace kvstash::cache
