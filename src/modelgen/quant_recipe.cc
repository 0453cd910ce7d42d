#include "modelgen/quant_recipe.h"

#include <array>
#include <cctype>
#include <cstdio>

namespace kvstash::modelgen {
namespace {

using gguf::TensorType;

// general.file_type numbers are llama.cpp's enum llama_ftype.
const std::array<QuantScheme, 18>& schemes() {
  static const std::array<QuantScheme, 18> kSchemes = {{
      {"f32", 0, TensorType::kF32},     {"f16", 1, TensorType::kF16},      {"bf16", 32, TensorType::kBF16},
      {"q4_0", 2, TensorType::kQ4_0},   {"q4_1", 3, TensorType::kQ4_1},    {"q8_0", 7, TensorType::kQ8_0},
      {"q5_0", 8, TensorType::kQ5_0},   {"q5_1", 9, TensorType::kQ5_1},    {"q2_k", 10, TensorType::kQ2_K},
      {"q3_k_s", 11, TensorType::kQ3_K}, {"q3_k_m", 12, TensorType::kQ3_K}, {"q3_k_l", 13, TensorType::kQ3_K},
      {"q4_k_s", 14, TensorType::kQ4_K}, {"q4_k_m", 15, TensorType::kQ4_K}, {"q5_k_s", 16, TensorType::kQ5_K},
      {"q5_k_m", 17, TensorType::kQ5_K}, {"q6_k", 18, TensorType::kQ6_K}, {"mxfp4_moe", 38, TensorType::kMXFP4},
  }};
  return kSchemes;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

std::uint64_t block_elems(TensorType type) {
  std::size_t elems = 1, bytes = 0;
  gguf::tensor_type_layout(type, &elems, &bytes);
  return elems;
}

// The layer of "blk.N.*" (llama.cpp counts attn_v / ffn_down tensors in file order, which is the
// layer order in every file this project reads); -1 for other names.
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

TensorType fallback(TensorType type, std::uint64_t row) {
  if (row % block_elems(type) == 0) return type;
  switch (type) {
    case TensorType::kQ2_K:
    case TensorType::kQ3_K: type = TensorType::kQ4_0; break;
    case TensorType::kQ4_K: type = TensorType::kQ5_0; break;
    case TensorType::kQ5_K: type = TensorType::kQ5_1; break;
    case TensorType::kQ6_K: type = TensorType::kQ8_0; break;
    default: break;
  }
  return row % block_elems(type) == 0 ? type : TensorType::kF16;
}

}  // namespace

const QuantScheme* find_quant_scheme(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const QuantScheme& s : schemes()) {
    if (s.name == lower) return &s;
  }
  return nullptr;
}

std::vector<std::string> quant_scheme_names() {
  std::vector<std::string> names;
  for (const QuantScheme& s : schemes()) names.push_back(s.name);
  return names;
}

bool is_quantized_scheme(const QuantScheme& scheme) { return block_elems(scheme.base) > 1; }

TensorType choose_tensor_type(const QuantScheme& scheme, const std::string& name, const std::vector<std::uint64_t>& dims,
                              TensorType current, const ModelShapeForQuant& shape) {
  // 2-D matrices and 3-D expert stacks; never norms nor the MoE router (ffn_gate_inp), which
  // llama.cpp keeps in its stored type.
  if (dims.size() < 2 || dims.size() > 3 || !ends_with(name, "weight") || contains(name, "_norm.weight") ||
      contains(name, "ffn_gate_inp.weight")) {
    return current;
  }
  if (!is_quantized_scheme(scheme)) return scheme.base;
  const std::string& s = scheme.name;
  // gpt-oss's own files (llama.cpp's MXFP4_MOE): expert stacks in MXFP4, every other matrix Q8_0.
  if (s == "mxfp4_moe") return dims.size() == 3 && dims[2] > 1 ? TensorType::kMXFP4 : fallback(TensorType::kQ8_0, dims[0]);
  const std::uint64_t row = dims[0];
  const int layer = layer_of(name), n = shape.n_layers;
  TensorType type = scheme.base;
  if (name == "output.weight" || (!shape.has_output && name == "token_embd.weight")) {
    if (row % block_elems(scheme.base) != 0) {
      type = TensorType::kQ8_0;
    } else if (scheme.base != TensorType::kQ8_0) {
      type = TensorType::kQ6_K;
    }
  } else if (name == "token_embd.weight") {
    // The schemes here keep their base type for an untied embedding.
  } else if (contains(name, "attn_v.weight")) {
    if (s == "q2_k") {
      type = shape.n_gqa >= 4 ? TensorType::kQ4_K : TensorType::kQ3_K;
    } else if (s == "q3_k_m") {
      type = layer < 2 ? TensorType::kQ5_K : TensorType::kQ4_K;
    } else if (s == "q3_k_l") {
      type = TensorType::kQ5_K;
    } else if ((s == "q4_k_m" || s == "q5_k_m") && use_more_bits(layer, n)) {
      type = TensorType::kQ6_K;
    } else if (s == "q4_k_s" && layer < 4) {
      type = TensorType::kQ5_K;
    }
    if (shape.n_experts == 8) type = TensorType::kQ8_0;  // llama.cpp: "for the 8-expert model ... ~128MB"
  } else if (contains(name, "attn_k.weight")) {
    if (shape.n_experts == 8) type = TensorType::kQ8_0;
  } else if (contains(name, "ffn_down")) {
    if (s == "q2_k") {
      type = TensorType::kQ3_K;
    } else if (s == "q3_k_m") {
      type = layer < n / 16 ? TensorType::kQ5_K : TensorType::kQ4_K;
    } else if (s == "q3_k_l") {
      type = TensorType::kQ5_K;
    } else if ((s == "q4_k_m" || s == "q5_k_m") && use_more_bits(layer, n)) {
      type = TensorType::kQ6_K;
    } else if (s == "q4_k_s" && layer < n / 8) {
      type = TensorType::kQ5_K;
    }
  } else if (contains(name, "attn_output.weight") && shape.n_experts == 8) {
    if (s == "q2_k" || s == "q3_k_s" || s == "q3_k_m" || s == "q4_k_s" || s == "q4_k_m") type = TensorType::kQ5_K;
  } else if (contains(name, "attn_output.weight")) {
    if (s == "q2_k") type = TensorType::kQ3_K;
    else if (s == "q3_k_m") type = TensorType::kQ4_K;
    else if (s == "q3_k_l") type = TensorType::kQ5_K;
  }
  return fallback(type, row);
}

}  // namespace kvstash::modelgen
