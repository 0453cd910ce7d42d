#include "model/model_config.h"

namespace kvstash {

bool ModelConfig::has_moe() const {
  for (const LayerSpec& l : layers) {
    if (l.ffn.kind == FfnKind::kMoe) return true;
  }
  return false;
}

Status check_runnable(const ModelConfig& c) {
  if (static_cast<int>(c.layers.size()) != c.n_layers) {
    return internal_error(c.architecture + ": " + std::to_string(c.layers.size()) + " layer descriptions for " +
                          std::to_string(c.n_layers) + " layers");
  }
  const std::string what = "architecture '" + c.architecture + "': ";
  if (c.logit_softcap > 0) return unsupported(what + "logit soft-capping is not run by this engine yet");
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerSpec& l = c.layers[static_cast<std::size_t>(i)];
    const std::string at = what + "layer " + std::to_string(i) + " ";
    switch (l.attention.kind) {
      case AttentionKind::kFull: break;
      case AttentionKind::kSlidingWindow:
        return unsupported(at + "uses sliding-window attention, not run yet (supported: full attention)");
      case AttentionKind::kSinks:
        return unsupported(at + "uses attention sinks, not run yet (supported: full attention)");
    }
    if (l.attention.rope.base != c.rope_base || l.attention.rope.style != c.rope_style) {
      return unsupported(at + "has its own RoPE base or style (supported: one RoPE for all layers)");
    }
    if (l.post_attention_norm || l.post_ffn_norm) {
      return unsupported(at + "has post-sublayer norms, not run yet");
    }
    switch (l.ffn.kind) {
      case FfnKind::kSwiGlu:
        if (l.ffn.n_ff <= 0) return internal_error(at + "has a feed-forward of width " + std::to_string(l.ffn.n_ff));
        break;
      case FfnKind::kGeluGated: return unsupported(at + "uses a GELU-gated feed-forward, not run yet (supported: SwiGLU, MoE)");
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
