// Model::load: configuration from GGUF metadata (model/architectures.cc), weight binding per the
// layers' description, and validation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "model/architectures.h"
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
    case gguf::TensorType::kMXFP4: return kernels::WeightType::kMxfp4;
    default:
      return unsupported("tensor '" + t.name + "' has type " + gguf::tensor_type_name(t.type) +
                         ", which this engine does not run (supported: f32, f16, bf16, q8_0, q4_0, q4_1, "
                         "q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, mxfp4)");
  }
}

// Rows [first, first + n) of w: a fused matrix's part (phi3's attn_qkv, ffn_up).
kernels::WeightView row_slice(const kernels::WeightView& w, std::int64_t first, std::int64_t n) {
  kernels::WeightView v = w;
  v.data = static_cast<const std::uint8_t*>(w.data) + static_cast<std::size_t>(first) * w.row_bytes;
  v.rows = n;
  return v;
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

  // A 3-D tensor of n_experts matrices of rows x cols (GGUF dims [cols, rows, n_experts]), one
  // view per expert over its slice.
  Expected<std::vector<kernels::WeightView>> experts(const std::string& name, std::int64_t cols, std::int64_t rows,
                                                     std::int64_t n_experts) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) return not_found(file_.path() + ": missing tensor '" + name + "'");
    if (t->dims.size() != 3 || static_cast<std::int64_t>(t->dims[0]) != cols ||
        static_cast<std::int64_t>(t->dims[1]) != rows || static_cast<std::int64_t>(t->dims[2]) != n_experts) {
      return corrupt(file_.path() + ": tensor '" + name + "' has shape " + shape(*t) + ", expected [" +
                     std::to_string(cols) + ", " + std::to_string(rows) + ", " + std::to_string(n_experts) + "]");
    }
    auto type = weight_type_of(*t);
    if (!type) return Status(type.status().code(), file_.path() + ": " + type.status().message());
    const std::size_t row_bytes = kernels::row_bytes_for(*type, cols);
    const std::size_t expert_bytes = row_bytes * static_cast<std::size_t>(rows);
    if (expert_bytes * static_cast<std::size_t>(n_experts) != t->n_bytes) {
      return corrupt(file_.path() + ": tensor '" + name + "' byte size does not match its shape");
    }
    std::vector<kernels::WeightView> views;
    for (std::int64_t e = 0; e < n_experts; ++e) {
      views.push_back({*type, t->data + static_cast<std::size_t>(e) * expert_bytes, rows, cols, row_bytes});
    }
    return views;
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

  // A 2-D tensor of rows x cols values in a float type (per-expert biases), as f32, row after row.
  Expected<std::vector<float>> matrix_values(const std::string& name, std::int64_t cols, std::int64_t rows) {
    auto m = matrix(name, cols, rows);
    if (!m) return m.status();
    if (kernels::is_quantized(m->type)) {
      return unsupported(file_.path() + ": tensor '" + name + "' is " + kernels::weight_type_name(m->type) +
                         " (supported: a float type)");
    }
    std::vector<float> out(static_cast<std::size_t>(rows * cols));
    kernels::dequantize_rows(*m, 0, rows, out.data());
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

}  // namespace

int ForwardBatch::logit_rows() const {
  int rows = 0;
  for (const auto& s : sequences) rows += !s.want_logits ? 0 : s.all_logits ? s.n_new : 1;
  return rows;
}

Model::~Model() {
  if (background_copy_.joinable()) background_copy_.join();
}

Expected<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelLoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  const auto start = std::chrono::steady_clock::now();
  KVSTASH_RETURN_IF_ERROR(m->bind(path, options));
  m->report_.map_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - m->report_.fingerprint_seconds;
  if (options.weights == WeightMemory::kHugePages) m->prepare_weights(options);
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
    for (kernels::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo}) out.push_back(w);
    if (L.experts.gate.empty()) {
      for (kernels::WeightView* w : {&L.w_gate, &L.w_up, &L.w_down}) out.push_back(w);
      continue;
    }
    out.push_back(&L.experts.router);
    for (std::size_t e = 0; e < L.experts.gate.size(); ++e) {
      for (kernels::WeightView* w : {&L.experts.gate[e], &L.experts.up[e], &L.experts.down[e]}) out.push_back(w);
    }
  }
  out.push_back(&output_);
  if (!config_.tied_output) out.push_back(&token_embd_);
  return out;
}

std::vector<Model::PendingCopy> Model::copy_weights_to_huge_pages(bool background) {
  constexpr std::size_t kAlign = 64;  // each matrix starts on a cache line
  auto padded = [](std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  const std::vector<kernels::WeightView*> matrices = weight_matrices();
  std::size_t total = 0;
  for (const kernels::WeightView* w : matrices) {
    total += padded(std::max(kernels::repack_bytes(*w), w->row_bytes * static_cast<std::size_t>(w->rows)));
  }
  HugePageBuffer buffer = HugePageBuffer::allocate(total);
  if (buffer.data() == nullptr) return {};  // stays on the file mapping; the summary says so
  std::size_t at = 0;
  prepared_table_.clear();
  std::vector<PendingCopy> pending;
  for (kernels::WeightView* w : matrices) {
    const std::size_t n = w->row_bytes * static_cast<std::size_t>(w->rows);
    const std::size_t begin = at;
    if (const std::size_t repacked = kernels::repack_bytes(*w); repacked > 0) {
      *w = kernels::repack_for_decode(*w, buffer.data() + at);
      ++repacked_matrices_;
      at += padded(repacked);
    } else if (background) {
      pending.push_back({w, w->data, buffer.data() + at, n});
      at += padded(n);
    } else {
      std::memcpy(buffer.data() + at, w->data, n);
      w->data = buffer.data() + at;
      at += padded(n);
    }
    prepared_table_.push_back({static_cast<std::uint32_t>(w->type), w->rows, w->cols, w->row_bytes, begin});
  }
  if (config_.tied_output) token_embd_ = output_;
  prepared_bytes_ = at;
  weights_ = std::move(buffer);
  return pending;
}

void Model::start_background_copy(std::vector<PendingCopy> pending, std::function<void()> before_swap) {
  for (const PendingCopy& p : pending) report_.background_bytes += p.bytes;
  std::promise<double> done;
  background_done_ = done.get_future().share();
  background_.store(true, std::memory_order_release);
  background_copy_ = std::thread([this, pending = std::move(pending), before_swap = std::move(before_swap),
                                  done = std::move(done)]() mutable {
    // Below the serving threads (a thread's nice value is its own on Linux): requests answered
    // from the mapping meanwhile come first, and the copy still ends under load (the idle class
    // would wait for an idle core that a busy server never has).
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    const auto start = std::chrono::steady_clock::now();
    for (const PendingCopy& p : pending) std::memcpy(p.to, p.from, p.bytes);
    if (before_swap) before_swap();
    {
      std::unique_lock swap(weights_swap_);  // between two passes of forward()
      for (const PendingCopy& p : pending) p.view->data = p.to;
      if (config_.tied_output) token_embd_.data = output_.data;  // the one field that moved
    }
    background_.store(false, std::memory_order_release);
    done.set_value(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
}

double Model::wait_weights_prepared() const {
  const std::shared_future<double> done = background_done_;  // a copy per waiting thread
  return done.valid() ? done.get() : 0.0;
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
  if (!weights_prepared()) {
    return "weights: " + mib(static_cast<double>(bytes)) + " (" + mib(static_cast<double>(report_.background_bytes)) +
           " read from the file mapping while a background thread copies them into huge-page memory" +
           (repacked_matrices_ > 0 ? "; " + std::to_string(repacked_matrices_) + " matrices interleaved by 16 rows already)" : ")");
  }
  const long long huge = weights_.huge_bytes();
  std::string s = "weights: " + mib(static_cast<double>(bytes)) +
                  (weights_.file_backed() ? " mapped from the prepared-weights file (" : " copied into huge-page memory (");
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

Status Model::bind(const std::string& path, const ModelLoadOptions& options) {
  auto file = gguf::File::open(path);
  if (!file) return file.status();
  file_ = std::move(file.value());
  if (options.weights == WeightMemory::kHugePages && !options.weights_cache_dir.empty()) {
    // The prepared file is read from here on, beside the probe, the tokenizer and the binding:
    // named by the fingerprint the sidecar remembers for this path, size and mtime, which the
    // probe below then confirms. (Not before the GGUF's metadata is parsed: a cold parse queued
    // behind the read's 128 MiB in flight took up to a second.)
    if (std::optional<Digest> remembered = unverified_fingerprint(path)) {
      fingerprint_ = *remembered;
      start_prepared_read(options.weights_cache_dir);
    }
  }
  KVSTASH_RETURN_IF_ERROR(describe_architecture(*file_, &config_));
  ModelConfig& c = config_;
  const gguf::TensorInfo* embd = file_->find_tensor("token_embd.weight");
  if (!embd) return not_found(path + ": missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) return corrupt(path + ": token_embd.weight is not a matrix");
  c.n_vocab = static_cast<int>(embd->dims[1]);
  // The fingerprint needs only the configuration above; known this early, it names the
  // prepared-weights file, whose read then overlaps building the tokenizer and binding.
  const auto fingerprint_start = std::chrono::steady_clock::now();
  const FingerprintProbe probe = probe_fingerprint(*file_);
  if (prepared_read_.valid() && probe.remembered != fingerprint_) {
    // The read started above is of the file the sidecar named, and the probe says the sidecar is
    // not this file's (replaced in place): that read is of no use. (Rare; waited for.)
    prepared_read_.wait();
    prepared_read_ = {};
  }
  if (probe.remembered) {
    fingerprint_ = *probe.remembered;
    if (options.weights == WeightMemory::kHugePages && !options.weights_cache_dir.empty() && !prepared_read_.valid()) {
      start_prepared_read(options.weights_cache_dir);
    }
  } else if (options.weights == WeightMemory::kHugePages) {
    // A first start of this file: the hash reads all of it, and so will the copy of the weights
    // (prepare_weights); both at once, on the two halves of the machine, read it from disk once.
    // Nothing was prepared for a file never fingerprinted (at worst the same model under another
    // path: its file is then not needed).
    const auto hash_start = std::chrono::steady_clock::now();
    fingerprint_hash_ = std::async(std::launch::async, [this, file = file_.get(), config = c, p = probe.probe, hash_start] {
      const Digest d = hash_fingerprint(*file, config, p);
      report_.hashed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - hash_start).count();
      return d;
    });
  } else {
    fingerprint_ = hash_fingerprint(*file_, c, probe.probe);
  }
  report_.fingerprint_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fingerprint_start).count();

  auto tok = Tokenizer::from_gguf(*file_);
  if (!tok) return Status(tok.status().code(), path + ": " + tok.status().message());
  tokenizer_ = std::move(tok.value());
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
  layers_.resize(static_cast<std::size_t>(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    Layer& L = layers_[static_cast<std::size_t>(i)];
    const LayerSpec& spec = c.layers[static_cast<std::size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    KVSTASH_RETURN_IF_ERROR(assign(L.attn_norm, b.vector(p + "attn_norm.weight", d)));
    if (b.has(p + "attn_qkv.weight")) {
      // phi3: one matrix whose rows are Q's, then K's, then V's; views over its row ranges.
      if (b.has(p + "attn_qkv.bias")) return unsupported(path + ": " + p + "attn_qkv.bias is not supported (supported: no fused Q/K/V bias)");
      kernels::WeightView qkv;
      KVSTASH_RETURN_IF_ERROR(assign(qkv, b.matrix(p + "attn_qkv.weight", d, q_dim + 2 * kv_dim)));
      L.wq = row_slice(qkv, 0, q_dim);
      L.wk = row_slice(qkv, q_dim, kv_dim);
      L.wv = row_slice(qkv, q_dim + kv_dim, kv_dim);
    } else {
      KVSTASH_RETURN_IF_ERROR(assign(L.wq, b.matrix(p + "attn_q.weight", d, q_dim)));
      KVSTASH_RETURN_IF_ERROR(assign(L.wk, b.matrix(p + "attn_k.weight", d, kv_dim)));
      KVSTASH_RETURN_IF_ERROR(assign(L.wv, b.matrix(p + "attn_v.weight", d, kv_dim)));
    }
    KVSTASH_RETURN_IF_ERROR(assign(L.wo, b.matrix(p + "attn_output.weight", q_dim, d)));
    if (spec.attention.qkv_bias) {
      KVSTASH_RETURN_IF_ERROR(assign(L.bq, b.vector(p + "attn_q.bias", q_dim)));
      KVSTASH_RETURN_IF_ERROR(assign(L.bk, b.vector(p + "attn_k.bias", kv_dim)));
      KVSTASH_RETURN_IF_ERROR(assign(L.bv, b.vector(p + "attn_v.bias", kv_dim)));
    }
    if (spec.attention.qk_norm) {
      KVSTASH_RETURN_IF_ERROR(assign(L.q_norm, b.vector(p + "attn_q_norm.weight", c.head_dim)));
      KVSTASH_RETURN_IF_ERROR(assign(L.k_norm, b.vector(p + "attn_k_norm.weight", c.head_dim)));
    }
    if (spec.attention.output_bias) KVSTASH_RETURN_IF_ERROR(assign(L.bo, b.vector(p + "attn_output.bias", d)));
    if (spec.attention.sinks) KVSTASH_RETURN_IF_ERROR(assign(L.sinks, b.vector(p + "attn_sinks.weight", c.n_heads)));
    if (spec.post_attention_norm) KVSTASH_RETURN_IF_ERROR(assign(L.post_attn_norm, b.vector(p + "post_attention_norm.weight", d)));
    if (spec.post_ffn_norm) KVSTASH_RETURN_IF_ERROR(assign(L.post_ffn_norm, b.vector(p + "post_ffw_norm.weight", d)));
    // gpt-oss names its pre-feed-forward norm post_attention_norm (and has no ffn_norm).
    const bool ffn_norm_named_post = !spec.post_attention_norm && !b.has(p + "ffn_norm.weight") &&
                                     b.has(p + "post_attention_norm.weight");
    KVSTASH_RETURN_IF_ERROR(
        assign(L.ffn_norm, b.vector(p + (ffn_norm_named_post ? "post_attention_norm.weight" : "ffn_norm.weight"), d)));
    if (spec.ffn.kind == FfnKind::kMoe) {
      const MoeSpec& m = spec.ffn.moe;
      ExpertWeights& x = L.experts;
      KVSTASH_RETURN_IF_ERROR(assign(x.router, b.matrix(p + "ffn_gate_inp.weight", d, m.n_experts)));
      KVSTASH_RETURN_IF_ERROR(assign(x.gate, b.experts(p + "ffn_gate_exps.weight", d, m.n_ff_expert, m.n_experts)));
      KVSTASH_RETURN_IF_ERROR(assign(x.up, b.experts(p + "ffn_up_exps.weight", d, m.n_ff_expert, m.n_experts)));
      KVSTASH_RETURN_IF_ERROR(assign(x.down, b.experts(p + "ffn_down_exps.weight", m.n_ff_expert, d, m.n_experts)));
      if (m.router_bias) KVSTASH_RETURN_IF_ERROR(assign(x.router_bias, b.vector(p + "ffn_gate_inp.bias", m.n_experts)));
      if (m.expert_biases) {
        KVSTASH_RETURN_IF_ERROR(assign(x.gate_bias, b.matrix_values(p + "ffn_gate_exps.bias", m.n_ff_expert, m.n_experts)));
        KVSTASH_RETURN_IF_ERROR(assign(x.up_bias, b.matrix_values(p + "ffn_up_exps.bias", m.n_ff_expert, m.n_experts)));
        KVSTASH_RETURN_IF_ERROR(assign(x.down_bias, b.matrix_values(p + "ffn_down_exps.bias", d, m.n_experts)));
      }
    } else {
      const std::int64_t ff = spec.ffn.n_ff;
      if (!b.has(p + "ffn_gate.weight") && b.has(p + "ffn_up.weight")) {
        // phi3: ffn_up holds the gate's rows, then the up projection's (llama.cpp's fused SwiGLU
        // takes silu of the first half times the second).
        kernels::WeightView gate_up;
        KVSTASH_RETURN_IF_ERROR(assign(gate_up, b.matrix(p + "ffn_up.weight", d, 2 * ff)));
        L.w_gate = row_slice(gate_up, 0, ff);
        L.w_up = row_slice(gate_up, ff, ff);
      } else {
        KVSTASH_RETURN_IF_ERROR(assign(L.w_gate, b.matrix(p + "ffn_gate.weight", d, ff)));
        KVSTASH_RETURN_IF_ERROR(assign(L.w_up, b.matrix(p + "ffn_up.weight", d, ff)));
      }
      KVSTASH_RETURN_IF_ERROR(assign(L.w_down, b.matrix(p + "ffn_down.weight", spec.ffn.n_ff, d)));
    }
  }
  // RoPE frequencies, one table per distinct RopeSpec (the model-wide one first). Llama 3.1+
  // files carry per-pair divisors in rope_freqs.weight (llama3 scaling), phi3 its LongRoPE ones in
  // rope_factors_long/short.weight (c.rope_factors_tensor); they apply to every layer.
  const int half = c.head_dim / 2;
  std::vector<float> factors(static_cast<std::size_t>(half), 1.0f);
  if (b.has(c.rope_factors_tensor)) KVSTASH_RETURN_IF_ERROR(assign(factors, b.vector(c.rope_factors_tensor, half)));
  std::vector<RopeSpec> ropes = {c.full_rope()};
  for (int l = 0; l < c.n_layers; ++l) {
    const RopeSpec& r = c.layers[static_cast<std::size_t>(l)].attention.rope;
    const auto found = std::find(ropes.begin(), ropes.end(), r);
    layers_[static_cast<std::size_t>(l)].rope = static_cast<int>(found - ropes.begin());
    if (found == ropes.end()) ropes.push_back(r);
  }
  for (const RopeSpec& r : ropes) {
    rope_magnitudes_.push_back(r.magnitude);
    std::vector<float>& inv = rope_inv_freqs_.emplace_back(static_cast<std::size_t>(half));
    // YaRN's ramp over the pairs (llama.cpp's ggml_rope_yarn_corr_dims and rope_yarn_ramp): pairs
    // below `low` keep their unscaled angle, above `high` take the scaled one, linear between.
    double low = 0, high = 0;
    if (r.yarn_original_ctx > 0) {
      const auto corr_dim = [&](double beta) {
        return c.head_dim * std::log(r.yarn_original_ctx / (beta * 2.0 * M_PI)) / (2.0 * std::log(static_cast<double>(r.base)));
      };
      low = std::max(0.0, std::floor(corr_dim(r.yarn_beta_fast)));
      high = std::min(static_cast<double>(c.head_dim - 1), std::ceil(corr_dim(r.yarn_beta_slow)));
    }
    for (int i = 0; i < half; ++i) {
      // The scale multiplies after the float conversion when it is not 1, so that unscaled models
      // keep the exact values they always had.
      inv[static_cast<std::size_t>(i)] = static_cast<float>(std::pow(static_cast<double>(r.base), -2.0 * i / c.head_dim) /
                                                            factors[static_cast<std::size_t>(i)]);
      if (r.yarn_original_ctx > 0) {
        const double ramp = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
        inv[static_cast<std::size_t>(i)] *= static_cast<float>(r.scale * (1.0 - ramp) + ramp);
      } else if (r.scale != 1.0f) {
        inv[static_cast<std::size_t>(i)] *= r.scale;
      }
    }
  }
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
  auto bytes_of = [](const kernels::WeightView& w) { return w.row_bytes * static_cast<std::size_t>(w.rows); };
  std::size_t bytes = bytes_of(output_);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    for (const auto* w : {&L.wq, &L.wk, &L.wv, &L.wo}) bytes += bytes_of(*w);
    if (L.experts.gate.empty()) {
      for (const auto* w : {&L.w_gate, &L.w_up, &L.w_down}) bytes += bytes_of(*w);
    } else {
      // Every expert of a layer has the same shape and type (slices of one tensor).
      const std::size_t used = static_cast<std::size_t>(config_.layers[l].ffn.moe.n_used);
      bytes += bytes_of(L.experts.router) +
               used * (bytes_of(L.experts.gate[0]) + bytes_of(L.experts.up[0]) + bytes_of(L.experts.down[0]));
    }
  }
  return bytes;
}

}  // namespace kvstash
