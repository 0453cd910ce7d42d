#include "modelgen/modelgen.h"

#include <memory>

#include "modelgen/builtin_vocab.h"
#include "modelgen/quant_recipe.h"

namespace kvstash::modelgen {
namespace {

using gguf::TensorType;
using gguf::Value;

constexpr std::uint32_t kAlignment = 32;          // GGUF's default, written explicitly
constexpr std::uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION, written by llama.cpp's quantizer

std::string lowercase_arch_key(const std::string& arch, const char* suffix) { return arch + "." + suffix; }

// Copies tokenizer.* from a vocabulary GGUF; returns its token count in *n_vocab.
Status copy_vocabulary(const std::string& path, ModelPlan* plan, std::uint64_t* n_vocab) {
  auto vocab = gguf::File::open(path);
  if (!vocab) return vocab.status();
  const gguf::Value* tokens = (*vocab)->find("tokenizer.ggml.tokens");
  const auto* array = tokens != nullptr ? std::get_if<gguf::Array>(&tokens->data) : nullptr;
  if (array == nullptr || array->elem_type != gguf::ValueType::kString || array->items.empty()) {
    return unsupported(path + ": no tokenizer.ggml.tokens string array; not a vocabulary file");
  }
  *n_vocab = array->items.size();
  for (const auto& [key, value] : (*vocab)->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) plan->metadata.emplace_back(key, value);
  }
  return Status::ok();
}

void add_tensor(ModelPlan* plan, std::string name, TensorType type, std::vector<std::uint64_t> dims, Init init, int layer) {
  plan->tensors.push_back(TensorPlan{std::move(name), type, std::move(dims), init, layer});
}

// expert_type: the experts' 3-D stacks (MXFP4 in gpt-oss files), matrix_type the other matrices.
void plan_tensors(ModelPlan* plan, TensorType matrix_type, TensorType expert_type) {
  const ModelPreset& p = plan->preset;
  const std::uint64_t embd = p.n_embd, vocab = p.n_vocab, q_dim = std::uint64_t{p.n_heads} * p.head_dim,
                      kv_dim = std::uint64_t{p.n_kv_heads} * p.head_dim, ff = p.n_ff;
  add_tensor(plan, "token_embd.weight", matrix_type, {embd, vocab}, Init::kEmbedding, -1);
  if (p.llama3_rope_freqs) add_tensor(plan, "rope_freqs.weight", TensorType::kF32, {p.head_dim / 2}, Init::kRopeFreqs, -1);
  if (p.longrope_original_ctx > 0) {
    add_tensor(plan, "rope_factors_long.weight", TensorType::kF32, {p.head_dim / 2}, Init::kRopeFactors, -1);
    add_tensor(plan, "rope_factors_short.weight", TensorType::kF32, {p.head_dim / 2}, Init::kRopeFactors, -1);
  }
  for (std::uint32_t l = 0; l < p.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const int li = static_cast<int>(l);
    add_tensor(plan, b + "attn_norm.weight", TensorType::kF32, {embd}, Init::kNorm, li);
    if (p.fused_qkv_gate_up) {
      add_tensor(plan, b + "attn_qkv.weight", matrix_type, {embd, q_dim + 2 * kv_dim}, Init::kMatrix, li);
    } else {
      add_tensor(plan, b + "attn_q.weight", matrix_type, {embd, q_dim}, Init::kMatrix, li);
      add_tensor(plan, b + "attn_k.weight", matrix_type, {embd, kv_dim}, Init::kMatrix, li);
      add_tensor(plan, b + "attn_v.weight", matrix_type, {embd, kv_dim}, Init::kMatrix, li);
    }
    if (p.qkv_bias) {
      add_tensor(plan, b + "attn_q.bias", TensorType::kF32, {q_dim}, Init::kBias, li);
      add_tensor(plan, b + "attn_k.bias", TensorType::kF32, {kv_dim}, Init::kBias, li);
      add_tensor(plan, b + "attn_v.bias", TensorType::kF32, {kv_dim}, Init::kBias, li);
    }
    if (p.qk_norm) {
      add_tensor(plan, b + "attn_q_norm.weight", TensorType::kF32, {p.head_dim}, Init::kNorm, li);
      add_tensor(plan, b + "attn_k_norm.weight", TensorType::kF32, {p.head_dim}, Init::kNorm, li);
    }
    add_tensor(plan, b + "attn_output.weight", matrix_type, {q_dim, embd}, Init::kMatrix, li);
    if (p.gpt_oss_layout) {
      add_tensor(plan, b + "attn_output.bias", TensorType::kF32, {embd}, Init::kBias, li);
      add_tensor(plan, b + "attn_sinks.weight", TensorType::kF32, {p.n_heads}, Init::kBias, li);
    }
    if (p.post_norms || p.gpt_oss_layout) {
      add_tensor(plan, b + "post_attention_norm.weight", TensorType::kF32, {embd}, Init::kNorm, li);
    }
    if (!p.gpt_oss_layout) add_tensor(plan, b + "ffn_norm.weight", TensorType::kF32, {embd}, Init::kNorm, li);
    if (p.n_experts > 0) {
      // The router stays F32 as llama.cpp's converter writes it; the experts are 3-D, experts slowest.
      const std::uint64_t n_exp = p.n_experts, ff_exp = p.n_ff_expert;
      add_tensor(plan, b + "ffn_gate_inp.weight", TensorType::kF32, {embd, n_exp}, Init::kMatrix, li);
      add_tensor(plan, b + "ffn_gate_exps.weight", expert_type, {embd, ff_exp, n_exp}, Init::kMatrix, li);
      add_tensor(plan, b + "ffn_up_exps.weight", expert_type, {embd, ff_exp, n_exp}, Init::kMatrix, li);
      add_tensor(plan, b + "ffn_down_exps.weight", expert_type, {ff_exp, embd, n_exp}, Init::kMatrix, li);
      if (p.gpt_oss_layout) {
        add_tensor(plan, b + "ffn_gate_inp.bias", TensorType::kF32, {n_exp}, Init::kBias, li);
        add_tensor(plan, b + "ffn_gate_exps.bias", TensorType::kF32, {ff_exp, n_exp}, Init::kBias, li);
        add_tensor(plan, b + "ffn_up_exps.bias", TensorType::kF32, {ff_exp, n_exp}, Init::kBias, li);
        add_tensor(plan, b + "ffn_down_exps.bias", TensorType::kF32, {embd, n_exp}, Init::kBias, li);
      }
      continue;
    }
    if (p.fused_qkv_gate_up) {
      add_tensor(plan, b + "ffn_up.weight", matrix_type, {embd, 2 * ff}, Init::kMatrix, li);
    } else {
      add_tensor(plan, b + "ffn_gate.weight", matrix_type, {embd, ff}, Init::kMatrix, li);
      add_tensor(plan, b + "ffn_up.weight", matrix_type, {embd, ff}, Init::kMatrix, li);
    }
    add_tensor(plan, b + "ffn_down.weight", matrix_type, {ff, embd}, Init::kMatrix, li);
    if (p.post_norms) add_tensor(plan, b + "post_ffw_norm.weight", TensorType::kF32, {embd}, Init::kNorm, li);
  }
  add_tensor(plan, "output_norm.weight", TensorType::kF32, {embd}, Init::kNorm, -1);
  if (!p.tied_output) add_tensor(plan, "output.weight", matrix_type, {embd, vocab}, Init::kMatrix, -1);
}

}  // namespace

int file_type_of(TensorType type) {
  switch (type) {
    case TensorType::kF32: return 0;   // LLAMA_FTYPE_ALL_F32
    case TensorType::kF16: return 1;   // LLAMA_FTYPE_MOSTLY_F16
    case TensorType::kQ8_0: return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case TensorType::kBF16: return 32; // LLAMA_FTYPE_MOSTLY_BF16
    case TensorType::kMXFP4: return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE: the experts only
    default: return -1;
  }
}

Expected<ModelPlan> describe_model(const GenerateOptions& options) {
  const ModelPreset* preset = find_preset(options.preset);
  if (preset == nullptr) return invalid_argument("unknown preset '" + options.preset + "'");
  const QuantScheme* scheme = nullptr;
  if (!options.scheme.empty()) {
    scheme = find_quant_scheme(options.scheme);
    if (scheme == nullptr) return invalid_argument("unknown quantization type '" + options.scheme + "'");
  }
  const int file_type = scheme != nullptr ? static_cast<int>(scheme->file_type) : file_type_of(options.type);
  if (file_type < 0) {
    return invalid_argument("weight type " + gguf::tensor_type_name(options.type) + " cannot be generated (f32, f16, bf16, q8_0, mxfp4)");
  }
  if (options.type == TensorType::kMXFP4 && scheme == nullptr && preset->n_experts == 0) {
    return invalid_argument("mxfp4 is for the experts of a MoE preset (gpt-oss), not '" + options.preset + "'");
  }

  ModelPlan plan;
  plan.preset = *preset;
  plan.preset.qk_concentration = options.qk_concentration;
  if (options.qk_concentration > 0 && !preset->qkv_bias) {
    return invalid_argument("--qk-concentration needs a preset with Q/K biases (qwen2 shapes), not '" + options.preset + "'");
  }
  const std::string& arch = preset->arch;
  auto& md = plan.metadata;
  md.emplace_back("general.architecture", Value::string(arch));
  md.emplace_back("general.name", Value::string("kvstash-random " + preset->name));
  md.emplace_back("general.alignment", Value::u32(kAlignment));
  md.emplace_back("general.file_type", Value::u32(static_cast<std::uint32_t>(file_type)));
  if (options.type == TensorType::kQ8_0 || options.type == TensorType::kMXFP4 ||
      (scheme != nullptr && is_quantized_scheme(*scheme))) {
    md.emplace_back("general.quantization_version", Value::u32(kQuantizationVersion));
  }

  // The vocabulary decides n_vocab, which the architecture keys need; collect it first.
  ModelPlan vocab_part;
  std::uint64_t n_vocab = 0;
  if (!options.vocab_path.empty()) {
    KVSTASH_RETURN_IF_ERROR(copy_vocabulary(options.vocab_path, &vocab_part, &n_vocab));
    if (preset->n_vocab != 0 && n_vocab != preset->n_vocab) {
      plan.note = "vocabulary " + options.vocab_path + " has " + std::to_string(n_vocab) + " tokens; preset " +
                  preset->name + " has " + std::to_string(preset->n_vocab) + "; using " + std::to_string(n_vocab);
    }
  } else {
    n_vocab = preset->n_vocab != 0 ? preset->n_vocab : builtin_vocab_size(arch);
    auto kv = builtin_tokenizer_metadata(arch, n_vocab);
    if (!kv) return kv.status();
    vocab_part.metadata = std::move(*kv);
  }
  plan.preset.n_vocab = n_vocab;

  const ModelPreset& p = plan.preset;
  md.emplace_back(lowercase_arch_key(arch, "context_length"), Value::u32(p.n_ctx));
  md.emplace_back(lowercase_arch_key(arch, "embedding_length"), Value::u32(p.n_embd));
  md.emplace_back(lowercase_arch_key(arch, "block_count"), Value::u32(p.n_layers));
  md.emplace_back(lowercase_arch_key(arch, "feed_forward_length"), Value::u32(p.n_ff));
  md.emplace_back(lowercase_arch_key(arch, "attention.head_count"), Value::u32(p.n_heads));
  md.emplace_back(lowercase_arch_key(arch, "attention.head_count_kv"), Value::u32(p.n_kv_heads));
  md.emplace_back(lowercase_arch_key(arch, "rope.freq_base"), Value::f32(p.rope_base));
  md.emplace_back(lowercase_arch_key(arch, "attention.layer_norm_rms_epsilon"), Value::f32(p.rms_eps));
  md.emplace_back(lowercase_arch_key(arch, "rope.dimension_count"), Value::u32(p.head_dim));
  md.emplace_back(lowercase_arch_key(arch, "vocab_size"), Value::u32(static_cast<std::uint32_t>(n_vocab)));
  // llama.cpp's converter writes them whenever config.json has head_dim (mistral3: 128 over 3072 / 32).
  if (p.qk_norm || p.gpt_oss_layout || std::uint64_t{p.n_heads} * p.head_dim != p.n_embd) {
    md.emplace_back(lowercase_arch_key(arch, "attention.key_length"), Value::u32(p.head_dim));
    md.emplace_back(lowercase_arch_key(arch, "attention.value_length"), Value::u32(p.head_dim));
  }
  if (p.sliding_window > 0) {
    md.emplace_back(lowercase_arch_key(arch, "attention.sliding_window"), Value::u32(p.sliding_window));
    if (arch == "gemma3") md.emplace_back(lowercase_arch_key(arch, "rope.freq_base_swa"), Value::f32(p.rope_base_swa));
  }
  if (p.yarn_factor > 0) {
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.type"), Value::string("yarn"));
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.factor"), Value::f32(p.yarn_factor));
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.original_context_length"), Value::u32(p.yarn_original_ctx));
  }
  if (p.yarn_log_multiplier > 0) {
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.yarn_beta_fast"), Value::f32(32.0f));
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.yarn_beta_slow"), Value::f32(1.0f));
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.yarn_log_multiplier"), Value::f32(p.yarn_log_multiplier));
  }
  if (p.attn_temperature_scale > 0) {
    md.emplace_back(lowercase_arch_key(arch, "attention.temperature_scale"), Value::f32(p.attn_temperature_scale));
  }
  if (p.longrope_original_ctx > 0) {
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.original_context_length"), Value::u32(p.longrope_original_ctx));
    md.emplace_back(lowercase_arch_key(arch, "rope.scaling.attn_factor"), Value::f32(p.rope_attn_factor));
  }
  if (p.n_experts > 0) {
    md.emplace_back(lowercase_arch_key(arch, "expert_count"), Value::u32(p.n_experts));
    md.emplace_back(lowercase_arch_key(arch, "expert_used_count"), Value::u32(p.n_experts_used));
    md.emplace_back(lowercase_arch_key(arch, "expert_feed_forward_length"), Value::u32(p.n_ff_expert));
  }
  for (auto& kv : vocab_part.metadata) md.push_back(std::move(kv));

  // mxfp4 (gpt-oss's own files): the experts in MXFP4, the other matrices in BF16 as the checkpoint
  // stores them.
  const TensorType matrix_type = scheme != nullptr ? TensorType::kF32
                                 : options.type == TensorType::kMXFP4 ? TensorType::kBF16 : options.type;
  plan_tensors(&plan, matrix_type, scheme == nullptr ? options.type : TensorType::kF32);
  if (scheme != nullptr) {
    const ModelShapeForQuant shape{static_cast<int>(p.n_layers), static_cast<int>(p.n_heads / p.n_kv_heads),
                                   !p.tied_output, static_cast<int>(p.n_experts)};
    for (TensorPlan& t : plan.tensors) t.type = choose_tensor_type(*scheme, t.name, t.dims, t.type, shape);
  }
  for (const TensorPlan& t : plan.tensors) {
    std::size_t block_elems = 1, block_bytes = 4;
    gguf::tensor_type_layout(t.type, &block_elems, &block_bytes);
    plan.n_params += t.n_elements();
    plan.n_bytes += t.n_elements() / block_elems * block_bytes;
  }
  return plan;
}

Status generate_model(const GenerateOptions& options) {
  if (options.out_path.empty()) return invalid_argument("no output path");
  auto plan = describe_model(options);
  if (!plan) return plan.status();
  gguf::Writer writer;
  for (const auto& [key, value] : plan->metadata) writer.set(key, value);
  for (const TensorPlan& t : plan->tensors) KVSTASH_RETURN_IF_ERROR(writer.add_tensor(t.name, t.type, t.dims));
  int reported_layer = -1;
  const ModelPlan& p = *plan;
  return writer.write(options.out_path, [&](std::size_t i, std::span<std::uint8_t> out) {
    const TensorPlan& t = p.tensors[i];
    if (options.progress && t.layer > reported_layer) {
      reported_layer = t.layer;
      options.progress("layer " + std::to_string(t.layer + 1) + "/" + std::to_string(p.preset.n_layers));
    }
    return fill_tensor(p.preset, t, options.seed, out);
  });
}

}  // namespace kvstash::modelgen
