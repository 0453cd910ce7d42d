#include "cache/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvstash::cache {
namespace {

Status errno_status(const std::string& what, const std::string& path, int err) {
  std::string message = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(message));
  if (err == ENOENT) return not_found(std::move(message));
  return io_error(std::move(message));
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
