// File::open: maps a GGUF file and validates every byte of its structure before anyone uses it.
//
// Every read goes through Cursor, which checks it against the file size; every count read from the
// file is checked against the bytes that remain before anything is allocated for it, and the
// metadata arrays' elements together against a budget in proportion to the file (a one-byte u8
// element costs a whole in-memory Value), so a damaged or hostile file costs a bounded multiple of
// its own size in memory and never reads past the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>

#include "gguf/gguf.h"

namespace kvstash::gguf {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::uint32_t kDefaultAlignment = 32;
constexpr std::uint32_t kMaxDims = 4;       // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;           // nesting beyond this is refused, bounding recursion
// Metadata array elements, all arrays together, may take at most this many times the file's size
// in memory (sizeof(Value) per element). Real files stay far below it: the 7.8 MB Llama 3
// vocabulary (128k tokens, 280k merges, 128k token types) needs about 4x; a whole model, far less.
constexpr std::uint64_t kMaxMetadataMemoryPerFileByte = 16;

// Bounds-checked little-endian reads over the mapping. The first failure sticks in `error`.
class Cursor {
 public:
  Cursor(const std::uint8_t* data, std::uint64_t size)
      : data_(data), size_(size), array_elements_left(size * kMaxMetadataMemoryPerFileByte / sizeof(Value) + 1024) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T* out, const char* what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  bool read_string(std::string* out, const char* what) {
    std::uint64_t len = 0;
    if (!read(&len, what)) return false;
    if (len > remaining()) {
      error = std::string(what) + ": string length " + std::to_string(len) + " at offset " +
              std::to_string(pos_ - 8) + " exceeds the " + std::to_string(remaining()) +
              " bytes left in the file";
      return false;
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return true;
  }

  bool truncated(const char* what, std::uint64_t need) {
    error = std::string("truncated: ") + what + " needs " + std::to_string(need) + " bytes at offset " +
            std::to_string(pos_) + " but the file has " + std::to_string(size_);
    return false;
  }

  std::string error;
  std::uint64_t array_elements_left;  // the budget above, in elements

 private:
  const std::uint8_t* data_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
};

bool known_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(ValueType::kF64); }

// The fewest bytes one value of `type` occupies; used to bound counts before allocating.
std::uint64_t min_value_bytes(ValueType type) {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: return 8;   // the length
    case ValueType::kArray: return 12;   // element type + count
  }
  return 1;
}

template <typename T>
bool read_scalar(Cursor& c, const char* what, T* out) { return c.read(out, what); }

bool read_value(Cursor& c, ValueType type, int depth, Value* out);

bool read_array(Cursor& c, int depth, Array* out) {
  if (depth >= kMaxArrayDepth) {
    c.error = "arrays nested deeper than " + std::to_string(kMaxArrayDepth);
    return false;
  }
  std::uint32_t elem = 0;
  std::uint64_t count = 0;
  if (!c.read(&elem, "array element type") || !c.read(&count, "array count")) return false;
  if (!known_value_type(elem)) {
    c.error = "array element type " + std::to_string(elem) + " is not a GGUF value type";
    return false;
  }
  out->elem_type = static_cast<ValueType>(elem);
  std::uint64_t min_bytes = min_value_bytes(out->elem_type);
  if (count > c.remaining() / min_bytes) {
    c.error = "array count " + std::to_string(count) + " of " + value_type_name(out->elem_type) +
              " at offset " + std::to_string(c.pos() - 8) + " cannot fit in the " +
              std::to_string(c.remaining()) + " bytes left in the file";
    return false;
  }
  if (count > c.array_elements_left) {
    c.error = "metadata arrays hold too many elements for a file of this size: an array of " + std::to_string(count) + " " +
              value_type_name(out->elem_type) + " at offset " + std::to_string(c.pos() - 8) + " would take " +
              std::to_string(count * sizeof(Value) >> 20) + " MiB in memory (limit " +
              std::to_string(kMaxMetadataMemoryPerFileByte) + "x the file size for all arrays)";
    return false;
  }
  c.array_elements_left -= count;
  out->items.resize(count);
  for (Value& item : out->items) {
    if (!read_value(c, out->elem_type, depth + 1, &item)) return false;
  }
  return true;
}

bool read_value(Cursor& c, ValueType type, int depth, Value* out) {
  out->type = type;
  switch (type) {
    case ValueType::kU8: { std::uint8_t v = 0; if (!c.read(&v, "u8 value")) return false; out->data = std::uint64_t{v}; return true; }
    case ValueType::kU16: { std::uint16_t v = 0; if (!c.read(&v, "u16 value")) return false; out->data = std::uint64_t{v}; return true; }
    case ValueType::kU32: { std::uint32_t v = 0; if (!c.read(&v, "u32 value")) return false; out->data = std::uint64_t{v}; return true; }
    case ValueType::kU64: { std::uint64_t v = 0; if (!c.read(&v, "u64 value")) return false; out->data = v; return true; }
    case ValueType::kI8: { std::int8_t v = 0; if (!c.read(&v, "i8 value")) return false; out->data = std::int64_t{v}; return true; }
    case ValueType::kI16: { std::int16_t v = 0; if (!c.read(&v, "i16 value")) return false; out->data = std::int64_t{v}; return true; }
    case ValueType::kI32: { std::int32_t v = 0; if (!c.read(&v, "i32 value")) return false; out->data = std::int64_t{v}; return true; }
    case ValueType::kI64: { std::int64_t v = 0; if (!c.read(&v, "i64 value")) return false; out->data = v; return true; }
    case ValueType::kF32: { float v = 0; if (!c.read(&v, "f32 value")) return false; out->data = static_cast<double>(v); return true; }
    case ValueType::kF64: { double v = 0; if (!c.read(&v, "f64 value")) return false; out->data = v; return true; }
    case ValueType::kBool: {
      std::uint8_t v = 0;
      if (!c.read(&v, "bool value")) return false;
      if (v > 1) {
        c.error = "bool value " + std::to_string(v) + " at offset " + std::to_string(c.pos() - 1) + " is neither 0 nor 1";
        return false;
      }
      out->data = v == 1;
      return true;
    }
    case ValueType::kString: {
      std::string s;
      if (!c.read_string(&s, "string value")) return false;
      out->data = std::move(s);
      return true;
    }
    case ValueType::kArray: {
      Array a;
      if (!read_array(c, depth, &a)) return false;
      out->data = std::move(a);
      return true;
    }
  }
  c.error = "value type " + std::to_string(static_cast<std::uint32_t>(type)) + " is not a GGUF value type";
  return false;
}

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

Status read_tensor_info(Cursor& c, TensorInfo* t) {
  auto bad = [&](const std::string& what) { return corrupt("tensor '" + t->name + "': " + what); };
  std::uint32_t n_dims = 0;
  if (!c.read(&n_dims, "tensor dimension count")) return bad(c.error);
  if (n_dims == 0 || n_dims > kMaxDims) {
    return bad(std::to_string(n_dims) + " dimensions (must be 1 to " + std::to_string(kMaxDims) + ")");
  }
  t->dims.resize(n_dims);
  std::uint64_t n = 1;
  for (std::uint32_t d = 0; d < n_dims; ++d) {
    if (!c.read(&t->dims[d], "tensor dimension")) return bad(c.error);
    if (t->dims[d] == 0) return bad("dimension " + std::to_string(d) + " is zero");
    if (n > std::numeric_limits<std::uint64_t>::max() / t->dims[d]) return bad("element count overflows 64 bits");
    n *= t->dims[d];
  }
  t->n_elements = n;
  std::uint32_t type = 0;
  if (!c.read(&type, "tensor type")) return bad(c.error);
  t->type = static_cast<TensorType>(type);
  std::size_t block_elems = 0, block_bytes = 0;
  if (!tensor_type_layout(t->type, &block_elems, &block_bytes)) {
    return unsupported("tensor '" + t->name + "': tensor type " + tensor_type_name(t->type) + " (" +
                       std::to_string(type) + ") has no known block layout");
  }
  if (t->dims[0] % block_elems != 0) {
    return bad("row length " + std::to_string(t->dims[0]) + " is not a multiple of " + tensor_type_name(t->type) +
               "'s block of " + std::to_string(block_elems));
  }
  std::uint64_t blocks = n / block_elems;
  if (blocks > std::numeric_limits<std::uint64_t>::max() / block_bytes) return bad("byte size overflows 64 bits");
  t->n_bytes = blocks * block_bytes;
  if (!c.read(&t->offset, "tensor offset")) return bad(c.error);
  return Status::ok();
}

}  // namespace

File::~File() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

Expected<std::unique_ptr<File>> File::open(const std::string& path) {
  std::unique_ptr<File> file(new File());
  file->path_ = path;
  auto fail = [&](StatusCode code, const std::string& what) { return Status(code, path + ": " + what); };

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return fail(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return fail(StatusCode::kIoError, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(StatusCode::kIoError, "not a regular file");
  }
  std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return fail(StatusCode::kCorrupt, "truncated: the file is empty");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return fail(StatusCode::kIoError, std::string("cannot mmap: ") + std::strerror(map_err));
  file->map_ = map;
  file->map_size_ = size;
  Status st_parse;
  try {
    st_parse = file->parse();
  } catch (const std::bad_alloc&) {  // the budget above should make this unreachable; never let it escape
    st_parse = resource_exhausted("out of memory while reading the metadata");
  }
  if (!st_parse.is_ok()) return Status(st_parse.code(), path + ": " + st_parse.message());
  return file;
}

Status File::parse() {
  const auto* bytes = static_cast<const std::uint8_t*>(map_);
  const std::uint64_t size = map_size_;
  Cursor c(bytes, size);

  std::uint32_t magic = 0;
  if (!c.read(&magic, "magic")) return corrupt(c.error);
  if (magic != kMagic) {
    char shown[5] = {};
    std::memcpy(shown, &magic, 4);
    for (char& ch : shown) if (ch != 0 && (ch < 32 || ch > 126)) ch = '?';
    return corrupt(std::string("bad magic \"") + shown + "\" (not a GGUF file)");
  }
  if (!c.read(&version_, "version")) return corrupt(c.error);
  if (version_ != 2 && version_ != 3) {
    return unsupported("GGUF version " + std::to_string(version_) + " (this reader handles 2 and 3)");
  }
  std::uint64_t n_tensors = 0, n_kv = 0;
  if (!c.read(&n_tensors, "tensor count") || !c.read(&n_kv, "metadata count")) return corrupt(c.error);
  // A kv pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8 + 4 + 4 + 8.
  if (n_kv > c.remaining() / 13) {
    return corrupt("metadata count " + std::to_string(n_kv) + " cannot fit in a file of " + std::to_string(size) + " bytes");
  }
  if (n_tensors > c.remaining() / 24) {
    return corrupt("tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " + std::to_string(size) + " bytes");
  }

  metadata_.reserve(n_kv);
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    if (!c.read_string(&key, "metadata key")) return corrupt("metadata entry " + std::to_string(i) + ": " + c.error);
    std::uint32_t type = 0;
    if (!c.read(&type, "value type")) return corrupt("key '" + key + "': " + c.error);
    if (!known_value_type(type)) return corrupt("key '" + key + "': value type " + std::to_string(type) + " is not a GGUF value type");
    Value value;
    if (!read_value(c, static_cast<ValueType>(type), 0, &value)) return corrupt("key '" + key + "': " + c.error);
    if (metadata_index_.count(key) != 0) return corrupt("duplicate key '" + key + "'");
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  std::uint64_t alignment = kDefaultAlignment;
  if (const Value* a = find("general.alignment")) {
    const auto* v = std::get_if<std::uint64_t>(&a->data);
    if (a->type != ValueType::kU32 || v == nullptr) return corrupt("general.alignment is " + describe_value(*a) + ", not a u32");
    if (*v == 0 || (*v & (*v - 1)) != 0) return corrupt("general.alignment " + std::to_string(*v) + " is not a power of two");
    alignment = *v;
  }

  tensors_.reserve(n_tensors);
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    if (!c.read_string(&t.name, "tensor name")) return corrupt("tensor info " + std::to_string(i) + ": " + c.error);
    Status st = read_tensor_info(c, &t);
    if (!st.is_ok()) return st;
    if (tensor_index_.count(t.name) != 0) return corrupt("duplicate tensor name '" + t.name + "'");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  std::uint64_t data_start = align_up(c.pos(), alignment);
  if (data_start > size) {
    if (!tensors_.empty()) {
      return corrupt("truncated: the data section would start at offset " + std::to_string(data_start) +
                     " but the file has " + std::to_string(size) + " bytes");
    }
    data_start = size;  // a metadata-only file may omit the final padding
  }
  data_begin_ = bytes + data_start;
  data_size_ = size - data_start;
  return check_tensor_ranges(alignment);
}

Status File::check_tensor_ranges(std::uint64_t alignment) {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (TensorInfo& t : tensors_) {
    std::string range = "data [offset " + std::to_string(t.offset) + ", " + std::to_string(t.n_bytes) + " bytes]";
    if (t.offset % alignment != 0) {
      return corrupt("tensor '" + t.name + "' " + range + " is not aligned to " + std::to_string(alignment));
    }
    if (t.offset > data_size_ || t.n_bytes > data_size_ - t.offset) {
      return corrupt("tensor '" + t.name + "' " + range + " ends past the end of the file (size " +
                     std::to_string(map_size_) + ", data section " + std::to_string(data_size_) + " bytes)");
    }
    t.data = data_begin_ + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo* prev = by_offset[i - 1];
    if (prev->offset + prev->n_bytes > by_offset[i]->offset) {
      return corrupt("tensors '" + prev->name + "' and '" + by_offset[i]->name + "' overlap");
    }
  }
  return Status::ok();
}

const Value* File::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvstash::gguf
