// What the HTTP server needs from the engine and the model, as one small interface, so that the
// server's tests can run against a scripted backend and the server itself does not depend on how
// the engine or the model is built. EngineBackend (engine_backend.cc) adapts a real Engine.
//
// Thread safety: implementations must allow submit(), cancel(), stats() and kv_store_stats() from
// any thread; callbacks run on the backend's own thread (see Engine).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "cache/tiered_store.h"
#include "engine/engine.h"
#include "kvstash/status.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::server {

// The served model as the API describes it.
struct ModelInfo {
  std::string id;                        // the model name in responses and /v1/models
  const Tokenizer* tokenizer = nullptr;  // not owned; outlives the server
  int n_vocab = 0;                       // token ids must be < n_vocab
  int n_ctx = 0;                         // prompt + generated tokens at most
  std::string chat_template;             // the GGUF tokenizer.chat_template ("" when none)
  // The model fingerprint (model/fingerprint.h): keys of the response cache depend on it. All
  // zero for scripted backends.
  std::array<std::uint8_t, 32> fingerprint{};
};

// A snapshot of the tiered KV store behind the engine, for /metrics. enabled = false (and the
// rest empty) when the engine runs without a store.
struct KvStoreSnapshot {
  bool enabled = false;
  std::vector<cache::TierReport> tiers;  // fastest first, as TieredStore::tier_stats()
  cache::StoreStats store;
};

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // As Engine::submit: exactly one final event per accepted request.
  virtual Expected<std::uint64_t> submit(GenerationRequest request, TokenCallback on_token) = 0;
  virtual void cancel(std::uint64_t request_id) = 0;
  virtual EngineStats stats() const = 0;
  // The KV store's counters; the default is "no store" (scripted backends need not care).
  virtual KvStoreSnapshot kv_store_stats() const { return {}; }
  // Blocks until the KV store's write-behind queues are empty (kvstash_store_sync); the default,
  // and a backend without a store, returns at once. Never on an HTTP I/O thread or the engine's.
  virtual void flush_kv_store() {}
  virtual const ModelInfo& model_info() const = 0;
  // The normalised mean-pooled embedding of `tokens` (engine/embedder.h), from any thread; the
  // default is kUnsupported (scripted backends). Errors: kInvalidArgument (empty, too long, id out
  // of range).
  virtual Expected<std::vector<float>> embed(std::span<const TokenId> tokens) {
    (void)tokens;
    return unsupported("this backend computes no embeddings");
  }
  // Longest embedding input in tokens (0 = no embeddings).
  virtual int embedding_max_tokens() const { return 0; }
};

// Adapts an engine (which must outlive the result). `model_id` overrides the model's name when
// non-empty.
std::unique_ptr<GenerationBackend> make_engine_backend(Engine& engine, const std::string& model_id);

}  // namespace kvstash::server
