// One generation request in flight on the event-driven HTTP layer: it owns the Generation, the
// admission slot and the Exchange, and turns engine events into the JSON answer or the SSE stream.
//
// Flow: start() submits; every engine event schedules one pump() on the exchange's strand (the
// engine thread only queues the event and posts, coalesced by `pump_scheduled_`); pump() polls
// the Generation without waiting and writes what it adds. The client going away (the exchange's
// close callback) cancels the engine's side; abort() (drain deadline, request time limit) ends
// it with an error (a 503 body, or an error event on a stream): a cut answer never carries a
// finish_reason.
//
// n > 1: one Generation per choice, fed by one engine request (Generation::start). A stream
// carries each choice's chunks with its index, as OpenAI's do, and each choice's finish chunk when
// it ends; the answer's choices are in index order; usage counts the prompt once and the
// completion tokens of every choice.
//
// Thread safety: start() runs on the exchange's strand (inside Handler::handle); pump(),
// client_gone() and abort() run there too (abort() is posted). schedule_pump() is safe from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "http/http_server.h"
#include "server/generation.h"
#include "server/request_parser.h"
#include "server/response_json.h"
#include "server/tool_calls.h"

namespace kvstash::server {

class Metrics;

// What one generation request's log line reports.
struct RequestRecord {
  std::string id;
  std::string endpoint;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool stream = false;
  std::string cache;  // the response cache's result (hit, miss, bypass); "" = no response cache
};

// What a task needs from the server around it.
struct TaskHost {
  Metrics& metrics;
  const Tokenizer& tokenizer;
  std::function<void(const RequestRecord&, int status, const Outcome&, const std::string& note)> log;
  std::function<void()> finished;  // the task is over (slot freed); called once
};

class GenerationTask : public std::enable_shared_from_this<GenerationTask> {
 public:
  // `gens`: one per choice (the request's n), choice 0 first.
  GenerationTask(TaskHost host, std::shared_ptr<http::Exchange> exchange, std::vector<std::unique_ptr<Generation>> gens,
                 ParsedRequest parsed, ResponseMeta meta, RequestRecord record)
      : host_(std::move(host)),
        exchange_(std::move(exchange)),
        parsed_(std::move(parsed)),
        meta_(std::move(meta)),
        record_(std::move(record)) {
    for (auto& g : gens) choices_.push_back(Choice{std::move(g)});
  }

  // Replaces host.finished (set before start()).
  void set_finished_callback(std::function<void()> finished) { host_.finished = std::move(finished); }
  // Extra headers of the answer (x-kvstash-cache); set before start().
  void set_headers(std::vector<http::Header> headers) { headers_ = std::move(headers); }
  // Called once, on the strand, when the generation ends with "stop" or "length" (a whole answer),
  // with the generation (its applied events when it records them) and the answer's text. Set
  // before start().
  using AnswerCallback = std::function<void(const Generation& gen, const std::string& text)>;
  void set_answer_callback(AnswerCallback callback) { on_answer_ = std::move(callback); }
  // Holds a whole non-streamed answer until `gate` calls `send` (on any thread: send posts itself
  // to the strand); kvstash_store_sync's wait for the KV store. Set before start().
  using AnswerGate = std::function<void(std::function<void()> send)>;
  void set_answer_gate(AnswerGate gate) { gate_ = std::move(gate); }
  // Parse the output for tool calls in `format` (tool_calls.h) when the request lets the model
  // call (ParsedRequest::tools); set before start().
  void set_tool_call_format(ToolCallFormat format);
  // Submits `request`. On error answers it (400/429/500) and returns false.
  bool start(GenerationRequest request);
  // Answers from recorded token events (a response-cache hit, one choice) through the same path as start().
  void start_replay(std::vector<TokenEvent> events);
  // Posts an abort to the strand; `why` is "shutdown" or "request_timeout".
  void abort_later(std::string why);
  bool finished() const { return finished_; }
  std::chrono::steady_clock::time_point started() const { return record_.start; }

 private:
  void begin();  // close callback, stream head
  void schedule_pump();
  void pump();
  void complete();
  void client_gone();
  void abort(const std::string& why);
  void answer_error(const ApiError& error);
  void end_task();
  // One choice's state: its generation and what it has produced.
  struct Choice {
    std::unique_ptr<Generation> gen;
    std::string text{};                        // the output so far
    std::vector<LogprobEntry> logprobs{};      // whole answers
    std::unique_ptr<ToolCallStream> tool_stream{};  // streaming with tool calls parsed
    bool ended = false;                      // its finish chunk is out (streaming)
  };
  // The streamed end of a choice with tool calls: held content, then each call's chunks.
  std::string tool_call_events(const ParsedOutput& parsed, int index);
  // A chunk of choice `index` (chat or text, as the endpoint).
  nlohmann::json chunk(int index, bool first, const std::string& text, const std::string& finish, nlohmann::json lp) const;
  // The streamed end of one choice: tool calls, then its finish_reason chunk.
  std::string end_choice(Choice& c, int index);
  // One choice as the answer's choices[] entry.
  nlohmann::json choice_json(Choice& c, int index) const;
  bool all_done() const;
  Outcome total_outcome() const;  // usage: the prompt once, every choice's completion tokens

  TaskHost host_;
  std::shared_ptr<http::Exchange> exchange_;
  std::vector<Choice> choices_;
  ParsedRequest parsed_;
  ResponseMeta meta_;
  RequestRecord record_;
  std::atomic<bool> pump_scheduled_{false};
  std::atomic<bool> finished_{false};
  std::string abort_reason_;             // why abort() ended it
  std::vector<http::Header> headers_;
  AnswerCallback on_answer_;
  AnswerGate gate_;
  bool gated_ = false;  // the answer waits at the gate (strand only)
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;  // kNone: output is content only
};

}  // namespace kvstash::server
