#include "server/generation.h"

#include <algorithm>

namespace kvstash::server {

Generation::Generation(GenerationBackend& backend, std::vector<std::string> stop, bool want_logprobs)
    : backend_(backend),
      tokenizer_(*backend.model_info().tokenizer),
      want_logprobs_(want_logprobs),
      text_(std::move(stop)) {}

Generation::~Generation() { release_engine(engine_finished_); }

void Generation::release_engine(bool engine_done) {
  if (released_ || !engine_request_) return;
  released_ = true;
  engine_request_->release(engine_done);
}

std::optional<ApiError> Generation::start(GenerationRequest request, std::function<void()> on_event,
                                          const std::vector<Generation*>& other_choices) {
  if (static_cast<int>(other_choices.size()) != request.n - 1) {
    return ApiError{500, "internal error: " + std::to_string(request.n) + " choices with " +
                             std::to_string(other_choices.size() + 1) + " generations", "server_error", "", ""};
  }
  auto engine_request = std::make_shared<EngineRequest>(backend_, request.n);
  // Events go to their choice's queue (TokenEvent::choice).
  std::vector<std::shared_ptr<EventQueue>> queues = {queue_};
  for (Generation* g : other_choices) queues.push_back(g->queue_);
  Expected<std::uint64_t> id = backend_.submit(request, [queues, on_event](const TokenEvent& e) {
    queues.at(static_cast<std::size_t>(e.choice))->push(e);
    if (on_event) on_event();
  });
  if (!id) return from_status(id.status());
  engine_request->started(*id);
  for (Generation* g : other_choices) {
    g->stop_tokens_ = request.stop_tokens;
    g->engine_request_ = engine_request;
  }
  stop_tokens_ = request.stop_tokens;
  engine_request_ = std::move(engine_request);
  return std::nullopt;
}

void Generation::replay(std::vector<TokenEvent> events, std::function<void()> on_event) {
  for (TokenEvent& e : events) queue_->push(std::move(e));
  engine_finished_ = true;  // no engine side to cancel
  if (on_event) on_event();
}

Delta Generation::poll(std::chrono::milliseconds wait) {
  Delta delta;
  for (Delta& d : poll_each(wait)) {
    delta.text += d.text;
    delta.logprobs.insert(delta.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  }
  return delta;
}

std::vector<Delta> Generation::poll_each(std::chrono::milliseconds wait) {
  std::vector<Delta> deltas;
  if (done()) return deltas;
  std::vector<TokenEvent> events;
  queue_->wait_pop(events, wait);
  deltas.reserve(events.size());
  for (const TokenEvent& e : events) {
    if (done()) break;
    if (recording_) applied_.push_back(e);
    apply(e, deltas.emplace_back());
  }
  return deltas;
}

void Generation::apply(const TokenEvent& event, Delta& delta) {
  outcome_.prompt_tokens = event.prompt_tokens;
  outcome_.cached_tokens = event.cached_tokens;
  if (event.ttft_s > 0) outcome_.ttft_s = event.ttft_s;
  if (event.finish != FinishReason::kNone) {
    engine_finished_ = true;
    release_engine(true);
  }
  if (event.unchecked) unchecked_ = true;

  if (event.token >= 0) {
    ++outcome_.completion_tokens;
    // An end-of-generation or stop token ends the turn; its text is not part of the answer.
    bool is_end = event.finish == FinishReason::kStop &&
                  (tokenizer_.is_end_of_generation(event.token) ||
                   std::find(stop_tokens_.begin(), stop_tokens_.end(), event.token) != stop_tokens_.end());
    if (!is_end) {
      if (want_logprobs_) {
        delta.logprobs.push_back({event.token, event.logprob, event.top_logprobs,
                                  text_.next_offset()});
      }
      std::string piece = tokenizer_.token_to_piece(event.token);
      if (piece.empty() && std::find(shown_tokens_.begin(), shown_tokens_.end(), event.token) != shown_tokens_.end()) {
        piece = tokenizer_.token_text(event.token);
      }
      delta.text += text_.push(piece);
      if (text_.stopped()) {
        // A stop string matched: nothing more is wanted from the engine.
        release_engine(engine_finished_);
        finish("stop", delta);
        return;
      }
    }
  }
  switch (event.finish) {
    case FinishReason::kNone:
      break;
    case FinishReason::kStop:
      finish("stop", delta);
      break;
    case FinishReason::kLength:
      finish("length", delta);
      break;
    case FinishReason::kCancelled:
      finish("cancelled", delta);
      break;
    case FinishReason::kError:
      outcome_.error = event.error.empty() ? "engine error" : event.error;
      finish("error", delta);
      break;
  }
}

void Generation::finish(std::string reason, Delta& delta) {
  delta.text += text_.finish();
  outcome_.finish_reason = std::move(reason);
}

void Generation::abandon() {
  if (done()) return;
  release_engine(engine_finished_);
  outcome_.finish_reason = "cancelled";
}

void Generation::abort() {
  if (done()) return;
  release_engine(engine_finished_);
  Delta ignored;
  finish("abort", ignored);
}

}  // namespace kvstash::server
