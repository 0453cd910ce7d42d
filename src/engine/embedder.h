// Text embeddings from the served model: the final hidden states (after the final norm, i.e. the
// output projection's input) mean-pooled over the input's tokens and L2-normalised
// (docs/semantic-cache.md). Used by POST /v1/embeddings and the semantic response cache.
//
// An Embedder runs its own forward passes, apart from the engine's scheduler: its own small KV
// buffer (max_tokens slots, f16, one sequence) and its own thread pool, so it never touches the
// engine's block pool or batch. The model is immutable and Model::forward() is safe to call
// concurrently for different KV buffers; the engine's step thread and an Embedder share only the
// read-only weights. They do share the CPU: an embedding competes with decode for cores.
//
// Thread safety: embed() is safe from any thread; calls are serialised by one mutex (one KV
// buffer, one pool).
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/thread_pool.h"
#include "kvstash/status.h"
#include "tokenizer/tokenizer.h"

namespace kvstash {

class Model;

struct EmbedderOptions {
  int max_tokens = 2048;  // longest input in tokens; longer inputs are refused (kInvalidArgument)
  int n_threads = 2;      // forward-pass threads (the calling thread counts)
};

class Embedder {
 public:
  // The model must outlive the Embedder. max_tokens is capped at the model's training context.
  Embedder(const Model& model, EmbedderOptions options = {});
  ~Embedder();

  // The normalised mean-pooled embedding (n_embd floats, L2 norm 1) of `tokens`. Errors:
  // kInvalidArgument for an empty input, more than max_tokens() tokens or an id out of range.
  Expected<std::vector<float>> embed(std::span<const TokenId> tokens);

  int dimensions() const;
  int max_tokens() const { return max_tokens_; }

 private:
  const Model& model_;
  const int max_tokens_;
  std::mutex mu_;
  std::vector<std::uint16_t> kv_;       // guarded by mu_: max_tokens slots of every layer's K and V
  std::unique_ptr<ThreadPool> pool_;    // guarded by mu_ (ThreadPool::run is one caller at a time)
};

}  // namespace kvstash
