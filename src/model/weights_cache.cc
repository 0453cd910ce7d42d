#include "model/weights_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace kvstash {
namespace {

// Format version 1 (docs/startup.md, "The prepared-weights file"). Numbers are little-endian (the
// kernels are x86 only).
constexpr char kMagic[8] = {'K', 'V', 'S', 'W', 'C', 'v', '1', 0};
constexpr std::size_t kFixedBytes = 96;      // the header up to the matrix table
constexpr std::size_t kMatrixBytes = 40;     // one matrix table entry
constexpr std::size_t kPayloadAlign = 4096;  // the payload starts on a page
// Checksummed and read as one unit: big enough that a read is sequential, small enough that
// several readers share the work of a 0.5-10 GB model.
constexpr std::uint64_t kChunkBytes = std::uint64_t{16} << 20;
// A header claiming more matrices than this is damaged (a MoE model of 128 experts x 48 layers has ~20k).
constexpr std::uint32_t kMaxMatrices = 1u << 20;
constexpr std::size_t kSimdBytes = 16;

template <typename T>
void put(std::vector<std::uint8_t>& out, std::size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::uint64_t chunk_count(std::uint64_t payload_bytes) { return (payload_bytes + kChunkBytes - 1) / kChunkBytes; }

std::size_t header_bytes(std::uint32_t n_matrices, std::uint64_t payload_bytes) {
  return kFixedBytes + n_matrices * kMatrixBytes + chunk_count(payload_bytes) * 8 + 8;
}

std::uint64_t payload_offset(std::size_t header) { return (header + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign; }

std::string errno_text() { return std::strerror(errno); }

// Reads n bytes at `at` (short reads retried); false at end of file or on error.
bool read_at(int fd, void* dst, std::size_t n, std::uint64_t at) {
  auto* p = static_cast<std::uint8_t*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, at += static_cast<std::uint64_t>(got), n -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* src, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  while (n > 0) {
    const ssize_t put_n = ::write(fd, p, n);
    if (put_n < 0 && errno == EINTR) continue;
    if (put_n <= 0) return false;
    p += put_n, n -= static_cast<std::size_t>(put_n);
  }
  return true;
}

// Reads [p, p + n) of a file mapping into the page cache and maps it, as a read would; false with
// errno on an I/O error. Where the kernel lacks MADV_POPULATE_READ (before Linux 5.14) the caller's
// read of the bytes faults them in.
bool populate(std::uint8_t* p, std::uint64_t n) {
#ifdef MADV_POPULATE_READ
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(p) / page * page;
  errno = 0;
  if (::madvise(reinterpret_cast<void*>(begin), reinterpret_cast<std::uintptr_t>(p) + n - begin, MADV_POPULATE_READ) != 0) {
    return errno == EINVAL;  // not supported: touched by the checksum instead
  }
#else
  (void)p, (void)n;
#endif
  return true;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::filesystem::path default_weights_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "kvstash" / "weights";
  if (home && *home) return std::filesystem::path(home) / ".cache" / "kvstash" / "weights";
  return {};
}

std::filesystem::path weights_cache_file(const std::filesystem::path& dir, const WeightsCacheKey& key) {
  return dir / (to_hex(key.fingerprint) + "-l" + std::to_string(key.layout_version) + "-" + key.simd_path + ".kvw");
}

Expected<PreparedWeights> load_prepared_weights(const std::filesystem::path& dir, const WeightsCacheKey& key,
                                                int readers) {
  const std::string path = weights_cache_file(dir, key).string();
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    if (errno == ENOENT) return not_found(path + ": no prepared weights yet");
    return io_error(path + ": " + errno_text());
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return io_error(path + ": " + errno_text());
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  auto truncated = [&](const std::string& what) {
    return corrupt(path + ": truncated (" + std::to_string(file_size) + " bytes, " + what + ")");
  };
  std::vector<std::uint8_t> header(kFixedBytes);
  if (file_size < kFixedBytes || !read_at(f.fd, header.data(), kFixedBytes, 0)) return truncated("no whole header");
  if (std::memcmp(header.data(), kMagic, sizeof kMagic) != 0) {
    return corrupt(path + ": damaged (not a version-1 prepared-weights file)");
  }
  const auto n_matrices = get<std::uint32_t>(&header[12]);
  const auto payload_bytes = get<std::uint64_t>(&header[64]);
  if (n_matrices > kMaxMatrices || get<std::uint64_t>(&header[72]) != kChunkBytes) {
    return corrupt(path + ": damaged (implausible header)");
  }
  // Checked before the header is read whole: the chunk table grows with the payload.
  if (payload_bytes > file_size) return truncated("the payload alone needs " + std::to_string(payload_bytes));
  const std::size_t full_header = header_bytes(n_matrices, payload_bytes);
  header.resize(full_header);
  if (file_size < full_header || !read_at(f.fd, header.data() + kFixedBytes, full_header - kFixedBytes, kFixedBytes)) {
    return truncated("no whole header");
  }
  if (XXH3_64bits(header.data(), full_header - 8) != get<std::uint64_t>(&header[full_header - 8])) {
    return corrupt(path + ": damaged (header checksum mismatch)");
  }
  const auto layout = get<std::uint32_t>(&header[8]);
  const std::string simd(reinterpret_cast<const char*>(&header[16]),
                         strnlen(reinterpret_cast<const char*>(&header[16]), kSimdBytes));
  Digest fingerprint;
  std::memcpy(fingerprint.data(), &header[32], 32);
  if (fingerprint != key.fingerprint) return corrupt(path + ": stale (made for model " + to_hex(fingerprint) + ")");
  if (layout != key.layout_version) {
    return corrupt(path + ": stale (kernel layout version " + std::to_string(layout) + ", this build uses " +
                   std::to_string(key.layout_version) + ")");
  }
  if (simd != key.simd_path) {
    return corrupt(path + ": stale (made for the " + simd + " kernels, this process runs " + key.simd_path + ")");
  }
  const std::uint64_t offset = get<std::uint64_t>(&header[80]);
  if (offset != payload_offset(full_header)) return corrupt(path + ": damaged (payload offset)");
  if (file_size < offset + payload_bytes) return truncated("the payload needs " + std::to_string(offset + payload_bytes));
  if (file_size > offset + payload_bytes) return corrupt(path + ": damaged (bytes after the payload)");

  PreparedWeights out;
  out.matrices.resize(n_matrices);
  for (std::uint32_t i = 0; i < n_matrices; ++i) {
    const std::uint8_t* e = &header[kFixedBytes + i * kMatrixBytes];
    PreparedMatrix& m = out.matrices[i];
    m.type = get<std::uint32_t>(e);
    m.rows = get<std::int64_t>(e + 8);
    m.cols = get<std::int64_t>(e + 16);
    m.row_bytes = get<std::uint64_t>(e + 24);
    m.offset = get<std::uint64_t>(e + 32);
    if (m.offset > payload_bytes) return corrupt(path + ": damaged (a matrix starts past the payload)");
  }
  out.payload_bytes = payload_bytes;
  // Mapped where the kernel maps the file with huge pages, else read into huge-page memory:
  // either way the kernels read the weights from 2 MiB pages.
  out.memory = HugePageBuffer::map_file(f.fd, static_cast<std::size_t>(file_size), static_cast<std::size_t>(offset));
  out.mapped = out.memory.data() != nullptr;
  // Readers take chunks in turn; each brings its chunk in and checks its checksum. From the
  // mapping: MADV_POPULATE_READ reads what the page cache lacks and maps it (an I/O error is an
  // error return there, not a SIGBUS later); eight readers keep enough reads in flight for the
  // disk. Into memory: pread through the page cache.
  const std::uint64_t n_chunks = chunk_count(payload_bytes);
  const std::uint8_t* sums = &header[kFixedBytes + n_matrices * kMatrixBytes];
  auto check_all = [&](bool from_mapping) -> Status {
    std::atomic<std::uint64_t> next{0};
    std::atomic<std::int64_t> bad_chunk{-1};
    std::atomic<int> read_errno{0};
    auto reader = [&] {
      for (std::uint64_t c = next++; c < n_chunks && bad_chunk.load() < 0 && read_errno.load() == 0; c = next++) {
        const std::uint64_t at = c * kChunkBytes, n = std::min(kChunkBytes, payload_bytes - at);
        std::uint8_t* dst = out.memory.data() + at;
        if (from_mapping) {
          if (!populate(dst, n)) read_errno = errno != 0 ? errno : EIO;
        } else if (!read_at(f.fd, dst, n, offset + at)) {
          read_errno = errno != 0 ? errno : EIO;
        }
        if (read_errno.load() == 0 && XXH3_64bits(dst, n) != get<std::uint64_t>(sums + c * 8)) {
          bad_chunk = static_cast<std::int64_t>(c);
        }
      }
    };
    std::vector<std::thread> threads;
    for (int r = 1; r < std::clamp<int>(readers, 1, 64) && static_cast<std::uint64_t>(r) < n_chunks; ++r) {
      threads.emplace_back(reader);
    }
    reader();
    for (std::thread& t : threads) t.join();
    if (read_errno.load() != 0) return io_error(path + ": read failed: " + std::strerror(read_errno.load()));
    if (bad_chunk >= 0) {
      return corrupt(path + ": damaged (checksum mismatch in payload bytes " +
                     std::to_string(static_cast<std::uint64_t>(bad_chunk.load()) * kChunkBytes) + "..)");
    }
    return Status::ok();
  };
  if (out.mapped) {
    KVSTASH_RETURN_IF_ERROR(check_all(true));
    // The kernel maps a file with huge pages only from 2 MiB folios in its page cache (a file
    // system with large folios; pages read, not just written). Where it did not, the weights are
    // copied into huge-page memory: decode on 4 KiB pages is the slow --mmap-weights case.
    const long long huge = out.memory.huge_bytes();
    if (huge >= 0 && static_cast<double>(huge) >= 0.9 * static_cast<double>(payload_bytes)) return out;
    HugePageBuffer copy = HugePageBuffer::allocate(payload_bytes);
    if (copy.data() == nullptr) return out;  // the mapping is still right, only slower
    std::memcpy(copy.data(), out.memory.data(), payload_bytes);
    out.memory = std::move(copy);
    out.mapped = false;
    out.mapped_huge_bytes = huge;
    return out;
  }
  out.memory = HugePageBuffer::allocate(payload_bytes);
  if (payload_bytes > 0 && out.memory.data() == nullptr) {
    return io_error(path + ": cannot map " + std::to_string(payload_bytes) + " bytes for the weights");
  }
  KVSTASH_RETURN_IF_ERROR(check_all(false));
  return out;
}

Status store_prepared_weights(const std::filesystem::path& dir, const WeightsCacheKey& key,
                              std::span<const PreparedMatrix> matrices, std::span<const std::uint8_t> payload) {
  const std::filesystem::path path = weights_cache_file(dir, key);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir.string() + ": " + ec.message());
  if (matrices.size() > kMaxMatrices || key.simd_path.size() >= kSimdBytes) {
    return invalid_argument(path.string() + ": too many matrices or a SIMD path name too long");
  }
  const auto n_matrices = static_cast<std::uint32_t>(matrices.size());
  const std::size_t full_header = header_bytes(n_matrices, payload.size());
  const std::uint64_t offset = payload_offset(full_header);
  std::vector<std::uint8_t> header(offset, 0);
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put<std::uint32_t>(header, 8, key.layout_version);
  put<std::uint32_t>(header, 12, n_matrices);
  std::memcpy(&header[16], key.simd_path.data(), key.simd_path.size());
  std::memcpy(&header[32], key.fingerprint.data(), 32);
  put<std::uint64_t>(header, 64, payload.size());
  put<std::uint64_t>(header, 72, kChunkBytes);
  put<std::uint64_t>(header, 80, offset);
  for (std::uint32_t i = 0; i < n_matrices; ++i) {
    const std::size_t e = kFixedBytes + i * kMatrixBytes;
    put<std::uint32_t>(header, e, matrices[i].type);
    put<std::int64_t>(header, e + 8, matrices[i].rows);
    put<std::int64_t>(header, e + 16, matrices[i].cols);
    put<std::uint64_t>(header, e + 24, matrices[i].row_bytes);
    put<std::uint64_t>(header, e + 32, matrices[i].offset);
  }
  const std::size_t sums = kFixedBytes + n_matrices * kMatrixBytes;
  for (std::uint64_t c = 0; c < chunk_count(payload.size()); ++c) {
    const std::uint64_t at = c * kChunkBytes, n = std::min<std::uint64_t>(kChunkBytes, payload.size() - at);
    put<std::uint64_t>(header, sums + c * 8, XXH3_64bits(payload.data() + at, n));
  }
  put<std::uint64_t>(header, full_header - 8, XXH3_64bits(header.data(), full_header - 8));

  // A name no other writer uses: process id and a per-process counter.
  static std::atomic<unsigned> counter{0};
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (f.fd < 0) return io_error(tmp.string() + ": " + errno_text());
  // Flushed before the rename, so a crash leaves either no file or a whole one under the name.
  const bool written = write_all(f.fd, header.data(), header.size()) &&
                       write_all(f.fd, payload.data(), payload.size()) && ::fdatasync(f.fd) == 0;
  // The written pages leave the page cache: pages that came in by writes are small folios, which
  // the kernel cannot map as huge pages (load_prepared_weights would copy them); read back by the
  // next start, they come in as 2 MiB folios it maps whole.
  if (written) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  if (!written) {
    const std::string why = errno_text();
    std::filesystem::remove(tmp, ec);
    return io_error(tmp.string() + ": " + why);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return io_error(path.string() + ": " + ec.message());
  }
  return Status::ok();
}

}  // namespace kvstash
