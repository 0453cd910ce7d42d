// The one place that knows how the engine and the model expose what the server needs (the
// tokenizer, the vocabulary size, the context length, the model's name and chat template).
#include <algorithm>
#include <mutex>

#include "cache/tiered_store.h"
#include "engine/embedder.h"
#include "model/model.h"
#include "server/backend.h"

namespace kvstash::server {
namespace {

class EngineBackend final : public GenerationBackend {
 public:
  EngineBackend(Engine& engine, const std::string& model_id) : engine_(engine) {
    const Model& model = engine.model();
    info_.id = model_id.empty() ? model.config().name : model_id;
    if (info_.id.empty()) info_.id = "kvstash";
    info_.tokenizer = &model.tokenizer();
    info_.n_vocab = model.config().n_vocab;
    info_.n_ctx = engine.options().n_ctx;
    info_.chat_template = model.tokenizer().chat_template();
    info_.fingerprint = model.fingerprint();
  }

  Expected<std::uint64_t> submit(GenerationRequest request, TokenCallback on_token) override {
    return engine_.submit(std::move(request), std::move(on_token));
  }
  void cancel(std::uint64_t request_id) override { engine_.cancel(request_id); }
  EngineStats stats() const override { return engine_.stats(); }
  KvStoreSnapshot kv_store_stats() const override {
    KvStoreSnapshot out;
    cache::TieredStore* store = engine_.options().kv_store;
    if (store == nullptr) return out;
    out.enabled = true;
    out.tiers = store->tier_stats();
    out.store = store->stats();
    return out;
  }
  void flush_kv_store() override {
    if (cache::TieredStore* store = engine_.options().kv_store) store->flush();
  }
  const ModelInfo& model_info() const override { return info_; }
  // The embedder is made at the first call (its KV buffer is unused memory otherwise).
  Expected<std::vector<float>> embed(std::span<const TokenId> tokens) override { return embedder().embed(tokens); }
  int embedding_max_tokens() const override {
    const int train = engine_.model().config().n_ctx_train;  // the Embedder's own cap
    return train > 0 ? std::min(EmbedderOptions{}.max_tokens, train) : EmbedderOptions{}.max_tokens;
  }

 private:
  Embedder& embedder() {
    std::call_once(embedder_once_, [this] { embedder_ = std::make_unique<Embedder>(engine_.model()); });
    return *embedder_;
  }

  std::once_flag embedder_once_;
  std::unique_ptr<Embedder> embedder_;  // set once by embedder()
  Engine& engine_;
  ModelInfo info_;
};

}  // namespace

std::unique_ptr<GenerationBackend> make_engine_backend(Engine& engine, const std::string& model_id) {
  return std::make_unique<EngineBackend>(engine, model_id);
}

}  // namespace kvstash::server
