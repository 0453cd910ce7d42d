#include "modelgen/weights.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/fp16.h"
#include "kernels/kernels.h"

namespace kvstash::modelgen {
namespace {

constexpr float kSqrt3 = 1.7320508f;  // uniform(-a, a) has standard deviation a / sqrt(3)
constexpr std::size_t kChunkElems = 8192;  // values generated per step; a multiple of every block (32, 256)

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) { h ^= c; h *= 0x100000001b3ull; }
  return h;
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

std::uint64_t TensorPlan::n_elements() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : dims) n *= d;
  return n;
}

TensorValues::TensorValues(const ModelPreset& preset, const TensorPlan& tensor, std::uint64_t seed)
    : preset_(preset), tensor_(tensor) {
  std::uint64_t x = seed ^ fnv1a64(tensor.name);
  for (std::uint64_t& s : state_) s = splitmix64(x);  // xoshiro256** seeding as its authors advise
  switch (tensor.init) {
    case Init::kMatrix:
      scale_ = kSqrt3 / std::sqrt(static_cast<float>(tensor.dims[0]));
      // The projections that write into the residual stream get 3x the gain, so that each layer
      // moves the hidden state well away from the input token's embedding. Otherwise a model with
      // tied embeddings greedily repeats its input token (the embedding's dot with itself wins).
      if (tensor.name.ends_with("attn_output.weight") || tensor.name.ends_with("ffn_down.weight") ||
          tensor.name.ends_with("ffn_down_exps.weight")) {
        scale_ *= 3.0f;
      }
      break;
    case Init::kEmbedding:
      // std 1 spreads logits well (std sqrt(n_embd)); tied models take 0.25 for the reason above.
      scale_ = preset.tied_output ? 0.25f * kSqrt3 : kSqrt3;
      break;
    case Init::kNorm: scale_ = 0.1f; break;
    case Init::kBias:
      scale_ = 0.1f * kSqrt3;
      if (preset.qk_concentration > 0 && (tensor.name.ends_with("attn_q.bias") || tensor.name.ends_with("attn_k.bias"))) {
        scale_ = preset.qk_concentration * kSqrt3;
      }
      break;
    case Init::kRopeFreqs: scale_ = 0.0f; break;
    case Init::kRopeFactors: scale_ = 1.0f; break;
  }
}

std::uint64_t TensorValues::next_u64() {  // xoshiro256**
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

float TensorValues::uniform_pm1() {
  constexpr float kTwoPow24 = 16777216.0f;  // 24 random bits: every value exact in a float
  return static_cast<float>(next_u64() >> 40) / kTwoPow24 * 2.0f - 1.0f;
}

void TensorValues::next(std::span<float> out) {
  if (tensor_.init == Init::kRopeFreqs) {
    std::vector<float> freqs = llama3_rope_freqs(preset_.head_dim, preset_.rope_base);
    for (float& v : out) v = freqs[produced_++ % freqs.size()];
    return;
  }
  const float offset = tensor_.init == Init::kNorm ? 1.0f : tensor_.init == Init::kRopeFactors ? 2.0f : 0.0f;
  for (float& v : out) v = offset + scale_ * uniform_pm1();
  produced_ += out.size();
}

std::vector<float> llama3_rope_freqs(std::uint32_t head_dim, float rope_base, const Llama3RopeScaling& s) {
  constexpr double kPi = 3.14159265358979323846;
  const float low_freq_wavelen = s.original_context / s.low_freq_factor;
  const float high_freq_wavelen = s.original_context / s.high_freq_factor;
  std::vector<float> factors;
  for (std::uint32_t i = 0; i < head_dim; i += 2) {
    const float freq = 1.0f / std::pow(rope_base, static_cast<float>(i) / static_cast<float>(head_dim));
    const float wavelen = static_cast<float>(2.0 * kPi / freq);
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(s.factor);
    } else {
      const float smooth = (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      factors.push_back(1.0f / ((1.0f - smooth) / s.factor + smooth));
    }
  }
  return factors;
}

Status fill_tensor(const ModelPreset& preset, const TensorPlan& tensor, std::uint64_t seed, std::span<std::uint8_t> out) {
  const std::uint64_t n = tensor.n_elements();
  // The kernels' encoder for the tensor's type (same names in both modules).
  kernels::WeightType encoded = kernels::WeightType::kF32;
  bool known = false;
  for (kernels::WeightType w : kernels::kAllWeightTypes) {
    if (gguf::tensor_type_name(tensor.type) == kernels::weight_type_name(w)) {
      encoded = w;
      known = true;
    }
  }
  if (!known) return unsupported("tensor '" + tensor.name + "': cannot generate " + gguf::tensor_type_name(tensor.type));
  const std::uint64_t block = static_cast<std::uint64_t>(kernels::weight_block_elems(encoded));
  if (n % block != 0 || (block > 1 && kChunkElems % block != 0)) {
    return invalid_argument("tensor '" + tensor.name + "': length not a multiple of its type's block");
  }
  const std::uint64_t want = n / block * kernels::weight_block_bytes(encoded);
  if (out.size() != want) {
    return internal_error("tensor '" + tensor.name + "': " + std::to_string(out.size()) + " bytes to fill, expected " +
                          std::to_string(want));
  }
  TensorValues values(preset, tensor, seed);
  std::vector<float> chunk(kChunkElems);
  std::uint8_t* dst = out.data();
  for (std::uint64_t done = 0; done < n;) {
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(kChunkElems, n - done));
    values.next(std::span<float>(chunk.data(), k));
    switch (tensor.type) {
      case gguf::TensorType::kF32:
        std::memcpy(dst, chunk.data(), k * 4);
        dst += k * 4;
        break;
      case gguf::TensorType::kF16:
      case gguf::TensorType::kBF16:
        for (std::size_t i = 0; i < k; ++i) {
          std::uint16_t h = tensor.type == gguf::TensorType::kF16 ? f32_to_f16(chunk[i]) : f32_to_bf16(chunk[i]);
          std::memcpy(dst, &h, 2);
          dst += 2;
        }
        break;
      default:  // quantized: n is a multiple of the block because dims[0] is, and so is every chunk
        kernels::quantize_row(encoded, chunk.data(), static_cast<std::int64_t>(k), dst);
        dst += k / block * kernels::weight_block_bytes(encoded);
        break;
    }
    done += k;
  }
  return Status::ok();
}

}  // namespace kvstash::modelgen
