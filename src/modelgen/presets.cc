#include "modelgen/presets.h"

#include <array>

namespace kvstash::modelgen {
namespace {

// Shapes from each model's config.json (hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings, rope_theta,
// rms_norm_eps, tie_word_embeddings).
// tiny-k: the smallest shape whose rows are whole 256-weight K super-blocks, for tests of the K
// quantization types in a model (tiny's 64-wide rows fall back to 32-weight types).
const std::array<ModelPreset, 6>& presets() {
  static const std::array<ModelPreset, 6> kPresets = {{
      {"tiny", "qwen2", 2, 64, 4, 2, 16, 128, 0, 4096, 1e6f, 1e-6f, true, true, false},
      {"tiny-k", "qwen2", 2, 256, 4, 2, 64, 512, 0, 4096, 1e6f, 1e-6f, true, true, false},
      {"tiny-llama", "llama", 2, 64, 4, 2, 16, 160, 0, 4096, 5e5f, 1e-5f, false, false, false},
      {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e6f, 1e-6f, true, true, false},
      {"qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1e6f, 1e-6f, true, true, false},
      {"llama-3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 5e5f, 1e-5f, true, false, true},
  }};
  return kPresets;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelPreset& p : presets()) names.push_back(p.name);
  return names;
}

const ModelPreset* find_preset(std::string_view name) {
  for (const ModelPreset& p : presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace kvstash::modelgen
