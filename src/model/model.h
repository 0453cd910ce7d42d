// A Llama-family transformer (GGUF architectures `llama` and `qwen2`) loaded from a GGUF file,
// with weights used in place from the mapping, and its batched forward pass over a paged KV cache.
//
// Thread safety: a Model is immutable after load(); forward() may be called by one thread at a
// time per KvStorage it writes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kvstash/status.h"
#include "tokenizer/tokenizer.h"

namespace kvstash {

enum class RopeStyle {
  kInterleaved,  // GGUF `llama`: rotate pairs (x[2i], x[2i+1]); Q/K rows were permuted by the converter
  kHalves,       // GGUF `qwen2` (NEOX style): rotate pairs (x[i], x[i + d/2])
};

struct ModelConfig {
  std::string architecture;  // "llama" or "qwen2"
  std::string name;          // general.name, or the file's stem
  int n_layers = 0;
  int n_embd = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  RopeStyle rope_style = RopeStyle::kInterleaved;
  bool tied_output = false;   // output projection is token_embd
  bool has_qkv_bias = false;
  int kv_row_elems() const { return n_kv_heads * head_dim; }  // K (or V) elements per token per layer
};

}  // namespace kvstash
