#include "engine/embedder.h"

#include <cmath>

#include "model/model.h"

namespace kvstash {
namespace {

// Tokens per block of the Embedder's own KV buffer; any value works, it only sets the table.
constexpr int kBlockSize = 16;

}  // namespace

Embedder::Embedder(const Model& model, EmbedderOptions options)
    : model_(model),
      max_tokens_(std::max(1, model.config().n_ctx_train > 0 ? std::min(options.max_tokens, model.config().n_ctx_train)
                                                             : options.max_tokens)) {
  const int n_blocks = (max_tokens_ + kBlockSize - 1) / kBlockSize;
  const ModelConfig& c = model_.config();
  kv_.resize(static_cast<std::size_t>(n_blocks) * c.n_layers * 2 * kBlockSize * c.kv_row_elems());
  pool_ = std::make_unique<ThreadPool>(std::max(1, options.n_threads));
}

Embedder::~Embedder() = default;

int Embedder::dimensions() const { return model_.config().n_embd; }

Expected<std::vector<float>> Embedder::embed(std::span<const TokenId> tokens) {
  const ModelConfig& c = model_.config();
  if (tokens.empty()) return invalid_argument("embedding input is empty");
  if (static_cast<int>(tokens.size()) > max_tokens_) {
    return invalid_argument("embedding input has " + std::to_string(tokens.size()) + " tokens, more than the " +
                            std::to_string(max_tokens_) + " allowed");
  }
  for (TokenId t : tokens) {
    if (t < 0 || t >= c.n_vocab) return invalid_argument("token id " + std::to_string(t) + " is out of range");
  }
  const int n = static_cast<int>(tokens.size());
  const int n_blocks = (n + kBlockSize - 1) / kBlockSize;
  std::vector<std::int32_t> table(static_cast<std::size_t>(n_blocks));
  for (int i = 0; i < n_blocks; ++i) table[static_cast<std::size_t>(i)] = i;
  std::vector<float> hidden(static_cast<std::size_t>(n) * c.n_embd);

  ForwardBatch batch;
  batch.tokens.assign(tokens.begin(), tokens.end());
  BatchSequence seq;
  seq.block_table = table.data();
  seq.n_blocks = n_blocks;
  seq.pos_start = 0;
  seq.n_new = n;
  seq.want_logits = false;
  batch.sequences.push_back(seq);
  batch.final_hidden = hidden.data();

  std::lock_guard<std::mutex> lock(mu_);
  KvPoolView view;
  view.base = kv_.data();
  view.set_shape(c);
  view.block_size = kBlockSize;
  view.n_blocks = static_cast<std::int64_t>(kv_.size() / view.block_elems());
  if (Status st = model_.forward(batch, view, nullptr, *pool_); !st) return st;

  // Mean over tokens in double (the order of a sum of hundreds of floats changes its last bits),
  // then L2 normalisation.
  std::vector<double> sum(static_cast<std::size_t>(c.n_embd), 0.0);
  for (int t = 0; t < n; ++t) {
    const float* row = &hidden[static_cast<std::size_t>(t) * c.n_embd];
    for (int i = 0; i < c.n_embd; ++i) sum[static_cast<std::size_t>(i)] += row[i];
  }
  double norm = 0.0;
  for (double& v : sum) {
    v /= n;
    norm += v * v;
  }
  norm = std::sqrt(norm);
  std::vector<float> out(static_cast<std::size_t>(c.n_embd));
  for (int i = 0; i < c.n_embd; ++i) {
    out[static_cast<std::size_t>(i)] = norm > 0 ? static_cast<float>(sum[static_cast<std::size_t>(i)] / norm) : 0.0f;
  }
  return out;
}

}  // namespace kvstash
