#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine/engine.h"

namespace kvstash {
namespace {

// Adds one event to its choice's result; true when it was that choice's last.
bool apply(GenerationResult& result, const TokenEvent& ev, std::chrono::steady_clock::time_point start) {
  if (ev.token >= 0) {
    result.tokens.push_back(ev.token);
    result.logprobs.push_back(ev.logprob);
  }
  result.prompt_tokens = ev.prompt_tokens;
  result.cached_tokens = ev.cached_tokens;
  result.ttft_s = ev.ttft_s;
  result.unchecked = result.unchecked || ev.unchecked;
  if (ev.finish == FinishReason::kNone) return false;
  result.finish = ev.finish;
  result.error = ev.error;
  result.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return true;
}

}  // namespace

Expected<std::vector<GenerationResult>> generate_choices(Engine& engine, GenerationRequest request) {
  std::mutex mu;
  std::condition_variable done_cv;
  const int n = request.n;
  if (n < 1) return invalid_argument("n must be at least 1");
  int open_choices = n;
  std::vector<GenerationResult> results(static_cast<std::size_t>(n));
  const auto start = std::chrono::steady_clock::now();
  auto id = engine.submit(std::move(request), [&](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    if (apply(results.at(static_cast<std::size_t>(ev.choice)), ev, start) && --open_choices == 0) done_cv.notify_all();
  });
  if (!id) return id.status();
  std::unique_lock<std::mutex> lock(mu);
  done_cv.wait(lock, [&] { return open_choices == 0; });
  return results;
}

Expected<GenerationResult> generate(Engine& engine, GenerationRequest request, std::function<void(TokenId)> on_token) {
  if (request.n != 1) return invalid_argument("generate() takes one choice (n = 1); use generate_choices for n = " + std::to_string(request.n));
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  GenerationResult result;
  const auto start = std::chrono::steady_clock::now();
  auto id = engine.submit(std::move(request), [&](const TokenEvent& ev) {
    if (ev.token >= 0 && on_token) on_token(ev.token);
    std::lock_guard<std::mutex> lock(mu);
    if (apply(result, ev, start)) {
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
