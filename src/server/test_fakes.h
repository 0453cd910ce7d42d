// Test doubles for the server's tests that run without a model: a byte tokenizer (ids 0..255 are
// bytes, then a few special tokens) and a scripted backend that "generates" a fixed text, one
// byte per token, on its own thread per request.
//
// Thread safety: FakeBackend's methods are safe from any thread; FakeTokenizer is immutable.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/backend.h"

namespace kvstash::server::testing {

class FakeTokenizer final : public Tokenizer {
 public:
  static constexpr TokenId kImStart = 256, kImEnd = 257, kBos = 258, kEos = 259;
  std::vector<TokenId> encode(std::string_view text, bool parse_special) const override {
    std::vector<TokenId> out;
    for (std::size_t i = 0; i < text.size();) {
      bool matched = false;
      if (parse_special) {
        for (TokenId id = kImStart; id <= kEos; ++id) {
          const std::string& s = special(id);
          if (text.substr(i, s.size()) == s) {
            out.push_back(id);
            i += s.size();
            matched = true;
            break;
          }
        }
      }
      if (!matched) out.push_back(static_cast<unsigned char>(text[i++]));
    }
    return out;
  }
  std::string decode(std::span<const TokenId> tokens) const override {
    std::string s;
    for (TokenId t : tokens) s += token_to_piece(t);
    return s;
  }
  std::string token_to_piece(TokenId t) const override {
    if (t >= 0 && t < 256) return std::string(1, static_cast<char>(t));
    return "";
  }
  std::size_t vocab_size() const override { return 260; }
  TokenId bos_id() const override { return kBos; }
  TokenId eos_id() const override { return kEos; }
  bool add_bos() const override { return true; }
  bool is_end_of_generation(TokenId t) const override { return t == kEos || t == kImEnd; }
  std::optional<TokenId> find_token(std::string_view text) const override {
    for (TokenId id = kImStart; id <= kEos; ++id) {
      if (special(id) == text) return id;
    }
    return std::nullopt;
  }
  const std::string& pre_tokenizer() const override { return pre_; }
  const std::string& chat_template() const override { return template_; }

 private:
  static const std::string& special(TokenId id) {
    static const std::string names[] = {"<|im_start|>", "<|im_end|>", "<s>", "</s>"};
    return names[id - kImStart];
  }
  std::string pre_ = "default";
  std::string template_ = "<|im_start|>";
};

// Generates `reply` byte by byte (then EOS), or up to max_tokens. `token_delay` paces tokens so
// that tests can disconnect mid-stream.
class FakeBackend final : public GenerationBackend {
 public:
  explicit FakeBackend(std::string reply, int n_ctx = 512) : reply_(std::move(reply)) {
    info_.id = "fake-model";
    info_.tokenizer = &tokenizer_;
    info_.n_vocab = 260;
    info_.n_ctx = n_ctx;
    info_.chat_template = tokenizer_.chat_template();
  }
  ~FakeBackend() override {
    for (auto& t : threads_) t.join();
  }

  void set_chat_template(std::string t) { info_.chat_template = std::move(t); }
  std::chrono::milliseconds token_delay{0};
  int max_queued = 1000;  // submits beyond this many unfinished requests fail with kResourceExhausted

  Expected<std::uint64_t> submit(GenerationRequest request, TokenCallback on_token) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ >= max_queued) return resource_exhausted("queue full");
    std::uint64_t id = next_id_++;
    cancelled_[id] = false;
    ++running_;
    last_request_ = request;
    threads_.emplace_back([this, id, request = std::move(request), on_token] { run(id, request, on_token); });
    return id;
  }
  void cancel(std::uint64_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_[id] = true;
  }
  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    EngineStats s;
    s.running = running_;
    return s;
  }
  const ModelInfo& model_info() const override { return info_; }
  int cancelled_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int n = 0;
    for (auto& [id, c] : cancelled_) n += c;
    return n;
  }
  GenerationRequest last_request() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_request_;
  }

 private:
  void run(std::uint64_t id, GenerationRequest request, TokenCallback on_token) {
    TokenEvent e;
    e.prompt_tokens = static_cast<int>(request.prompt.size());
    e.ttft_s = 0.001;
    int produced = 0;
    for (;;) {
      if (token_delay.count() > 0) std::this_thread::sleep_for(token_delay);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cancelled_[id]) {
          e.token = -1;
          e.finish = FinishReason::kCancelled;
          break;
        }
      }
      if (produced == request.max_tokens) {
        e.token = -1;
        e.finish = FinishReason::kLength;
        break;
      }
      std::size_t i = static_cast<std::size_t>(produced) % (reply_.size() + 1);
      e.token = i < reply_.size() ? static_cast<unsigned char>(reply_[i]) : FakeTokenizer::kEos;
      e.logprob = -0.5f;
      e.top_logprobs.clear();
      for (int k = 0; k < request.top_logprobs; ++k) e.top_logprobs.push_back({'a' + k, -1.0f - k});
      ++produced;
      if (e.token == FakeTokenizer::kEos) {
        e.finish = FinishReason::kStop;
        break;
      }
      on_token(e);
    }
    // Decrement before the final event so that a client that saw the end sees running == 0.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --running_;
    }
    on_token(e);
  }

  std::string reply_;
  FakeTokenizer tokenizer_;
  ModelInfo info_;
  mutable std::mutex mutex_;
  std::uint64_t next_id_ = 1;               // guarded by mutex_
  int running_ = 0;                         // guarded by mutex_
  std::map<std::uint64_t, bool> cancelled_;  // guarded by mutex_
  GenerationRequest last_request_;          // guarded by mutex_
  std::vector<std::thread> threads_;        // guarded by mutex_ (joined in the destructor)
};

}  // namespace kvstash::server::testing
