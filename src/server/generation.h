// One request's generation as the HTTP side sees it: submits to the backend, folds the engine's
// token events into text deltas (incremental UTF-8 decoding, stop strings held back and cut,
// logprobs collected) and ends the engine's side when a stop string matches or the client goes
// away.
//
// Usage: start() (or replay() of a cached answer); then poll() or poll_each() until done();
// outcome() gives finish reason and usage. The output is a function of the token events alone:
// replaying the events a generation applied (applied_events()) yields the same deltas, the same
// text and the same outcome, which is what lets the response cache answer exactly as the engine did.
//
// Thread safety: one HTTP thread owns a Generation; the engine thread only touches the shared
// EventQueue.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/event_queue.h"
#include "server/text_stream.h"

namespace kvstash::server {

struct LogprobEntry {
  TokenId token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top;
  std::size_t text_offset = 0;  // bytes of output text before this token's text
};

// New output since the previous poll().
struct Delta {
  std::string text;
  std::vector<LogprobEntry> logprobs;  // only when logprobs were requested
};

// The engine request behind the Generations of one request's choices (n of them, each its own
// Generation): the engine's side is cancelled once no choice wants more from it and some choice
// still runs there. With n > 1 a choice cut by a stop string thus keeps decoding in the engine
// until the others are done (the engine cancels whole requests); its Generation ignores it.
// Owned by the Generations (shared_ptr); used on their owner's thread only.
class EngineRequest {
 public:
  EngineRequest(GenerationBackend& backend, int n_choices) : backend_(backend), open_(n_choices) {}
  void started(std::uint64_t id) { id_ = id; }
  // One choice needs nothing more from the engine; `engine_done` when its final event arrived.
  // Called once per choice.
  void release(bool engine_done) {
    if (!engine_done) cut_ = true;
    if (--open_ == 0 && cut_ && id_) backend_.cancel(*id_);
  }

 private:
  GenerationBackend& backend_;
  std::optional<std::uint64_t> id_;
  int open_;          // choices that have not released
  bool cut_ = false;  // some choice released before its final event
};

struct Outcome {
  // "stop", "length", "cancelled" (the client went away), "abort" (the server ended it: shutdown,
  // time limit) or "error"; "" while running. Only "stop" and "length" reach a client as a
  // finish_reason (response_json.h); the others end the answer with an error.
  std::string finish_reason;
  std::string error;          // when finish_reason == "error"
  int prompt_tokens = 0;
  int cached_tokens = 0;
  int completion_tokens = 0;
  double ttft_s = 0.0;
};

class Generation {
 public:
  Generation(GenerationBackend& backend, std::vector<std::string> stop, bool want_logprobs);
  ~Generation();  // cancels the engine's side if still running

  // Submits. `on_event`, if set, runs on the engine thread after each event is queued (quick: it
  // only schedules a poll()). Errors: the backend's (400 for invalid, 429 when the queue is full,
  // else 500).
  // With request.n > 1, this Generation is choice 0 and `other_choices` (n - 1 Generations made
  // for the same request, owned by the caller) get choices 1..n-1: one engine request feeds all.
  std::optional<ApiError> start(GenerationRequest request, std::function<void()> on_event = {},
                                const std::vector<Generation*>& other_choices = {});
  // Answers from recorded token events instead of the engine (a response-cache hit): queues them
  // all and calls on_event once. Nothing is submitted; cancel is a no-op.
  void replay(std::vector<TokenEvent> events, std::function<void()> on_event = {});
  // Waits up to `wait` for events and returns what they add to the output.
  Delta poll(std::chrono::milliseconds wait);
  // As poll(), one Delta per token event applied (in order; a Delta may be empty when a token's
  // text is held back), so that a stream sends one chunk per token whatever the timing.
  std::vector<Delta> poll_each(std::chrono::milliseconds wait);
  // Tokens whose text the output shows although they are control tokens (which render as
  // nothing): a tool-call format's markup ("[TOOL_CALLS]", "<|python_tag|>"), which the tool-call
  // parser must see (tool_calls.h). Set before start() / replay().
  void show_tokens(std::vector<TokenId> tokens) { shown_tokens_ = std::move(tokens); }
  // Keep a copy of every event applied (off by default): the response cache stores them.
  void record_events() { recording_ = true; }
  const std::vector<TokenEvent>& applied_events() const { return applied_; }
  // Some event was computed on unchecked KV (TokenEvent::unchecked): the answer is never signed
  // nor stored as a response record (trust flows downhill).
  bool computed_on_unchecked() const { return unchecked_; }
  bool done() const { return !outcome_.finish_reason.empty(); }
  // The client went away: cancels the engine's side; done() becomes true ("cancelled").
  void abandon();
  // The server ends the request (shutting down, time limit): cancels the engine's side; done()
  // becomes true with finish_reason "abort", so that a cut answer is never reported as "stop".
  void abort();
  const Outcome& outcome() const { return outcome_; }

 private:
  void apply(const TokenEvent& event, Delta& delta);
  void finish(std::string reason, Delta& delta);
  // This choice needs nothing more from the engine (once; see EngineRequest).
  void release_engine(bool engine_done);

  GenerationBackend& backend_;
  const Tokenizer& tokenizer_;
  bool want_logprobs_;
  std::vector<TokenId> stop_tokens_;
  std::vector<TokenId> shown_tokens_;
  TextStream text_;
  std::shared_ptr<EventQueue> queue_ = std::make_shared<EventQueue>();
  std::shared_ptr<EngineRequest> engine_request_;  // null before start() and for a replay
  bool engine_finished_ = false;  // the final event arrived
  bool released_ = false;         // release_engine() ran
  bool recording_ = false;
  bool unchecked_ = false;
  std::vector<TokenEvent> applied_;  // when recording_
  Outcome outcome_;
};

}  // namespace kvstash::server
