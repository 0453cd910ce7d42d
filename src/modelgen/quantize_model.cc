#include "modelgen/quantize_model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kernels/kernels.h"

namespace kvstash::modelgen {
namespace {

constexpr std::uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION
constexpr std::size_t kRowsPerTask = 16;            // rows converted per pool task

// The kernels' name for a float source type; false for anything else.
bool float_weight_type(gguf::TensorType type, kernels::WeightType* out) {
  switch (type) {
    case gguf::TensorType::kF32: *out = kernels::WeightType::kF32; return true;
    case gguf::TensorType::kF16: *out = kernels::WeightType::kF16; return true;
    case gguf::TensorType::kBF16: *out = kernels::WeightType::kBF16; return true;
    default: return false;
  }
}

bool kernel_weight_type(gguf::TensorType type, kernels::WeightType* out) {
  for (kernels::WeightType w : kernels::kAllWeightTypes) {
    if (gguf::tensor_type_name(type) == kernels::weight_type_name(w)) {
      *out = w;
      return true;
    }
  }
  return false;
}

std::string dims_text(const std::vector<std::uint64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Converts `in` (a float type) to `out_type` row by row on the pool.
Status convert_tensor(const gguf::TensorInfo& in, gguf::TensorType out_type, std::span<std::uint8_t> out,
                      ThreadPool& pool) {
  kernels::WeightType src, dst;
  if (!float_weight_type(in.type, &src)) {
    return unsupported("tensor '" + in.name + "' is " + gguf::tensor_type_name(in.type) +
                       "; quantize converts f32, f16 or bf16 weights only");
  }
  if (!kernel_weight_type(out_type, &dst)) {
    return internal_error("tensor '" + in.name + "': no encoder for " + gguf::tensor_type_name(out_type));
  }
  const auto cols = static_cast<std::int64_t>(in.dims[0]);
  const auto rows = static_cast<std::int64_t>(in.n_elements / in.dims[0]);
  const kernels::WeightView view{src, in.data, rows, cols, kernels::row_bytes_for(src, cols)};
  const std::size_t out_row = kernels::row_bytes_for(dst, cols);
  if (out_row * static_cast<std::size_t>(rows) != out.size()) {
    return internal_error("tensor '" + in.name + "': output size mismatch");
  }
  pool.parallel_for(static_cast<std::size_t>(rows), kRowsPerTask, [&](std::size_t lo, std::size_t hi) {
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::size_t r = lo; r < hi; ++r) {
      kernels::dequantize_rows(view, static_cast<std::int64_t>(r), static_cast<std::int64_t>(r) + 1, row.data());
      kernels::quantize_row(dst, row.data(), cols, out.data() + r * out_row);
    }
  });
  return Status::ok();
}

}  // namespace

ModelShapeForQuant quant_shape_of(const gguf::File& file) {
  ModelShapeForQuant shape;
  shape.has_output = file.find_tensor("output.weight") != nullptr;
  if (auto arch = file.get_string("general.architecture")) {
    auto layers = file.get_uint(*arch + ".block_count");
    auto heads = file.get_uint(*arch + ".attention.head_count");
    auto kv_heads = file.get_uint(*arch + ".attention.head_count_kv");
    if (layers) shape.n_layers = static_cast<int>(*layers);
    if (heads && kv_heads && *kv_heads > 0) shape.n_gqa = static_cast<int>(*heads / *kv_heads);
    if (auto experts = file.get_uint(*arch + ".expert_count")) shape.n_experts = static_cast<int>(*experts);
  }
  return shape;
}

Expected<QuantizeSummary> quantize_model(const QuantizeOptions& options, ThreadPool& pool) {
  const QuantScheme* scheme = find_quant_scheme(options.scheme);
  if (scheme == nullptr) return invalid_argument("unknown quantization type '" + options.scheme + "'");
  std::error_code ec;
  if (std::filesystem::equivalent(options.in_path, options.out_path, ec)) {
    return invalid_argument("input and output are the same file");
  }
  auto file = gguf::File::open(options.in_path);
  if (!file) return file.status();
  const gguf::File& in = **file;
  const ModelShapeForQuant shape = quant_shape_of(in);

  gguf::Writer writer;
  for (const auto& [key, value] : in.metadata()) writer.set(key, value);
  writer.set("general.file_type", gguf::Value::u32(scheme->file_type));
  if (is_quantized_scheme(*scheme)) writer.set("general.quantization_version", gguf::Value::u32(kQuantizationVersion));
  std::vector<gguf::TensorType> types;
  for (const gguf::TensorInfo& t : in.tensors()) {
    types.push_back(choose_tensor_type(*scheme, t.name, t.dims, t.type, shape));
    KVSTASH_RETURN_IF_ERROR(writer.add_tensor(t.name, types.back(), t.dims));
  }
  QuantizeSummary summary;
  const std::size_t n = in.tensors().size();
  Status st = writer.write(options.out_path, [&](std::size_t i, std::span<std::uint8_t> out) -> Status {
    const gguf::TensorInfo& t = in.tensors()[i];
    summary.bytes_in += t.n_bytes;
    summary.bytes_out += out.size();
    if (options.progress) {
      char line[256];
      std::snprintf(line, sizeof(line), "[%4zu/%zu] %-32s %5s -> %-5s %s", i + 1, n, t.name.c_str(),
                    gguf::tensor_type_name(t.type).c_str(), gguf::tensor_type_name(types[i]).c_str(),
                    dims_text(t.dims).c_str());
      options.progress(line);
    }
    if (types[i] == t.type) {
      std::memcpy(out.data(), t.data, out.size());
      ++summary.tensors_copied;
      return Status::ok();
    }
    ++summary.tensors_converted;
    return convert_tensor(t, types[i], out, pool);
  });
  if (!st.is_ok()) return st;
  return summary;
}

}  // namespace kvstash::modelgen
