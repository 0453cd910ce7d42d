// Deterministic random weights for synthetic models.
//
// Each tensor's values come from a generator seeded by (seed, tensor name) alone, so one tensor
// can be reproduced without generating the others, and values stream out in element order, so a
// tensor of any size is produced in bounded memory.
//
// Thread safety: a TensorValues is used by one thread; distinct objects are independent.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "gguf/gguf.h"
#include "kvstash/status.h"
#include "modelgen/presets.h"

namespace kvstash::modelgen {

// How a tensor's values are drawn.
enum class Init {
  kMatrix,     // uniform, standard deviation 1/sqrt(dims[0]) (the input size): activations keep their scale
  kEmbedding,  // uniform, standard deviation 1: tied logits are well spread, so greedy decoding has no near-ties
  kNorm,       // 1 + uniform(±0.1)
  kBias,       // uniform, standard deviation 0.1
  kRopeFreqs,  // not random: Llama 3's per-dimension frequency divisors
  kRopeFactors,  // phi3's LongRoPE divisors: uniform in [1, 3] (real ones rise from 1 to ~50 over the pairs)
};

struct TensorPlan {
  std::string name;
  gguf::TensorType type = gguf::TensorType::kF32;
  std::vector<std::uint64_t> dims;  // GGUF order: dims[0] contiguous
  Init init = Init::kMatrix;
  int layer = -1;                   // the block it belongs to; -1 for global tensors
  std::uint64_t n_elements() const;
};

// Streams a tensor's f32 values in element order.
class TensorValues {
 public:
  TensorValues(const ModelPreset& preset, const TensorPlan& tensor, std::uint64_t seed);
  // Writes the next out.size() values.
  void next(std::span<float> out);

 private:
  std::uint64_t next_u64();
  float uniform_pm1();  // uniform in [-1, 1)

  const ModelPreset& preset_;
  const TensorPlan& tensor_;
  std::uint64_t state_[4];
  std::uint64_t produced_ = 0;
  float scale_ = 0.0f;
};

// The frequency divisor per rotary dimension pair (head_dim / 2 values), as llama.cpp's converter
// computes rope_freqs.weight for Llama 3 (1 for high frequencies, `factor` for low, smooth between).
std::vector<float> llama3_rope_freqs(std::uint32_t head_dim, float rope_base, const Llama3RopeScaling& scaling = {});

// Fills out (the tensor's n_bytes) with its values encoded as tensor.type (f32, f16, bf16, or any
// quantized type the kernels encode: kernels::quantize_row).
Status fill_tensor(const ModelPreset& preset, const TensorPlan& tensor, std::uint64_t seed, std::span<std::uint8_t> out);

}  // namespace kvstash::modelgen
