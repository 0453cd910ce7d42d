// A decoder-only transformer loaded from a GGUF file (the architectures of model/architectures.h:
// llama, qwen2, qwen3, qwen3moe, gemma3, phi3, gpt-oss, mistral3), with weights used in place from the mapping or copied into huge
// pages, and its batched forward pass over a paged KV cache. What each layer computes is the
// ModelConfig's per-layer description (model_config.h); forward() walks it.
//
// Thread safety: a Model is immutable after load(), but for one swap: where load() left weights to
// a background copy (ModelLoadOptions::prepare_in_background), the copy's thread points their views
// at the copy under an exclusive lock that forward() holds shared for its whole pass, so the swap
// falls between two passes. forward() may be called by one thread at a time per KvStorage it
// writes; the other methods from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/huge_pages.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kvstash/status.h"
#include "model/model_config.h"
#include "model/moe.h"
#include "model/weights_cache.h"
#include "tokenizer/tokenizer.h"

namespace kvstash {


// Where the KV of one token of one layer lives. The pool is an array of blocks; a block holds,
// for every layer, the K then the V of `block_size` tokens, each head-major: for each KV head its
// block_size rows of head_dim f16 values (kv_format "f16-blk<B>-v2", docs/chunk-format.md). So one
// block is one contiguous byte range holding all of its tokens' KV, which is what lets the engine
// export a run of tokens as bytes and import it back; and a KV head's K (or V) of one block and
// layer is one contiguous run that attention, a task per KV head, streams. (Version 1 stored rows
// of all heads token by token: a task then read head_dim values of every n_kv_heads * head_dim,
// and the prefetchers pulled in the other heads' values too, several times over at long contexts.)
//
// Split pools (window_base set; engine/block_pool.h, models with sliding-window layers): the layers
// form two groups, full-attention layers and window layers, each with its own storage. A block id
// names the full group's block `block` (its full layers only, in layer order) and, through
// window_of[block], a block of the window group (its window layers only), which the engine frees
// once every holder's window has passed it (window_of[block] = -1 then; attention never reads it).
// Without a split (window_base null) the layout is the one above, byte for byte.
struct KvPoolView {
  std::uint16_t* base = nullptr;
  std::int64_t n_blocks = 0;
  int n_layers = 0;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  // The split (all null/0 without one). group_layers: the layers in `base`'s blocks (n_layers
  // without a split); layer_index[l]: layer l's place in its group; layer_window[l]: whether it is
  // a window layer; max_window: the widest window of the window layers.
  int group_layers = 0;
  std::uint16_t* window_base = nullptr;
  const std::int32_t* window_of = nullptr;
  const std::int16_t* layer_index = nullptr;
  const std::uint8_t* layer_window = nullptr;
  int window_group_layers = 0;
  int max_window = 0;

  void set_shape(const ModelConfig& c) {
    n_layers = c.n_layers;
    group_layers = c.n_layers;
    n_kv_heads = c.n_kv_heads;
    head_dim = c.head_dim;
  }
  bool split() const { return window_base != nullptr; }
  int row_elems() const { return n_kv_heads * head_dim; }  // K (or V) elements per token per layer
  // Elements of one block of `base` (all layers without a split; the full layers with one).
  std::size_t block_elems() const {
    return static_cast<std::size_t>(group_layers) * 2 * block_size * row_elems();
  }
  std::size_t block_bytes() const { return block_elems() * sizeof(std::uint16_t); }
  std::size_t window_block_elems() const {
    return static_cast<std::size_t>(window_group_layers) * 2 * block_size * row_elems();
  }
  // KV head kvh's K (V) rows of one block and layer: block_size rows, head_dim apart.
  std::uint16_t* k_head(std::int64_t block, int layer, int kvh) const {
    const std::size_t within = static_cast<std::size_t>(kvh) * block_size * head_dim;
    if (window_base == nullptr) {
      return base + block * block_elems() + static_cast<std::size_t>(layer) * 2 * block_size * row_elems() + within;
    }
    const std::size_t in_group = static_cast<std::size_t>(layer_index[layer]) * 2 * block_size * row_elems() + within;
    if (layer_window[layer]) return window_base + window_of[block] * window_block_elems() + in_group;
    return base + block * block_elems() + in_group;
  }
  std::uint16_t* v_head(std::int64_t block, int layer, int kvh) const {
    return k_head(block, layer, kvh) + static_cast<std::size_t>(block_size) * row_elems();
  }
  // One token's K (V) values of one KV head: head_dim values.
  std::uint16_t* k_at(std::int64_t block, int layer, int slot, int kvh) const {
    return k_head(block, layer, kvh) + static_cast<std::size_t>(slot) * head_dim;
  }
  std::uint16_t* v_at(std::int64_t block, int layer, int slot, int kvh) const {
    return v_head(block, layer, kvh) + static_cast<std::size_t>(slot) * head_dim;
  }
};

// One sequence's part of a batched forward pass: `n_new` tokens at positions
// [pos_start, pos_start + n_new) (RoPE), whose K/V go to KV slots [slot_start, slot_start + n_new)
// of the pool blocks of `block_table`, attending to every earlier slot of the same sequence.
// Slots and positions are equal until KV compaction drops tokens (engine/kv_compactor.h): K is
// stored after RoPE, so attention over the kept slots needs no per-slot position.
struct BatchSequence {
  const std::int32_t* block_table = nullptr;  // must cover slots [0, slot_start + n_new)
  int n_blocks = 0;                            // entries in block_table
  int pos_start = 0;
  int n_new = 0;
  bool want_logits = true;  // false: no logits for this sequence (a prefill chunk mid-prompt)
  bool all_logits = false;  // with want_logits: a row for every new token, else for the last one
  int slot_start = -1;      // -1: pos_start (no compaction)
  // When set: per layer, query head and rotated pair, adds the new tokens' pre-RoPE query
  // statistics (real part, imaginary part, magnitude: 3 floats) into
  // q_stats[((layer * n_heads + head) * head_dim / 2 + pair) * 3 + {0, 1, 2}].
  float* q_stats = nullptr;
  int first_slot() const { return slot_start < 0 ? pos_start : slot_start; }
};

// Where forward passes spend their time, phase by phase (`kvstash bench-engine --step-profile`).
// forward() adds to it when ForwardBatch::profile is set: each phase's seconds and the bytes of
// weight matrices it read, over every layer. It reads the clock once per phase (about a dozen times
// per layer); without a profile it reads none. The output never depends on it.
struct ForwardProfile {
  enum Phase {
    kEmbed,         // the tokens' embedding rows
    kNorms,         // RMSNorm before attention, before the feed-forward, and the final one
    kQkv,           // the Q, K and V projections (one matmul call)
    kRopeKv,        // the Q/K/V biases, the Q/K norms, RoPE, and K and V written into the pool
    kAttention,     // softmax(Q K^T) V over the pool
    kAttnOutput,    // the attention output projection
    kGateUp,        // the feed-forward gate and up projections (one matmul call)
    kSiluMul,       // SiLU(gate) * up
    kDown,          // the feed-forward down projection
    kExperts,       // a MoE feed-forward: router, gating and the chosen experts (model/moe.h)
    kResidual,      // the two residual additions
    kOutput,        // the output projection (logits)
    kPhases
  };
  static const char* name(int phase);
  double seconds[kPhases] = {};
  std::int64_t weight_bytes[kPhases] = {};
  std::int64_t passes = 0;  // forward() calls added up here
};

struct ForwardBatch {
  std::vector<TokenId> tokens;  // the new tokens of all sequences, in sequence order
  std::vector<BatchSequence> sequences;
  // When set: forward() also writes the final hidden state of every new token, after the final
  // norm (the output projection's input), tokens.size() rows of n_embd floats (embeddings).
  float* final_hidden = nullptr;
  // When set: forward() adds its phases' times to it (above).
  ForwardProfile* profile = nullptr;
  // Rows of logits forward() writes: per sequence, 0 unless want_logits, else n_new if all_logits, else 1.
  int logit_rows() const;
};

// Where the weight matrices live while the model runs.
enum class WeightMemory {
  // Copied at load into anonymous memory advised for transparent huge pages (common/huge_pages.h):
  // decode streams them 4-32% faster than from the file mapping on this project's VMs, and no
  // request pays the first-touch page faults. Costs the weights' size in private memory.
  kHugePages,
  // Used in place from the read-only file mapping (4 KiB pages, shared page cache, no copy).
  kFileMapping,
};

struct ModelLoadOptions {
  WeightMemory weights = WeightMemory::kHugePages;
  // With kHugePages: the directory of prepared-weights files (model/weights_cache.h). A file made
  // for this model, kernel layout and SIMD path is read instead of preparing the weights again; a
  // missing, truncated, stale or damaged one is (re)written. Empty (the default): no cache.
  std::string weights_cache_dir;
  // On a cache miss: false (the default) writes the file before load() returns; true leaves it to
  // the caller's save_prepared_weights() (the server writes it after it starts listening).
  bool defer_weights_cache_write = false;
  // With kHugePages, when this start prepares the weights (no good prepared file): false (the
  // default) prepares every matrix before load() returns. true returns once the matrices whose
  // prepared layout differs from the file's are prepared (the interleaved ones: the kernels give
  // other bits on them, so they must be in place before the first pass) and copies the others into
  // the huge-page memory on a thread of its own, at a low priority, while forward() reads them from
  // the file mapping; they are swapped in between two passes. The same bytes under the same kernels:
  // no result changes (weights_cache_test's BackgroundCopyIsSwappedInBetweenPassesWithTheSameBits). weights_prepared() says when. The
  // server's choice: a first start answers without waiting for that copy (issue 37).
  bool prepare_in_background = false;
  // Tests only: called on the preparing thread when the background copy is done, just before the
  // swap (a test holds it there to run passes on both sides of the swap).
  std::function<void()> before_weights_swap;
};

// How Model::load spent its time, for start-up logs and metrics.
struct ModelLoadReport {
  double map_seconds = 0;          // open, map, metadata, tokenizer and binding the tensors
  double fingerprint_seconds = 0;  // model/fingerprint.h (a sidecar read when remembered)
  double prepare_seconds = 0;      // copying and interleaving the weights, or reading the prepared file
  // One line on the prepared-weights cache: "off", "read PATH", or why it missed and what follows
  // (e.g. "PATH: stale (...); prepared again, rewriting it").
  std::string weights_cache = "off";
  bool cache_write_due = false;    // a miss whose file is still to be written (defer_weights_cache_write)
  // A first start: the file was hashed beside the copy; fingerprint_seconds is the probe and the
  // wait for the hash after the copy, hashed_seconds the hash's own time.
  bool fingerprint_beside_copy = false;
  double hashed_seconds = 0;
  // prepare_in_background: the bytes load() left to the background copy (0: none; everything
  // was in place when load() returned).
  std::size_t background_bytes = 0;
};

class Model {
 public:
  // Maps the GGUF file, checks that it is a supported architecture with supported tensor types
  // and the expected shapes, and binds the weights (copied into huge pages or in place, per
  // options.weights; with options.weights_cache_dir, read from the prepared-weights file when a
  // good one is there: load_report() says what happened). Errors name the file and the problem
  // (kUnsupported for an architecture or tensor type this engine does not run); a bad cache file
  // is never an error, only a miss.
  static Expected<std::unique_ptr<Model>> load(const std::string& path, const ModelLoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::File& file() const { return *file_; }
  // SHA-256 over architecture, hyper-parameters and tensor bytes; the same on every machine.
  const std::array<std::uint8_t, 32>& fingerprint() const { return fingerprint_; }
  std::string fingerprint_hex() const;
  // Per rotated pair i: the RoPE angle per position of the full-attention layers,
  // base^(-2i/head_dim) * linear scale / freq_factor_i.
  const std::vector<float>& rope_inv_freq() const { return rope_inv_freqs_[0]; }
  // Bytes of weights read per decoded token (all matrices, incl. the output projection; of a MoE
  // layer the router and expert_used_count experts).
  std::size_t weight_bytes_per_token() const;
  // Where the weights are, for startup logs: e.g. "weights: 525.1 MiB copied into huge pages
  // (524.0 MiB huge); 169 matrices interleaved by 16 rows for the AVX-512 kernels" (or AVX2) or
  // "weights: 525.1 MiB mapped from the file".
  std::string weight_memory_summary() const;
  // The memory the weights were copied into (empty when they are used from the file mapping), for
  // benchmarks that stream-read the very pages a decode step reads.
  std::span<const std::uint8_t> weight_memory() const { return {weights_.data(), weights_.size()}; }
  const ModelLoadReport& load_report() const { return report_; }
  // False while the background copy of ModelLoadOptions::prepare_in_background runs (forward()
  // then reads those weights from the file mapping, at the mapping's speed); true otherwise.
  bool weights_prepared() const { return !background_.load(std::memory_order_acquire); }
  // Waits until weights_prepared(); returns the background copy's seconds (0 when there was none).
  double wait_weights_prepared() const;
  // Writes the prepared weights to the cache directory of the load options (through a temporary
  // file renamed into place), after waiting for a background copy (wait_weights_prepared()). Only
  // reads the model, so it may run while forward() does. An error
  // when there is no cache directory or the weights are not prepared (kInvalidArgument), or the
  // write fails (kIoError).
  Status save_prepared_weights() const;

  // Runs the batch: computes and stores the new tokens' K/V into `kv`, and writes
  // batch.logit_rows() rows of n_vocab logits to `logits`. Checked first, in every build (a few
  // comparisons per sequence): every sequence's block table covers its positions with blocks of
  // the pool, and every token id is < n_vocab. A batch that breaks them returns kInternal and
  // touches neither the pool nor `logits`: wrong KV written into a shared pool would be served as
  // a cache hit to every later request with that prefix.
  Status forward(const ForwardBatch& batch, const KvPoolView& kv, float* logits,
                 ThreadPool& pool) const;

 private:
  // One layer's weights; which are bound follows its LayerSpec.
  struct Layer {
    kernels::WeightView wq, wk, wv, wo;
    kernels::WeightView w_gate, w_up, w_down;  // FfnKind::kSwiGlu
    ExpertWeights experts;                     // FfnKind::kMoe
    std::vector<float> attn_norm, ffn_norm;
    std::vector<float> bq, bk, bv;             // AttentionSpec::qkv_bias; empty otherwise
    std::vector<float> bo;                     // AttentionSpec::output_bias: n_embd; empty otherwise
    std::vector<float> sinks;                  // AttentionSpec::sinks: one logit per query head; empty otherwise
    std::vector<float> q_norm, k_norm;         // AttentionSpec::qk_norm: head_dim each; empty otherwise
    std::vector<float> post_attn_norm, post_ffn_norm;  // LayerSpec::post_*_norm; empty otherwise
    int rope = 0;                              // index into rope_inv_freqs_
  };
  Model() = default;
  Status bind(const std::string& path, const ModelLoadOptions& options);
  // A matrix left to the background copy: its bytes on the file mapping, and where they go.
  struct PendingCopy {
    kernels::WeightView* view;
    const void* from;
    std::uint8_t* to;
    std::size_t bytes;
  };
  // Copies every weight matrix into weights_ (in the order a forward pass reads them) and points
  // the views there; a matrix the SIMD path in use reads faster in its own layout is repacked on
  // the way (kernels::repack_for_decode: every quantized type and F16 on AVX-512). Leaves the views on the file mapping if
  // the memory cannot be mapped. With `background`, the matrices kept in their own layout are not
  // copied: returned instead, their places in weights_ reserved, their views still on the mapping.
  std::vector<PendingCopy> copy_weights_to_huge_pages(bool background = false);
  // Starts the thread that copies `pending` and swaps the views over (prepare_in_background).
  void start_background_copy(std::vector<PendingCopy> pending, std::function<void()> before_swap);
  // Binds the weight views to a prepared file's memory when its matrix table matches this
  // model's matrices on this SIMD path; false (views untouched) when it does not.
  bool bind_prepared(PreparedWeights prepared, std::string* why);
  // Starts reading the prepared-weights file of this model (fingerprint_ set) from `dir` on
  // another thread; prepare_weights() takes the result.
  void start_prepared_read(const std::string& dir);
  // Takes the prepared file if there is a good one, else prepares the weights (and writes the file
  // unless deferred). Fills report_.
  void prepare_weights(const ModelLoadOptions& options);
  // After a miss: report_.weights_cache = line + "written" (or "writing it" when the write is
  // deferred: cache_write_due), or line + "cannot write it: ..." when the write fails.
  void write_prepared(const std::string& line, const ModelLoadOptions& options);
  std::vector<kernels::WeightView*> weight_matrices();  // each distinct matrix once, in forward order
  std::vector<const kernels::WeightView*> weight_matrices() const;

  ModelConfig config_;
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  kernels::WeightView token_embd_, output_;
  std::vector<float> output_norm_;
  // Per distinct RoPE of the layers (gemma3: global and local), per rotated pair:
  // base^(-2i/d) * scale / freq_factor_i. Entry 0 is the model-wide one (rope_inv_freq()).
  std::vector<std::vector<float>> rope_inv_freqs_;
  std::vector<float> rope_magnitudes_;  // per table: RopeSpec::magnitude, multiplying cos and sin
  std::vector<Layer> layers_;
  std::array<std::uint8_t, 32> fingerprint_{};
  HugePageBuffer weights_;  // empty when the weights are used from the file mapping
  std::vector<PreparedMatrix> prepared_table_;  // where each weight_matrices() entry is in weights_
  std::size_t prepared_bytes_ = 0;               // of weights_, the bytes the matrices use
  std::string weights_cache_dir_;                // empty: no prepared-weights cache
  std::future<Expected<PreparedWeights>> prepared_read_;  // start_prepared_read() until prepare_weights()
  // A first start of this file (no sidecar): the fingerprint's hash of the whole file, running
  // from bind() while prepare_weights() copies the weights (both read the same pages). Declared
  // after file_: destroyed (waited for) before the mapping goes.
  std::future<std::array<std::uint8_t, 32>> fingerprint_hash_;
  ModelLoadReport report_;
  int repacked_matrices_ = 0;
  // The background copy (prepare_in_background): forward() holds weights_swap_ shared for a pass,
  // the swap exclusive; background_ is true until the swap; background_done_ has the copy's
  // seconds. Joined in ~Model, before the memory and the mapping go.
  mutable std::shared_mutex weights_swap_;
  std::atomic<bool> background_{false};
  std::shared_future<double> background_done_;
  std::thread background_copy_;
};

}  // namespace kvstash
