// Converts a GGUF model (f32, f16 or bf16 weights) to a quantization scheme (quant_recipe.h):
// what `kvstash quantize IN OUT TYPE` runs.
//
// Metadata is copied, with general.file_type set to the scheme's and general.quantization_version
// to 2 for quantized schemes. Each tensor gets choose_tensor_type()'s type; tensors that keep their
// type are copied byte for byte. Rows are converted in parallel on the given pool; the output is
// written atomically (gguf::Writer).
//
// Thread safety: reentrant; uses `pool` for the duration of the call.
#pragma once

#include <functional>
#include <string>

#include "common/thread_pool.h"
#include "kvstash/status.h"
#include "modelgen/quant_recipe.h"

namespace kvstash::modelgen {

struct QuantizeOptions {
  std::string in_path;
  std::string out_path;
  std::string scheme = "q4_k_m";  // a quant_scheme_names() entry
  // Called once per tensor as it is written: "[ 3/290] blk.0.attn_v.weight  f16 -> q6_K  [896, 128]".
  std::function<void(const std::string&)> progress;
};

struct QuantizeSummary {
  std::uint64_t bytes_in = 0;   // tensor data bytes
  std::uint64_t bytes_out = 0;
  int tensors_converted = 0;
  int tensors_copied = 0;
};

// Errors: kInvalidArgument (unknown scheme, same path in and out), kNotFound/kIoError/kCorrupt
// from reading IN, kUnsupported (a tensor to convert is stored in a type other than f32/f16/bf16),
// kIoError from writing OUT.
Expected<QuantizeSummary> quantize_model(const QuantizeOptions& options, ThreadPool& pool);

// The metadata shape the recipe needs, read from a GGUF file's architecture keys and tensors.
ModelShapeForQuant quant_shape_of(const gguf::File& file);

}  // namespace kvstash::modelgen
