#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine/engine.h"

namespace kvstash {

Expected<GenerationResult> generate(Engine& engine, GenerationRequest request, std::function<void(TokenId)> on_token) {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  GenerationResult result;
  const auto start = std::chrono::steady_clock::now();
  auto id = engine.submit(std::move(request), [&](const TokenEvent& ev) {
    if (ev.token >= 0 && on_token) on_token(ev.token);
    std::lock_guard<std::mutex> lock(mu);
    if (ev.token >= 0) {
      result.tokens.push_back(ev.token);
      result.logprobs.push_back(ev.logprob);
    }
    result.prompt_tokens = ev.prompt_tokens;
    result.cached_tokens = ev.cached_tokens;
    result.ttft_s = ev.ttft_s;
    result.unchecked = result.unchecked || ev.unchecked;
    if (ev.finish != FinishReason::kNone) {
      result.finish = ev.finish;
      result.error = ev.error;
      result.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      done = true;
      done_cv.notify_all();
    }
  });
  if (!id) return id.status();
  std::unique_lock<std::mutex> lock(mu);
  done_cv.wait(lock, [&] { return done; });
  return result;
}

}  // namespace kvstash
