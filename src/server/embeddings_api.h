// POST /v1/embeddings (OpenAI's shape) with the served model: each input's embedding is the final
// hidden states (after the final norm) mean-pooled over its tokens and L2-normalised
// (engine/embedder.h, docs/semantic-cache.md).
//
// Request: `input` is a string, an array of strings, an array of token ids or an array of arrays
// of token ids (at most kMaxEmbeddingInputs inputs, each 1..backend.embedding_max_tokens() tokens;
// strings are tokenized without BOS or special tokens); `model` as the generation endpoints;
// `encoding_format` "float" (default) or "base64" (the float32 values little-endian, base64);
// `dimensions` is refused (the model's n_embd is the only size). Response:
//   {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...]}],"model":M,
//    "usage":{"prompt_tokens":N,"total_tokens":N}}
//
// The forward passes run on EmbeddingsApi's own worker thread, never on an HTTP I/O thread; at
// most max_queued requests wait for it, one more gets 429.
//
// Thread safety: submit() from any thread; stop() from one controlling thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/api_error.h"
#include "server/backend.h"

namespace kvstash::server {

inline constexpr std::size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request

// Answers one request body on the calling thread: the response JSON, or the error. `check_model`
// returns the error for a `model` this server does not serve.
std::optional<ApiError> embeddings_request(const std::string& body, GenerationBackend& backend,
                                           const std::function<std::optional<ApiError>(const std::string&)>& check_model,
                                           std::string* response);

class EmbeddingsApi {
 public:
  EmbeddingsApi(GenerationBackend& backend, std::function<std::optional<ApiError>(const std::string&)> check_model,
                std::size_t max_queued = 64);
  ~EmbeddingsApi();  // stop()

  // Queues `body`; `done(status, body)` runs on the worker (or here: 429 when the queue is full,
  // 503 once stopped).
  void submit(std::string body, std::function<void(int status, std::string body)> done);
  // Ends the worker; queued requests get 503. Idempotent.
  void stop();

 private:
  void worker_loop();

  GenerationBackend& backend_;
  const std::function<std::optional<ApiError>(const std::string&)> check_model_;
  const std::size_t max_queued_;
  std::mutex mu_;
  std::condition_variable wake_;
  struct Job {
    std::string body;
    std::function<void(int, std::string)> done;
  };
  std::deque<Job> jobs_;   // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread worker_;
};

}  // namespace kvstash::server
