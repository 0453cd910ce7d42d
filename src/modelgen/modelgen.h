// Synthetic GGUF models: standard llama.cpp-readable files with random weights in the exact shapes
// of real checkpoints, for tests and benchmarks that must not depend on downloaded weights.
//
// describe_model() plans a model (metadata and tensor shapes) without writing anything;
// generate_model() writes the plan, producing each tensor's bytes while it streams to disk, so
// even multi-GB presets need only one chunk of values in memory.
//
// Thread safety: all functions are reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "kvstash/status.h"
#include "modelgen/presets.h"
#include "modelgen/weights.h"

namespace kvstash::modelgen {

inline constexpr std::uint64_t kDefaultSeed = 20240917;  // any fixed number; recorded so files are reproducible

struct GenerateOptions {
  std::string preset = "tiny";                       // a name from preset_names()
  gguf::TensorType type = gguf::TensorType::kF16;    // matrices' type: f32, f16, bf16 or q8_0
  std::string scheme;                                // a quantization scheme (quant_recipe.h, "q4_k_m"): when set,
                                                     // each matrix's type comes from its recipe and `type` is ignored
  std::string vocab_path;                            // a GGUF whose tokenizer.* keys to copy; empty: built-in
  std::uint64_t seed = kDefaultSeed;                 // with the tensor name, determines every value
  float qk_concentration = 0.0f;                     // ModelPreset::qk_concentration; needs QKV biases
  std::string out_path;                              // the file to write
  std::function<void(const std::string&)> progress;  // called with "layer i/n" lines; may be empty
};

struct ModelPlan {
  ModelPreset preset;             // n_vocab filled in with the vocabulary's real size
  std::vector<std::pair<std::string, gguf::Value>> metadata;  // in file order
  std::vector<TensorPlan> tensors;                            // in file order
  std::uint64_t n_params = 0;
  std::uint64_t n_bytes = 0;      // tensor data bytes, without header and padding
  std::string note;               // e.g. the vocabulary size differing from the preset's; may be empty
};

// The GGUF general.file_type for a uniform matrix type (0 f32, 1 f16, 7 q8_0, 32 bf16); -1 for others
// (the quantization schemes carry their own, QuantScheme::file_type).
int file_type_of(gguf::TensorType type);

// Plans the model. Errors: kInvalidArgument (unknown preset or type), kNotFound/kCorrupt/... from
// reading the vocabulary file, kUnsupported (the vocabulary is not a tokenizer GGUF).
Expected<ModelPlan> describe_model(const GenerateOptions& options);

// Writes options.out_path (atomically: a temporary name, then rename).
Status generate_model(const GenerateOptions& options);

}  // namespace kvstash::modelgen
