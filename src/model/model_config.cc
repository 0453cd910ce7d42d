#include "model/model_config.h"

namespace kvstash {

bool ModelConfig::has_moe() const {
  for (const LayerSpec& l : layers) {
    if (l.ffn.kind == FfnKind::kMoe) return true;
  }
  return false;
}

bool ModelConfig::has_local_layers() const {
  for (const LayerSpec& l : layers) {
    if (l.attention.kind != AttentionKind::kFull || !(l.attention.rope == full_rope())) {
      return true;
    }
  }
  return false;
}

Status check_runnable(const ModelConfig& c) {
  if (static_cast<int>(c.layers.size()) != c.n_layers) {
    return internal_error(c.architecture + ": " + std::to_string(c.layers.size()) + " layer descriptions for " +
                          std::to_string(c.n_layers) + " layers");
  }
  const std::string what = "architecture '" + c.architecture + "': ";
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerSpec& l = c.layers[static_cast<std::size_t>(i)];
    const std::string at = what + "layer " + std::to_string(i) + " ";
    switch (l.attention.kind) {
      case AttentionKind::kFull: break;
      case AttentionKind::kSlidingWindow:
        if (l.attention.window < 1) return internal_error(at + "has a sliding window of " + std::to_string(l.attention.window));
        break;
    }
    if (l.attention.temperature_scale != 0.0f && l.attention.temperature_length < 1) {
      return internal_error(at + "scales its queries by temperature over a length of " +
                            std::to_string(l.attention.temperature_length));
    }
    if (l.attention.rope.style != c.rope_style) {
      return unsupported(at + "rotates in another RoPE style than the model's (supported: one style)");
    }
    switch (l.ffn.kind) {
      case FfnKind::kSwiGlu:
      case FfnKind::kGeluGated:
        if (l.ffn.n_ff <= 0) return internal_error(at + "has a feed-forward of width " + std::to_string(l.ffn.n_ff));
        break;
      case FfnKind::kMoe: {
        const MoeSpec& m = l.ffn.moe;
        if (m.n_experts < 1 || m.n_used < 1 || m.n_used > m.n_experts || m.n_ff_expert < 1) {
          return internal_error(at + "has a MoE of " + std::to_string(m.n_experts) + " experts, " +
                                std::to_string(m.n_used) + " used, width " + std::to_string(m.n_ff_expert));
        }
        break;
      }
    }
  }
  return Status::ok();
}

}  // namespace kvstash
