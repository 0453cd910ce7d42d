// Writer: serialises metadata and tensor infos, then lets the caller produce each tensor's bytes
// directly into a shared mapping of the output file, one tensor at a time.
//
// Space for the whole file is reserved with posix_fallocate first, so a full disk is an error
// value here rather than a SIGBUS while filling the mapping. Each tensor's range is mapped, filled
// and unmapped in turn: the process holds at most one tensor's pages, and the kernel writes them
// back as it pleases.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "gguf/gguf.h"

namespace kvstash::gguf {
namespace {

constexpr std::uint32_t kVersion = 3;
constexpr std::uint64_t kDefaultAlignment = 32;

template <typename T>
void put(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out->append(bytes, sizeof(T));
}

void put_string(std::string* out, const std::string& s) {
  put<std::uint64_t>(out, s.size());
  out->append(s);
}

// Writes v's payload (without its type tag) as `type`. Integer values are narrowed to the type's
// width; the caller's Value factories guarantee they fit.
Status put_value(std::string* out, ValueType type, const Value& v) {
  auto uint_of = [&]() -> std::uint64_t {
    if (const auto* u = std::get_if<std::uint64_t>(&v.data)) return *u;
    if (const auto* i = std::get_if<std::int64_t>(&v.data)) return static_cast<std::uint64_t>(*i);
    return 0;
  };
  bool is_int = std::holds_alternative<std::uint64_t>(v.data) || std::holds_alternative<std::int64_t>(v.data);
  if (v.type != type) {
    return invalid_argument("value of type " + value_type_name(v.type) + " in a place of type " + value_type_name(type));
  }
  switch (type) {
    case ValueType::kU8: case ValueType::kI8:
      if (!is_int) break;
      put<std::uint8_t>(out, static_cast<std::uint8_t>(uint_of())); return Status::ok();
    case ValueType::kU16: case ValueType::kI16:
      if (!is_int) break;
      put<std::uint16_t>(out, static_cast<std::uint16_t>(uint_of())); return Status::ok();
    case ValueType::kU32: case ValueType::kI32:
      if (!is_int) break;
      put<std::uint32_t>(out, static_cast<std::uint32_t>(uint_of())); return Status::ok();
    case ValueType::kU64: case ValueType::kI64:
      if (!is_int) break;
      put<std::uint64_t>(out, uint_of()); return Status::ok();
    case ValueType::kF32:
      if (const auto* d = std::get_if<double>(&v.data)) { put<float>(out, static_cast<float>(*d)); return Status::ok(); }
      break;
    case ValueType::kF64:
      if (const auto* d = std::get_if<double>(&v.data)) { put<double>(out, *d); return Status::ok(); }
      break;
    case ValueType::kBool:
      if (const auto* b = std::get_if<bool>(&v.data)) { put<std::uint8_t>(out, *b ? 1 : 0); return Status::ok(); }
      break;
    case ValueType::kString:
      if (const auto* s = std::get_if<std::string>(&v.data)) { put_string(out, *s); return Status::ok(); }
      break;
    case ValueType::kArray:
      if (const auto* a = std::get_if<Array>(&v.data)) {
        put<std::uint32_t>(out, static_cast<std::uint32_t>(a->elem_type));
        put<std::uint64_t>(out, a->items.size());
        for (const Value& item : a->items) KVSTASH_RETURN_IF_ERROR(put_value(out, a->elem_type, item));
        return Status::ok();
      }
      break;
  }
  return invalid_argument("value tagged " + value_type_name(type) + " holds data of another kind");
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { if (fd_ >= 0) ::close(fd_); }
  int release() { int fd = fd_; fd_ = -1; return fd; }
 private:
  int fd_;
};

Status errno_status(const std::string& path, const char* what) {
  int err = errno;
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(path + ": " + what + ": " + std::strerror(err));
  return io_error(path + ": " + what + ": " + std::strerror(err));
}

}  // namespace

void Writer::set(std::string key, Value value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) { v = std::move(value); return; }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

Status Writer::add_tensor(std::string name, TensorType type, std::vector<std::uint64_t> dims) {
  if (name.empty()) return invalid_argument("tensor with an empty name");
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return invalid_argument("tensor '" + name + "' declared twice");
  }
  if (dims.empty() || dims.size() > 4) return invalid_argument("tensor '" + name + "': needs 1 to 4 dimensions");
  std::size_t block_elems = 0, block_bytes = 0;
  if (!tensor_type_layout(type, &block_elems, &block_bytes)) {
    return unsupported("tensor '" + name + "': tensor type " + tensor_type_name(type) + " has no known block layout");
  }
  std::uint64_t n = 1;
  for (std::uint64_t d : dims) {
    if (d == 0) return invalid_argument("tensor '" + name + "': zero dimension");
    if (n > std::numeric_limits<std::uint64_t>::max() / d) return invalid_argument("tensor '" + name + "': too many elements");
    n *= d;
  }
  if (dims[0] % block_elems != 0) {
    return invalid_argument("tensor '" + name + "': row length " + std::to_string(dims[0]) +
                            " is not a multiple of " + std::to_string(block_elems) + " for " + tensor_type_name(type));
  }
  TensorInfo t;
  t.name = std::move(name);
  t.type = type;
  t.dims = std::move(dims);
  t.n_elements = n;
  t.n_bytes = n / block_elems * block_bytes;
  tensors_.push_back(std::move(t));
  return Status::ok();
}

Status Writer::write(const std::string& path, const FillFn& fill) const {
  std::uint64_t alignment = kDefaultAlignment;
  for (const auto& [k, v] : metadata_) {
    if (k != "general.alignment") continue;
    const auto* a = std::get_if<std::uint64_t>(&v.data);
    if (v.type != ValueType::kU32 || a == nullptr || *a == 0 || (*a & (*a - 1)) != 0) {
      return invalid_argument(path + ": general.alignment must be a u32 power of two");
    }
    alignment = *a;
  }

  std::string header;
  put<std::uint32_t>(&header, 0x46554747);  // "GGUF"
  put<std::uint32_t>(&header, kVersion);
  put<std::uint64_t>(&header, tensors_.size());
  put<std::uint64_t>(&header, metadata_.size());
  for (const auto& [k, v] : metadata_) {
    put_string(&header, k);
    put<std::uint32_t>(&header, static_cast<std::uint32_t>(v.type));
    Status st = put_value(&header, v.type, v);
    if (!st.is_ok()) return invalid_argument(path + ": key '" + k + "': " + st.message());
  }
  std::vector<std::uint64_t> offsets;
  std::uint64_t data_size = 0;
  for (const TensorInfo& t : tensors_) {
    offsets.push_back(data_size);
    put_string(&header, t.name);
    put<std::uint32_t>(&header, static_cast<std::uint32_t>(t.dims.size()));
    for (std::uint64_t d : t.dims) put<std::uint64_t>(&header, d);
    put<std::uint32_t>(&header, static_cast<std::uint32_t>(t.type));
    put<std::uint64_t>(&header, data_size);
    data_size = align_up(data_size + t.n_bytes, alignment);
  }
  const std::uint64_t data_start = align_up(header.size(), alignment);
  const std::uint64_t file_size = data_start + data_size;

  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(tmp, "cannot create");
  FdCloser closer(fd);
  auto abandon = [&](Status st) {
    ::unlink(tmp.c_str());
    return st;
  };

  if (file_size > 0) {
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(file_size));
    if (rc != 0) { errno = rc; return abandon(errno_status(tmp, "cannot reserve space")); }
  }
  for (std::uint64_t done = 0; done < header.size();) {
    ssize_t n = ::pwrite(fd, header.data() + done, header.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return abandon(errno_status(tmp, "cannot write header"));
    done += static_cast<std::uint64_t>(n);
  }

  const std::uint64_t page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const std::uint64_t begin = data_start + offsets[i];
    const std::uint64_t map_begin = begin / page * page;
    const std::uint64_t map_len = begin + tensors_[i].n_bytes - map_begin;
    void* map = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(map_begin));
    if (map == MAP_FAILED) return abandon(errno_status(tmp, "cannot map for writing"));
    std::span<std::uint8_t> out(static_cast<std::uint8_t*>(map) + (begin - map_begin), tensors_[i].n_bytes);
    Status st = fill(i, out);
    munmap(map, map_len);
    if (!st.is_ok()) return abandon(st);
  }

  if (::fsync(fd) != 0) return abandon(errno_status(tmp, "fsync"));
  if (::close(closer.release()) != 0) return abandon(errno_status(tmp, "close"));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return abandon(errno_status(path, "cannot rename into place"));
  return Status::ok();
}

}  // namespace kvstash::gguf
