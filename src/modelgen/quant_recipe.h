// Which type each tensor of a model gets under a named quantization scheme (q4_k_m, q6_k, ...).
//
// The names are llama.cpp's file types, and so are the mixtures behind the _S / _M / _L names:
// they follow llama.cpp's per-tensor choice (src/llama-quant.cpp, llama_tensor_get_type_impl and
// tensor_type_fallback), read there and restated here for the tensors of the architectures this
// project runs (llama, qwen2, qwen3, qwen3moe; no Falcon, no importance matrix):
//   - only 2-D tensors and 3-D expert stacks whose name ends in "weight" are quantized, never norms
//     nor the MoE router (ffn_gate_inp); an expert stack's row is its dims[0], like a matrix's;
//   - the output matrix, or the token embedding when it doubles as the output (no output.weight),
//     takes Q6_K (Q8_0 when its row length is not a multiple of the scheme's block, and under q8_0);
//   - attn_v.weight: q2_k -> Q4_K when heads / kv heads >= 4, else Q3_K; q3_k_m -> Q5_K in the first
//     two layers, else Q4_K; q3_k_l -> Q5_K; q4_k_m and q5_k_m -> Q6_K in the layers use_more_bits()
//     picks; q4_k_s -> Q5_K in the first four layers;
//   - ffn_down.weight: q2_k -> Q3_K; q3_k_m -> Q5_K in the first n/16 layers, else Q4_K; q3_k_l ->
//     Q5_K; q4_k_m and q5_k_m -> Q6_K where use_more_bits(); q4_k_s -> Q5_K in the first n/8 layers;
//   - attn_output.weight: q2_k -> Q3_K, q3_k_m -> Q4_K, q3_k_l -> Q5_K;
//   - a row length that is not a multiple of the chosen type's block falls back: Q2_K/Q3_K -> Q4_0,
//     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and to F16 when even 32 does not divide it.
//   - models of exactly 8 experts (Mixtral's shape) take attn_v and attn_k in Q8_0, and
//     attn_output in Q5_K under q2_k, q3_k_s, q3_k_m, q4_k_s and q4_k_m;
//   - mxfp4_moe (llama.cpp's MXFP4_MOE, gpt-oss's files): 3-D expert stacks in MXFP4, every other
//     matrix, the output included, in Q8_0;
//   use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2: the first and last eighth of
//   the layers and every third one between.
//
// Thread safety: the scheme table is immutable; functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace kvstash::modelgen {

struct QuantScheme {
  std::string name;             // "q4_k_m"
  std::uint32_t file_type = 0;  // general.file_type (llama.cpp's LLAMA_FTYPE_MOSTLY_*)
  gguf::TensorType base = gguf::TensorType::kF16;  // the type of every tensor no rule singles out
};

// The schemes by name, case-insensitive ("Q4_K_M" works); nullptr when unknown.
const QuantScheme* find_quant_scheme(std::string_view name);
std::vector<std::string> quant_scheme_names();
bool is_quantized_scheme(const QuantScheme& scheme);

// What the choice depends on besides the tensor: the model's layer count, heads per KV head, and
// whether it has its own output.weight.
struct ModelShapeForQuant {
  int n_layers = 1;
  int n_gqa = 1;
  bool has_output = false;
  int n_experts = 0;  // expert_count; 0 for dense models
};

// The type `name` (with `dims`, dims[0] the row length) gets under `scheme`. Tensors that are not
// quantized keep `current`.
gguf::TensorType choose_tensor_type(const QuantScheme& scheme, const std::string& name,
                                    const std::vector<std::uint64_t>& dims, gguf::TensorType current,
                                    const ModelShapeForQuant& shape);

}  // namespace kvstash::modelgen
