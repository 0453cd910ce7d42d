// GGUF metadata → ModelConfig, per architecture. Keys and their meaning as llama.cpp reads them
// (src/llama-model.cpp, load_hparams; ../shared/design/MODELS.md is the map).
#include "model/architectures.h"

#include <cmath>
#include <filesystem>

namespace kvstash {
namespace {

enum class Arch { kLlama, kQwen2, kQwen3, kQwen3Moe, kGemma3, kPhi3, kGptOss, kMistral3 };

bool parse_arch(const std::string& name, Arch* out) {
  if (name == "llama") *out = Arch::kLlama;
  else if (name == "qwen2") *out = Arch::kQwen2;
  else if (name == "qwen3") *out = Arch::kQwen3;
  else if (name == "qwen3moe") *out = Arch::kQwen3Moe;
  else if (name == "gemma3") *out = Arch::kGemma3;
  else if (name == "phi3") *out = Arch::kPhi3;
  else if (name == "gpt-oss") *out = Arch::kGptOss;
  else if (name == "mistral3") *out = Arch::kMistral3;
  else return false;
  return true;
}

// Reads `ARCH.key` as a positive int below 2^24 (a bound far above any real shape that keeps
// products of two of them in 64 bits).
class Keys {
 public:
  Keys(const gguf::File& f, const std::string& arch) : f_(f), arch_(arch) {}
  bool has(const std::string& key) const { return f_.find(arch_ + "." + key) != nullptr; }
  Status need(const std::string& key, int* out) const {
    auto v = f_.get_uint(arch_ + "." + key);
    if (!v) return corrupt(f_.path() + ": " + v.status().message());
    if (*v == 0 || *v > (1u << 24)) {
      return corrupt(f_.path() + ": " + arch_ + "." + key + " = " + std::to_string(*v) + " is out of range");
    }
    *out = static_cast<int>(*v);
    return Status::ok();
  }
  Status optional(const std::string& key, int* out) const { return has(key) ? need(key, out) : Status::ok(); }

 private:
  const gguf::File& f_;
  const std::string& arch_;
};

// The attention shape and RoPE every architecture here shares.
Status read_common(const gguf::File& f, const Keys& keys, ModelConfig* c) {
  const std::string& a = c->architecture;
  KVSTASH_RETURN_IF_ERROR(keys.need("block_count", &c->n_layers));
  KVSTASH_RETURN_IF_ERROR(keys.need("embedding_length", &c->n_embd));
  KVSTASH_RETURN_IF_ERROR(keys.need("attention.head_count", &c->n_heads));
  c->n_kv_heads = c->n_heads;
  KVSTASH_RETURN_IF_ERROR(keys.optional("attention.head_count_kv", &c->n_kv_heads));
  c->n_ctx_train = 4096;
  KVSTASH_RETURN_IF_ERROR(keys.optional("context_length", &c->n_ctx_train));
  c->head_dim = c->n_embd / c->n_heads;
  KVSTASH_RETURN_IF_ERROR(keys.optional("attention.key_length", &c->head_dim));
  int value_dim = c->head_dim;
  KVSTASH_RETURN_IF_ERROR(keys.optional("attention.value_length", &value_dim));
  if (value_dim != c->head_dim) {
    return unsupported(f.path() + ": attention.value_length " + std::to_string(value_dim) + " differs from key_length " +
                       std::to_string(c->head_dim) + " (supported: equal)");
  }
  if (c->n_heads % c->n_kv_heads != 0) return corrupt(f.path() + ": head_count is not a multiple of head_count_kv");
  if (c->head_dim % 2 != 0) return corrupt(f.path() + ": odd head dimension");
  if (auto rot = f.get_uint(a + ".rope.dimension_count"); rot && static_cast<int>(*rot) != c->head_dim) {
    return unsupported(f.path() + ": partial rotary embedding (rope.dimension_count " + std::to_string(*rot) +
                       " != head dim " + std::to_string(c->head_dim) + "; supported: the whole head)");
  }
  if (auto v = f.get_float(a + ".rope.freq_base")) c->rope_base = static_cast<float>(*v);
  if (auto v = f.get_float(a + ".attention.layer_norm_rms_epsilon")) c->rms_eps = static_cast<float>(*v);
  // llama3 scaling lives in rope_freqs.weight, which the Model applies; "none" or a factor of 1
  // change nothing; linear divides every angle by the factor (llama.cpp's freq_scale); phi3's
  // LongRoPE is its rope_factors tensors (describe_architecture). Anything else (yarn) would change
  // the angles otherwise.
  if (auto v = f.get_float(a + ".rope.scaling.attn_factor")) c->rope_magnitude = static_cast<float>(*v);
  if (auto type = f.get_string(a + ".rope.scaling.type");
      type && *type != "none" && *type != "llama3" && !(*type == "longrope" && a == "phi3")) {
    auto factor = f.get_float(a + ".rope.scaling.factor");
    if (*type == "linear" && factor && *factor > 0) {
      c->rope_scale = static_cast<float>(1.0 / *factor);
    } else if (*type == "yarn" && factor && *factor > 1.0) {
      // llama.cpp: freq_scale 1 / factor, ext_factor 1, and cos/sin × (1 + 0.1 ln factor) (its
      // yarn_attn_factor's own mscale cancels against the one rope_yarn applies once more).
      // mistral3 reads yarn_log_multiplier L (mscale_all_dim): yarn_attn_factor becomes
      // (1 + 0.1 ln factor) / (1 + 0.1 L ln factor) before that cancellation, so cos/sin × the
      // same ratio (1 for Ministral 3's L = 1). The other architectures' loaders ignore the key
      // in llama.cpp; here it is refused for them rather than silently dropped.
      double divisor = 1.0;
      if (auto log_mul = f.get_float(a + ".rope.scaling.yarn_log_multiplier")) {
        if (a != "mistral3") {
          return unsupported(f.path() + ": rope scaling 'yarn' with yarn_log_multiplier is not supported for " + a +
                             " (supported: plain yarn; mistral3's yarn_log_multiplier)");
        }
        if (*log_mul != 0.0) divisor = 1.0 + 0.1 * *log_mul * std::log(*factor);
      }
      c->rope_scale = static_cast<float>(1.0 / *factor);
      c->rope_magnitude *= static_cast<float>((1.0 + 0.1 * std::log(*factor)) / divisor);
      c->rope_yarn_original_ctx = c->n_ctx_train;
      KVSTASH_RETURN_IF_ERROR(keys.optional("rope.scaling.original_context_length", &c->rope_yarn_original_ctx));
      if (auto v = f.get_float(a + ".rope.scaling.yarn_beta_fast")) c->rope_yarn_beta_fast = static_cast<float>(*v);
      if (auto v = f.get_float(a + ".rope.scaling.yarn_beta_slow")) c->rope_yarn_beta_slow = static_cast<float>(*v);
    } else if (factor && *factor != 1.0) {
      return unsupported(f.path() + ": rope scaling '" + *type +
                         "' is not supported (supported: none, llama3, linear, yarn, longrope for phi3)");
    }
  }
  return Status::ok();
}

}  // namespace

// Local (sliding-window) layers: which are windowed (sliding_window_pattern, a period n: layer il
// is local iff il % n < n - 1, default gemma3's 6 and gpt-oss's 2; or a per-layer bool array),
// their window and RoPE: gemma3's their own base (rope.freq_base_swa, default 10000) unscaled,
// gpt-oss's the global one (freq_base_swa defaulting to freq_base, scaled alike).
Status read_windows(const gguf::File& f, const Keys& keys, int default_period, bool own_rope, ModelConfig* c) {
  const std::string& a = c->architecture;
  int window = 0;
  KVSTASH_RETURN_IF_ERROR(keys.optional("attention.sliding_window", &window));
  if (window == 0) return Status::ok();  // llama.cpp: no window key (or 0), every layer global
  std::vector<bool> local(static_cast<std::size_t>(c->n_layers));
  const gguf::Value* pattern = f.find(a + ".attention.sliding_window_pattern");
  if (const auto* array = pattern != nullptr ? std::get_if<gguf::Array>(&pattern->data) : nullptr) {
    if (array->items.size() != local.size()) {
      return corrupt(f.path() + ": sliding_window_pattern has " + std::to_string(array->items.size()) + " entries for " +
                     std::to_string(c->n_layers) + " layers");
    }
    for (std::size_t i = 0; i < local.size(); ++i) {
      const bool* b = std::get_if<bool>(&array->items[i].data);
      if (b == nullptr) return corrupt(f.path() + ": sliding_window_pattern is not an array of booleans");
      local[i] = *b;
    }
  } else {
    int n_pattern = default_period;
    KVSTASH_RETURN_IF_ERROR(keys.optional("attention.sliding_window_pattern", &n_pattern));
    for (int i = 0; i < c->n_layers; ++i) local[static_cast<std::size_t>(i)] = i % n_pattern < n_pattern - 1;
  }
  // llama.cpp's rope_freq_base_train_swa: 10000 unless the architecture defaults it to the base.
  float base_swa = own_rope ? 10000.0f : c->rope_base;
  if (auto v = f.get_float(a + ".rope.freq_base_swa")) base_swa = static_cast<float>(*v);
  float attn_factor = 1.0f;  // without YaRN's magnitude: an unscaled layer has none
  if (auto v = f.get_float(a + ".rope.scaling.attn_factor")) attn_factor = static_cast<float>(*v);
  for (int i = 0; i < c->n_layers; ++i) {
    if (!local[static_cast<std::size_t>(i)]) continue;
    AttentionSpec& at = c->layers[static_cast<std::size_t>(i)].attention;
    at.kind = AttentionKind::kSlidingWindow;
    at.window = window;
    at.rope.base = base_swa;
    if (own_rope) {  // gemma3's local layers are never scaled
      at.rope.scale = 1.0f;
      at.rope.magnitude = attn_factor;
      at.rope.yarn_original_ctx = 0;
    }
  }
  return Status::ok();
}

const char* supported_architectures() { return "llama, qwen2, qwen3, qwen3moe, gemma3, phi3, gpt-oss, mistral3"; }

Status describe_architecture(const gguf::File& f, ModelConfig* c) {
  auto arch_name = f.get_string("general.architecture");
  if (!arch_name) return corrupt(f.path() + ": no general.architecture key");
  c->architecture = *arch_name;
  Arch arch;
  if (!parse_arch(c->architecture, &arch)) {
    return unsupported(f.path() + ": architecture '" + c->architecture + "' is not supported (supported: " +
                       supported_architectures() + ")");
  }
  const Keys keys(f, c->architecture);
  KVSTASH_RETURN_IF_ERROR(read_common(f, keys, c));
  // llama permutes Q/K rows at conversion into adjacent pairs; the Qwen families keep the
  // checkpoint's halves (llama.cpp's LLAMA_ROPE_TYPE_NORM vs NEOX).
  // mistral3 is llama's layout, rotated the same way (LLAMA_ROPE_TYPE_NORM).
  c->rope_style = arch == Arch::kLlama || arch == Arch::kMistral3 ? RopeStyle::kInterleaved : RopeStyle::kHalves;
  if (arch == Arch::kMistral3) {
    // llama.cpp's mistral3 loader reads only what llama's does plus the temperature and YaRN
    // keys; its mixture-of-experts and MLP-bias branches have no model to test against here.
    if (keys.has("expert_count")) {
      return unsupported(f.path() + ": mistral3 with experts (expert_count) is not supported (supported: dense mistral3)");
    }
    for (const char* t : {"blk.0.ffn_gate.bias", "blk.0.ffn_up.bias", "blk.0.ffn_down.bias"}) {
      if (f.find_tensor(t) != nullptr) {
        return unsupported(f.path() + ": mistral3 with feed-forward biases (" + t + ") is not supported");
      }
    }
  }
  if (arch == Arch::kGemma3) {
    // Embeddings scaled by sqrt(n_embd); Q by 1/sqrt(head_dim), except the 62-layer 27B whose
    // query_pre_attn_scalar is n_embd / n_head (llama.cpp's f_attention_scale).
    c->embedding_scale = std::sqrt(static_cast<float>(c->n_embd));
    c->attention_scale = 1.0f / std::sqrt(static_cast<float>(c->n_layers == 62 ? c->n_embd / c->n_heads : c->head_dim));
    if (auto cap = f.get_float(c->architecture + ".final_logit_softcapping")) c->logit_softcap = static_cast<float>(*cap);
  }
  if (arch == Arch::kPhi3) {
    // LongRoPE: per-pair divisors in rope_factors_long / rope_factors_short; llama.cpp takes the
    // long ones when its per-sequence context exceeds rope.scaling.original_context_length. Here
    // the context is the model's own (context_length), as llama.cpp's default -c gives it.
    // (phi3.attention.sliding_window is written by the converter but ignored by llama.cpp: so here.)
    int original = c->n_ctx_train;
    KVSTASH_RETURN_IF_ERROR(keys.optional("rope.scaling.original_context_length", &original));
    c->rope_factors_tensor = c->n_ctx_train > original ? "rope_factors_long.weight" : "rope_factors_short.weight";
  }
  // A MoE file's feed_forward_length is the dense width its config declares, unused by the layers.
  if (arch == Arch::kQwen3Moe || arch == Arch::kGptOss) {
    KVSTASH_RETURN_IF_ERROR(keys.optional("feed_forward_length", &c->n_ff));
  } else {
    KVSTASH_RETURN_IF_ERROR(keys.need("feed_forward_length", &c->n_ff));
  }

  LayerSpec layer;
  layer.attention.rope = c->full_rope();
  layer.attention.qk_norm = arch == Arch::kQwen3 || arch == Arch::kQwen3Moe || arch == Arch::kGemma3;
  layer.ffn.n_ff = c->n_ff;
  if (arch == Arch::kGemma3) {
    layer.post_attention_norm = true;
    layer.post_ffn_norm = true;
    layer.ffn.kind = FfnKind::kGeluGated;
  }
  // gpt-oss: sinks in every layer, biases on Q/K/V and the output (found per layer below).
  layer.attention.sinks = arch == Arch::kGptOss;
  if (arch == Arch::kQwen3Moe || arch == Arch::kGptOss) {
    MoeSpec& moe = layer.ffn.moe;
    layer.ffn.kind = FfnKind::kMoe;
    KVSTASH_RETURN_IF_ERROR(keys.need("expert_count", &moe.n_experts));
    KVSTASH_RETURN_IF_ERROR(keys.need("expert_used_count", &moe.n_used));
    if (moe.n_used > moe.n_experts) {
      return corrupt(f.path() + ": expert_used_count " + std::to_string(moe.n_used) + " exceeds expert_count " +
                     std::to_string(moe.n_experts));
    }
    // Without expert_feed_forward_length llama.cpp takes feed_forward_length / expert_used_count.
    moe.n_ff_expert = c->n_ff / moe.n_used;
    KVSTASH_RETURN_IF_ERROR(keys.optional("expert_feed_forward_length", &moe.n_ff_expert));
    if (moe.n_ff_expert == 0) return corrupt(f.path() + ": no expert_feed_forward_length (nor feed_forward_length)");
    moe.gating = ExpertGating::kSoftmaxTopK;
    moe.renormalize = true;  // qwen3moe's norm_topk_prob; llama.cpp passes norm_w = true
    if (arch == Arch::kGptOss) {
      // llama.cpp's build_moe_ffn with SOFTMAX_WEIGHT, norm_w false, LLM_FFN_SWIGLU_OAI_MOE and
      // every bias.
      moe.gating = ExpertGating::kTopKSoftmax;
      moe.renormalize = false;
      moe.activation = ExpertActivation::kClampedSwiGlu;
      moe.router_bias = true;
      moe.expert_biases = true;
    }
  }
  if (arch == Arch::kMistral3) {
    // Q × (1 + s ln(1 + floor(pos / n))) after RoPE, n the YaRN original context (llama.cpp's
    // n_attn_temp_floor_scale = n_ctx_orig_yarn: rope.scaling.original_context_length, else the
    // training context). llama.cpp's mistral3 does not read attention.temperature_length: nor here.
    if (auto s = f.get_float(c->architecture + ".attention.temperature_scale"); s && *s != 0.0) {
      layer.attention.temperature_scale = static_cast<float>(*s);
      layer.attention.temperature_length = c->n_ctx_train;
      KVSTASH_RETURN_IF_ERROR(keys.optional("rope.scaling.original_context_length", &layer.attention.temperature_length));
    }
  }
  c->layers.assign(static_cast<std::size_t>(c->n_layers), layer);
  if (arch == Arch::kGemma3) KVSTASH_RETURN_IF_ERROR(read_windows(f, keys, 6, true, c));
  if (arch == Arch::kLlama && keys.has("attention.sliding_window")) {
    // Mistral 7B v0.1's window (4096) on every layer, as the model was trained. llama.cpp's llama
    // loader does not read this key: its output differs from ours once a prompt passes the window.
    int window = 0;
    KVSTASH_RETURN_IF_ERROR(keys.need("attention.sliding_window", &window));
    for (LayerSpec& l : c->layers) {
      l.attention.kind = AttentionKind::kSlidingWindow;
      l.attention.window = window;
    }
  }
  if (arch == Arch::kGptOss) {
    // gpt-oss needs its window (llama.cpp reads attention.sliding_window as required).
    if (!keys.has("attention.sliding_window")) return corrupt(f.path() + ": gpt-oss without attention.sliding_window");
    KVSTASH_RETURN_IF_ERROR(read_windows(f, keys, 2, false, c));
  }
  for (int i = 0; i < c->n_layers; ++i) {
    // Biases: qwen2 files have them; llama.cpp loads attn_{q,k,v}.bias as optional for every
    // architecture here and adds them when present. Taken from the file, per layer.
    const bool bias = f.find_tensor("blk." + std::to_string(i) + ".attn_q.bias") != nullptr;
    c->layers[static_cast<std::size_t>(i)].attention.qkv_bias = bias;
    c->layers[static_cast<std::size_t>(i)].attention.output_bias =
        f.find_tensor("blk." + std::to_string(i) + ".attn_output.bias") != nullptr;
  }
  auto name = f.get_string("general.name");
  c->name = name ? *name : std::filesystem::path(f.path()).stem().string();
  return check_runnable(*c);
}

}  // namespace kvstash
