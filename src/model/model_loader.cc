// Model::load: configuration from GGUF metadata, weight binding and validation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "model/fingerprint.h"
#include "model/model.h"

namespace kvstash {
namespace {

Expected<kernels::WeightType> weight_type_of(const gguf::TensorInfo& t) {
  switch (t.type) {
    case gguf::TensorType::kF32: return kernels::WeightType::kF32;
    case gguf::TensorType::kF16: return kernels::WeightType::kF16;
    case gguf::TensorType::kBF16: return kernels::WeightType::kBF16;
    case gguf::TensorType::kQ8_0: return kernels::WeightType::kQ8_0;
    case gguf::TensorType::kQ4_0: return kernels::WeightType::kQ4_0;
    case gguf::TensorType::kQ4_1: return kernels::WeightType::kQ4_1;
    case gguf::TensorType::kQ5_0: return kernels::WeightType::kQ5_0;
    case gguf::TensorType::kQ5_1: return kernels::WeightType::kQ5_1;
    case gguf::TensorType::kQ2_K: return kernels::WeightType::kQ2_K;
    case gguf::TensorType::kQ3_K: return kernels::WeightType::kQ3_K;
    case gguf::TensorType::kQ4_K: return kernels::WeightType::kQ4_K;
    case gguf::TensorType::kQ5_K: return kernels::WeightType::kQ5_K;
    case gguf::TensorType::kQ6_K: return kernels::WeightType::kQ6_K;
    default:
      return unsupported("tensor '" + t.name + "' has type " + gguf::tensor_type_name(t.type) +
                         ", which this engine does not run (supported: f32, f16, bf16, q8_0, q4_0, q4_1, "
                         "q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K)");
  }
}

class Binder {
 public:
  Binder(const gguf::File& file) : file_(file) {}

  Expected<kernels::WeightView> matrix(const std::string& name, std::int64_t cols, std::int64_t rows) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) return not_found(file_.path() + ": missing tensor '" + name + "'");
    if (t->dims.size() != 2 || static_cast<std::int64_t>(t->dims[0]) != cols ||
        static_cast<std::int64_t>(t->dims[1]) != rows) {
      return corrupt(file_.path() + ": tensor '" + name + "' has shape " + shape(*t) + ", expected [" +
                     std::to_string(cols) + ", " + std::to_string(rows) + "]");
    }
    auto type = weight_type_of(*t);
    if (!type) return Status(type.status().code(), file_.path() + ": " + type.status().message());
    kernels::WeightView w;
    w.type = *type;
    w.data = t->data;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = kernels::row_bytes_for(w.type, cols);
    if (w.row_bytes * static_cast<std::size_t>(rows) != t->n_bytes) {
      return corrupt(file_.path() + ": tensor '" + name + "' byte size does not match its shape");
    }
    return w;
  }

  // A 1-D tensor of n values in any float type, converted to f32.
  Expected<std::vector<float>> vector(const std::string& name, std::int64_t n) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) return not_found(file_.path() + ": missing tensor '" + name + "'");
    if (t->dims.size() != 1 || static_cast<std::int64_t>(t->dims[0]) != n) {
      return corrupt(file_.path() + ": tensor '" + name + "' has shape " + shape(*t) + ", expected [" +
                     std::to_string(n) + "]");
    }
    auto type = weight_type_of(*t);
    if (!type) return Status(type.status().code(), file_.path() + ": " + type.status().message());
    kernels::WeightView w{*type, t->data, 1, n, kernels::row_bytes_for(*type, n)};
    if (n % kernels::weight_block_elems(*type) != 0 || w.row_bytes != t->n_bytes) {
      return corrupt(file_.path() + ": tensor '" + name + "' is " + kernels::weight_type_name(*type) +
                     " with a length not a multiple of its block of " +
                     std::to_string(kernels::weight_block_elems(*type)));
    }
    std::vector<float> out(static_cast<std::size_t>(n));
    kernels::dequantize_rows(w, 0, 1, out.data());
    return out;
  }

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

 private:
  static std::string shape(const gguf::TensorInfo& t) {
    std::string s = "[";
    for (std::size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims[i]);
    return s + "]";
  }
  const gguf::File& file_;
};

Status read_config(const gguf::File& f, ModelConfig* c) {
  auto arch = f.get_string("general.architecture");
  if (!arch) return corrupt(f.path() + ": no general.architecture key");
  c->architecture = *arch;
  if (c->architecture == "llama") {
    c->rope_style = RopeStyle::kInterleaved;
  } else if (c->architecture == "qwen2") {
    c->rope_style = RopeStyle::kHalves;
  } else {
    return unsupported(f.path() + ": architecture '" + c->architecture +
                       "' is not supported (supported: llama, qwen2)");
  }
  const std::string& a = c->architecture;
  auto need_uint = [&](const std::string& key, int* out) -> Status {
    auto v = f.get_uint(a + "." + key);
    if (!v) return corrupt(f.path() + ": " + v.status().message());
    if (*v == 0 || *v > (1u << 24)) return corrupt(f.path() + ": " + a + "." + key + " = " + std::to_string(*v) + " is out of range");
    *out = static_cast<int>(*v);
    return Status::ok();
  };
  KVSTASH_RETURN_IF_ERROR(need_uint("block_count", &c->n_layers));
  KVSTASH_RETURN_IF_ERROR(need_uint("embedding_length", &c->n_embd));
  KVSTASH_RETURN_IF_ERROR(need_uint("feed_forward_length", &c->n_ff));
  KVSTASH_RETURN_IF_ERROR(need_uint("attention.head_count", &c->n_heads));
  c->n_kv_heads = c->n_heads;
  if (f.find(a + ".attention.head_count_kv")) KVSTASH_RETURN_IF_ERROR(need_uint("attention.head_count_kv", &c->n_kv_heads));
  c->n_ctx_train = 4096;
  if (f.find(a + ".context_length")) KVSTASH_RETURN_IF_ERROR(need_uint("context_length", &c->n_ctx_train));
  c->head_dim = c->n_embd / c->n_heads;
  if (f.find(a + ".attention.key_length")) KVSTASH_RETURN_IF_ERROR(need_uint("attention.key_length", &c->head_dim));
  if (c->n_heads % c->n_kv_heads != 0) return corrupt(f.path() + ": head_count is not a multiple of head_count_kv");
  if (c->head_dim % 2 != 0) return corrupt(f.path() + ": odd head dimension");
  if (auto rot = f.get_uint(a + ".rope.dimension_count"); rot && static_cast<int>(*rot) != c->head_dim) {
    return unsupported(f.path() + ": partial rotary embedding (rope.dimension_count " + std::to_string(*rot) +
                       " != head dim " + std::to_string(c->head_dim) + ")");
  }
  if (auto v = f.get_float(a + ".rope.freq_base")) c->rope_base = static_cast<float>(*v);
  if (auto v = f.get_float(a + ".attention.layer_norm_rms_epsilon")) c->rms_eps = static_cast<float>(*v);
  if (auto type = f.get_string(a + ".rope.scaling.type"); type && *type != "none" && *type != "llama3") {
    if (auto factor = f.get_float(a + ".rope.scaling.factor"); factor && *factor != 1.0) {
      return unsupported(f.path() + ": rope scaling '" + *type + "' is not supported");
    }
  }
  auto name = f.get_string("general.name");
  c->name = name ? *name : std::filesystem::path(f.path()).stem().string();
  return Status::ok();
}

}  // namespace

int ForwardBatch::logit_rows() const {
  int rows = 0;
  for (const auto& s : sequences) rows += !s.want_logits ? 0 : s.all_logits ? s.n_new : 1;
  return rows;
}

Model::~Model() = default;

Expected<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelLoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  KVSTASH_RETURN_IF_ERROR(m->bind(path));
  if (options.weights == WeightMemory::kHugePages) m->copy_weights_to_huge_pages();
  return m;
}

std::vector<const kernels::WeightView*> Model::weight_matrices() const {
  std::vector<const kernels::WeightView*> out;
  for (kernels::WeightView* w : const_cast<Model*>(this)->weight_matrices()) out.push_back(w);
  return out;
}

std::vector<kernels::WeightView*> Model::weight_matrices() {
  std::vector<kernels::WeightView*> out;
  for (Layer& L : layers_) {
    for (kernels::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) out.push_back(w);
  }
  out.push_back(&output_);
  if (!config_.tied_output) out.push_back(&token_embd_);
  return out;
}

void Model::copy_weights_to_huge_pages() {
  constexpr std::size_t kAlign = 64;  // each matrix starts on a cache line
  auto padded = [](std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  const std::vector<kernels::WeightView*> matrices = weight_matrices();
  std::size_t total = 0;
  for (const kernels::WeightView* w : matrices) {
    total += padded(std::max(kernels::repack_bytes(*w), w->row_bytes * static_cast<std::size_t>(w->rows)));
  }
  HugePageBuffer buffer = HugePageBuffer::allocate(total);
  if (buffer.data() == nullptr) return;  // stays on the file mapping; the summary says so
  std::size_t at = 0;
  for (kernels::WeightView* w : matrices) {
    const std::size_t n = w->row_bytes * static_cast<std::size_t>(w->rows);
    if (const std::size_t repacked = kernels::repack_bytes(*w); repacked > 0) {
      *w = kernels::repack_for_decode(*w, buffer.data() + at);
      ++repacked_matrices_;
      at += padded(repacked);
    } else {
      std::memcpy(buffer.data() + at, w->data, n);
      w->data = buffer.data() + at;
      at += padded(n);
    }
  }
  if (config_.tied_output) token_embd_ = output_;
  weights_ = std::move(buffer);
}

std::string Model::weight_memory_summary() const {
  auto mib = [](double bytes) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", bytes / (1024.0 * 1024.0));
    return std::string(s);
  };
  std::size_t bytes = 0;
  for (const kernels::WeightView* w : weight_matrices()) bytes += w->row_bytes * static_cast<std::size_t>(w->rows);
  if (weights_.data() == nullptr) return "weights: " + mib(static_cast<double>(bytes)) + " mapped from the file";
  const long long huge = weights_.huge_bytes();
  std::string s = "weights: " + mib(static_cast<double>(bytes)) + " copied into huge-page memory (";
  if (!weights_.huge_pages_advised()) {
    s += "the kernel refused MADV_HUGEPAGE: 4 KiB pages)";
  } else {
    s += (huge < 0 ? std::string("huge pages advised") : mib(static_cast<double>(huge)) + " in huge pages") + ")";
  }
  if (repacked_matrices_ > 0) {
    s += "; " + std::to_string(repacked_matrices_) + (repacked_matrices_ == 1 ? " matrix" : " matrices") +
         " interleaved by 16 rows for the " + (std::string(kernels::simd_path()) == "avx2" ? "AVX2" : "AVX-512") + " kernels";
  }
  return s;
}

Status Model::bind(const std::string& path) {
  auto file = gguf::File::open(path);
  if (!file) return file.status();
  file_ = std::move(file.value());
  KVSTASH_RETURN_IF_ERROR(read_config(*file_, &config_));
  auto tok = Tokenizer::from_gguf(*file_);
  if (!tok) return Status(tok.status().code(), path + ": " + tok.status().message());
  tokenizer_ = std::move(tok.value());

  ModelConfig& c = config_;
  const gguf::TensorInfo* embd = file_->find_tensor("token_embd.weight");
  if (!embd) return not_found(path + ": missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) return corrupt(path + ": token_embd.weight is not a matrix");
  c.n_vocab = static_cast<int>(embd->dims[1]);
  if (tokenizer_->vocab_size() > static_cast<std::size_t>(c.n_vocab)) {
    return corrupt(path + ": the tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                   " tokens but token_embd.weight only " + std::to_string(c.n_vocab) + " rows");
  }
  Binder b(*file_);
  const std::int64_t d = c.n_embd, q_dim = std::int64_t{c.n_heads} * c.head_dim, kv_dim = c.kv_row_elems();
  auto assign = [](auto& dst, auto&& r) -> Status {
    if (!r) return r.status();
    dst = std::move(*r);
    return Status::ok();
  };
  KVSTASH_RETURN_IF_ERROR(assign(token_embd_, b.matrix("token_embd.weight", d, c.n_vocab)));
  KVSTASH_RETURN_IF_ERROR(assign(output_norm_, b.vector("output_norm.weight", d)));
  c.tied_output = !b.has("output.weight");
  if (c.tied_output) {
    output_ = token_embd_;
  } else {
    KVSTASH_RETURN_IF_ERROR(assign(output_, b.matrix("output.weight", d, c.n_vocab)));
  }
  c.has_qkv_bias = b.has("blk.0.attn_q.bias");
  layers_.resize(static_cast<std::size_t>(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    Layer& L = layers_[static_cast<std::size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    KVSTASH_RETURN_IF_ERROR(assign(L.attn_norm, b.vector(p + "attn_norm.weight", d)));
    KVSTASH_RETURN_IF_ERROR(assign(L.wq, b.matrix(p + "attn_q.weight", d, q_dim)));
    KVSTASH_RETURN_IF_ERROR(assign(L.wk, b.matrix(p + "attn_k.weight", d, kv_dim)));
    KVSTASH_RETURN_IF_ERROR(assign(L.wv, b.matrix(p + "attn_v.weight", d, kv_dim)));
    KVSTASH_RETURN_IF_ERROR(assign(L.wo, b.matrix(p + "attn_output.weight", q_dim, d)));
    if (c.has_qkv_bias) {
      KVSTASH_RETURN_IF_ERROR(assign(L.bq, b.vector(p + "attn_q.bias", q_dim)));
      KVSTASH_RETURN_IF_ERROR(assign(L.bk, b.vector(p + "attn_k.bias", kv_dim)));
      KVSTASH_RETURN_IF_ERROR(assign(L.bv, b.vector(p + "attn_v.bias", kv_dim)));
    }
    KVSTASH_RETURN_IF_ERROR(assign(L.ffn_norm, b.vector(p + "ffn_norm.weight", d)));
    KVSTASH_RETURN_IF_ERROR(assign(L.w_gate, b.matrix(p + "ffn_gate.weight", d, c.n_ff)));
    KVSTASH_RETURN_IF_ERROR(assign(L.w_up, b.matrix(p + "ffn_up.weight", d, c.n_ff)));
    KVSTASH_RETURN_IF_ERROR(assign(L.w_down, b.matrix(p + "ffn_down.weight", c.n_ff, d)));
  }
  // RoPE frequencies. Llama 3.1+ files carry per-pair divisors in rope_freqs.weight (llama3 scaling).
  const int half = c.head_dim / 2;
  std::vector<float> factors(static_cast<std::size_t>(half), 1.0f);
  if (b.has("rope_freqs.weight")) KVSTASH_RETURN_IF_ERROR(assign(factors, b.vector("rope_freqs.weight", half)));
  rope_inv_freq_.resize(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    rope_inv_freq_[static_cast<std::size_t>(i)] = static_cast<float>(
        std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.head_dim) / factors[static_cast<std::size_t>(i)]);
  }
  auto fp = model_fingerprint(*file_, c);
  if (!fp) return fp.status();
  fingerprint_ = *fp;
  return Status::ok();
}

std::string Model::fingerprint_hex() const {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (auto byte : fingerprint_) {
    s += kHex[byte >> 4];
    s += kHex[byte & 15];
  }
  return s;
}

std::size_t Model::weight_bytes_per_token() const {
  std::size_t bytes = output_.row_bytes * static_cast<std::size_t>(output_.rows);
  for (const Layer& L : layers_) {
    for (const auto* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      bytes += w->row_bytes * static_cast<std::size_t>(w->rows);
    }
  }
  return bytes;
}

}  // namespace kvstash
