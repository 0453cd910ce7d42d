// Tensor type names and block layouts, and the Value constructors.
#include <array>

#include "gguf/gguf.h"

namespace kvstash::gguf {
namespace {

struct TypeFacts {
  TensorType type;
  const char* name;
  std::size_t block_elems;  // 0: layout not known to this reader
  std::size_t block_bytes;
};

// Block layouts as ggml defines them (ggml-common.h block_* structs). The IQ and TQ types are
// listed with their sizes so that a file holding them opens and the model loader can refuse it
// naming the type; no kernel here runs them.
constexpr std::array<TypeFacts, 33> kTypes = {{
    {TensorType::kF32, "f32", 1, 4},
    {TensorType::kF16, "f16", 1, 2},
    {TensorType::kQ4_0, "q4_0", 32, 18},
    {TensorType::kQ4_1, "q4_1", 32, 20},
    {TensorType::kQ5_0, "q5_0", 32, 22},
    {TensorType::kQ5_1, "q5_1", 32, 24},
    {TensorType::kQ8_0, "q8_0", 32, 34},
    {TensorType::kQ8_1, "q8_1", 32, 36},
    {TensorType::kQ2_K, "q2_K", 256, 84},
    {TensorType::kQ3_K, "q3_K", 256, 110},
    {TensorType::kQ4_K, "q4_K", 256, 144},
    {TensorType::kQ5_K, "q5_K", 256, 176},
    {TensorType::kQ6_K, "q6_K", 256, 210},
    {TensorType::kQ8_K, "q8_K", 256, 292},
    {TensorType::kIQ2_XXS, "iq2_xxs", 256, 66},
    {TensorType::kIQ2_XS, "iq2_xs", 256, 74},
    {TensorType::kIQ3_XXS, "iq3_xxs", 256, 98},
    {TensorType::kIQ1_S, "iq1_s", 256, 50},
    {TensorType::kIQ4_NL, "iq4_nl", 32, 18},
    {TensorType::kIQ3_S, "iq3_s", 256, 110},
    {TensorType::kIQ2_S, "iq2_s", 256, 82},
    {TensorType::kIQ4_XS, "iq4_xs", 256, 136},
    {TensorType::kI8, "i8", 1, 1},
    {TensorType::kI16, "i16", 1, 2},
    {TensorType::kI32, "i32", 1, 4},
    {TensorType::kI64, "i64", 1, 8},
    {TensorType::kF64, "f64", 1, 8},
    {TensorType::kIQ1_M, "iq1_m", 256, 56},
    {TensorType::kBF16, "bf16", 1, 2},
    {TensorType::kTQ1_0, "tq1_0", 256, 54},
    {TensorType::kTQ2_0, "tq2_0", 256, 66},
    {TensorType::kMXFP4, "mxfp4", 32, 17},  // E8M0 scale + 16 bytes of E2M1 pairs (gpt-oss)
    {TensorType::kF32, nullptr, 0, 0},  // end marker, never matched (name null)
}};

const TypeFacts* facts_of(TensorType type) {
  for (const TypeFacts& f : kTypes) {
    if (f.name != nullptr && f.type == type) return &f;
  }
  return nullptr;
}

}  // namespace

std::string tensor_type_name(TensorType type) {
  const TypeFacts* f = facts_of(type);
  if (f == nullptr) return "type " + std::to_string(static_cast<std::uint32_t>(type));
  return f->name;
}

bool tensor_type_layout(TensorType type, std::size_t* block_elems, std::size_t* block_bytes) {
  const TypeFacts* f = facts_of(type);
  if (f == nullptr || f->block_elems == 0) return false;
  *block_elems = f->block_elems;
  *block_bytes = f->block_bytes;
  return true;
}

Value Value::u32(std::uint32_t v) { return Value{ValueType::kU32, std::uint64_t{v}}; }
Value Value::i32(std::int32_t v) { return Value{ValueType::kI32, std::int64_t{v}}; }
Value Value::u64(std::uint64_t v) { return Value{ValueType::kU64, v}; }
Value Value::f32(float v) { return Value{ValueType::kF32, static_cast<double>(v)}; }
Value Value::boolean(bool v) { return Value{ValueType::kBool, v}; }
Value Value::string(std::string v) { return Value{ValueType::kString, std::move(v)}; }

Value Value::string_array(std::vector<std::string> v) {
  Array a;
  a.elem_type = ValueType::kString;
  a.items.reserve(v.size());
  for (std::string& s : v) a.items.push_back(Value::string(std::move(s)));
  return Value{ValueType::kArray, std::move(a)};
}

Value Value::i32_array(std::vector<std::int32_t> v) {
  Array a;
  a.elem_type = ValueType::kI32;
  a.items.reserve(v.size());
  for (std::int32_t x : v) a.items.push_back(Value::i32(x));
  return Value{ValueType::kArray, std::move(a)};
}

Value Value::f32_array(std::vector<float> v) {
  Array a;
  a.elem_type = ValueType::kF32;
  a.items.reserve(v.size());
  for (float x : v) a.items.push_back(Value::f32(x));
  return Value{ValueType::kArray, std::move(a)};
}

}  // namespace kvstash::gguf

namespace kvstash::gguf {

bool operator==(const Array& a, const Array& b) {
  return a.elem_type == b.elem_type && a.items == b.items;
}

bool operator==(const Value& a, const Value& b) { return a.type == b.type && a.data == b.data; }

std::string value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "value type " + std::to_string(static_cast<std::uint32_t>(type));
}

std::string describe_value(const Value& value) {
  std::string out = value_type_name(value.type);
  if (const auto* u = std::get_if<std::uint64_t>(&value.data)) return out + " " + std::to_string(*u);
  if (const auto* i = std::get_if<std::int64_t>(&value.data)) return out + " " + std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value.data)) return out + " " + std::to_string(*d);
  if (const auto* b = std::get_if<bool>(&value.data)) return out + (*b ? " true" : " false");
  if (const auto* s = std::get_if<std::string>(&value.data)) {
    constexpr std::size_t kShown = 40;  // enough to recognise a value, short enough for one line
    return out + " \"" + s->substr(0, kShown) + (s->size() > kShown ? "...\"" : "\"");
  }
  const Array& a = std::get<Array>(value.data);
  return out + "<" + value_type_name(a.elem_type) + ">[" + std::to_string(a.items.size()) + "]";
}

}  // namespace kvstash::gguf
