// For tests: the path of a generated model, written on first use under the build directory
// (KVSTASH_BINARY_DIR/test-models) and reused by later tests. Several test processes may race to
// write the same file; generate_model() writes atomically, so every reader sees a whole file.
#pragma once

#include <filesystem>
#include <string>

#include "modelgen/modelgen.h"

namespace kvstash::testing {

inline std::string test_model_path(const std::string& preset, gguf::TensorType type = gguf::TensorType::kF32,
                                   const std::string& vocab_path = "") {
  const std::filesystem::path dir = std::filesystem::path(KVSTASH_BINARY_DIR) / "test-models";
  std::filesystem::create_directories(dir);
  std::string name = preset + "-" + gguf::tensor_type_name(type);
  if (!vocab_path.empty()) {
    name += '-';  // appended in two steps: GCC 12 warns (-Wrestrict) falsely on "-" + std::string&&
    name += std::filesystem::path(vocab_path).stem().string();
  }
  const auto path = dir / (name + ".gguf");
  if (!std::filesystem::exists(path)) {
    modelgen::GenerateOptions o;
    o.preset = preset;
    o.type = type;
    o.vocab_path = vocab_path;
    o.out_path = path.string();
    Status st = modelgen::generate_model(o);
    if (!st.is_ok()) return "";  // the caller's open() then fails with a clear message
  }
  return path.string();
}

// The same for a quantization scheme's mixture (modelgen/quant_recipe.h), e.g. "q4_k_m".
inline std::string test_model_path_scheme(const std::string& preset, const std::string& scheme) {
  const std::filesystem::path dir = std::filesystem::path(KVSTASH_BINARY_DIR) / "test-models";
  std::filesystem::create_directories(dir);
  const auto path = dir / (preset + "-" + scheme + ".gguf");
  if (!std::filesystem::exists(path)) {
    modelgen::GenerateOptions o;
    o.preset = preset;
    o.scheme = scheme;
    o.out_path = path.string();
    if (!modelgen::generate_model(o).is_ok()) return "";
  }
  return path.string();
}

}  // namespace kvstash::testing
