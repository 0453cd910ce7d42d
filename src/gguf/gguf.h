// Reading and writing GGUF v3 files (the llama.cpp model format).
//
// File::open maps a file read-only and validates all of its structure up front (header, every
// key/value, every tensor's type, shape and byte range), so that a File that opened successfully
// can be used without further checks. Tensor data is used in place from the mapping.
//
// Layout facts (GGUF v3, little-endian): magic "GGUF", u32 version, u64 tensor_count,
// u64 kv_count, then kv pairs (string key, u32 value type, value), then tensor infos (string name,
// u32 n_dims, u64 dims[n_dims] with dims[0] the contiguous one, u32 ggml type, u64 offset relative
// to the data section), then padding to `general.alignment` (default 32) and the data section.
//
// Thread safety: a File is immutable after open(); any number of threads may read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::gguf {

enum class ValueType : std::uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// ggml tensor types, numbered as in ggml. Only some have known block sizes here; a file whose
// tensor has a type this reader does not know is refused with its number.
enum class TensorType : std::uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22,
  kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
};

// "f32", "f16", "q8_0", "bf16", "q4_K", ...; "type 99" for a number ggml does not define.
std::string tensor_type_name(TensorType type);
// Elements per block and bytes per block (f32: 1/4, f16: 1/2, q8_0: 32/34, ...).
// Returns false for a type whose layout is unknown.
bool tensor_type_layout(TensorType type, std::size_t* block_elems, std::size_t* block_bytes);

struct Value;
struct Array {
  ValueType elem_type = ValueType::kU8;
  std::vector<Value> items;
};

// A metadata value, keeping its exact GGUF type so that it can be written back unchanged.
struct Value {
  ValueType type = ValueType::kU8;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, Array> data;

  static Value u32(std::uint32_t v);
  static Value i32(std::int32_t v);
  static Value u64(std::uint64_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value string_array(std::vector<std::string> v);
  static Value i32_array(std::vector<std::int32_t> v);
  static Value f32_array(std::vector<float> v);
};

// Deep, exact equality (same types at every level, same values).
bool operator==(const Array& a, const Array& b);
bool operator==(const Value& a, const Value& b);
// "u32", "string", "array", ...; "value type 42" for a number GGUF does not define.
std::string value_type_name(ValueType type);
// "u32 7", "string \"gpt2\"", "array<string>[151936]": a short, human description for errors and logs.
std::string describe_value(const Value& value);

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  std::vector<std::uint64_t> dims;  // dims[0] is contiguous (a matrix's row length)
  std::uint64_t offset = 0;         // relative to the data section
  std::uint64_t n_elements = 0;
  std::uint64_t n_bytes = 0;
  const std::uint8_t* data = nullptr;  // into the mapping (reader) or nullptr (writer)
};

class File {
 public:
  // Opens and validates `path`. Errors name the file and the problem: kIoError (cannot open or
  // map), kCorrupt (bad magic, truncated, out-of-bounds tensor, overlapping or misaligned data,
  // absurd counts), kUnsupported (GGUF version other than 2 or 3, unknown tensor type).
  static Expected<std::unique_ptr<File>> open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;  // nullptr when absent

  // Typed getters: kNotFound when absent, kInvalidArgument when the type does not fit
  // (integers of any width convert when the value fits; f32/f64 both read as double).
  Expected<std::string> get_string(std::string_view key) const;
  Expected<std::uint64_t> get_uint(std::string_view key) const;
  Expected<std::int64_t> get_int(std::string_view key) const;
  Expected<double> get_float(std::string_view key) const;
  Expected<bool> get_bool(std::string_view key) const;
  Expected<std::vector<std::string>> get_string_array(std::string_view key) const;
  Expected<std::vector<std::int64_t>> get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent

  // The data section's bytes: [data_begin, data_begin + data_size).
  const std::uint8_t* data_begin() const { return data_begin_; }
  std::uint64_t data_size() const { return data_size_; }

 private:
  File() = default;
  Status parse();  // fills everything below from the mapping; errors without the path prefix
  Status check_tensor_ranges(std::uint64_t alignment);
  std::string path_;
  std::uint32_t version_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, std::size_t, std::less<>> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  const std::uint8_t* data_begin_ = nullptr;
  std::uint64_t data_size_ = 0;
};

// Writes a GGUF v3 file. Tensors are declared first and their bytes produced one at a time while
// writing, so a multi-GB model never sits in memory whole.
class Writer {
 public:
  void set(std::string key, Value value);  // replaces an existing key, keeps insertion order
  // Declares a tensor; dims[0] contiguous. Its byte size follows from type and dims.
  Status add_tensor(std::string name, TensorType type, std::vector<std::uint64_t> dims);

  // fill(i, out) writes tensor i's bytes (out.size() == its n_bytes). Writes to a temporary name
  // beside `path` and renames it into place, so a failed write never leaves a partial file.
  using FillFn = std::function<Status(std::size_t tensor_index, std::span<std::uint8_t> out)>;
  Status write(const std::string& path, const FillFn& fill) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace kvstash::gguf
