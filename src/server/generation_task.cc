#include "server/generation_task.h"

#include "server/metrics.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ApiError abort_error(const std::string& why) {
  if (why == "request_timeout") {
    return ApiError{503, "the request ran past the server's time limit; the answer is incomplete", "server_error", "",
                    "request_timeout"};
  }
  return ApiError{503, "the server is shutting down; the answer is incomplete", "server_error", "", "shutdown"};
}

}  // namespace

void GenerationTask::set_tool_call_format(ToolCallFormat format) {
  tool_format_ = parsed_.tools.parse_calls() ? format : ToolCallFormat::kNone;
  if (tool_format_ != ToolCallFormat::kNone && parsed_.stream) {
    for (Choice& c : choices_) c.tool_stream = std::make_unique<ToolCallStream>(tool_format_, parsed_.tools);
  }
}

json GenerationTask::chunk(int index, bool first, const std::string& text, const std::string& finish, json lp) const {
  json out = parsed_.endpoint == Endpoint::kChatCompletions ? chat_chunk_json(meta_, first, text, finish, std::move(lp))
                                                            : text_chunk_json(meta_, text, finish, std::move(lp));
  out["choices"][0]["index"] = index;
  return out;
}

std::string GenerationTask::tool_call_events(const ParsedOutput& parsed, int index) {
  std::string out;
  if (!parsed.reasoning.empty()) {
    json c = chunk(index, false, "", "", nullptr);
    c["choices"][0]["delta"] = {{"reasoning_content", parsed.reasoning}};
    out += sse_event(c);
  }
  if (parsed.content) out += sse_event(chunk(index, false, *parsed.content, "", nullptr));
  for (std::size_t i = 0; i < parsed.calls.size(); ++i) {
    const ParsedToolCall& call = parsed.calls[i];
    // As OpenAI streams a call: its index, id, type and name first, then the arguments' text.
    json head = chunk(index, false, "", "", nullptr);
    head["choices"][0]["delta"] = {{"tool_calls", json::array({{{"index", i}, {"id", call.id}, {"type", "function"},
                                                                 {"function", {{"name", call.name}, {"arguments", ""}}}}})}};
    out += sse_event(head);
    json args = chunk(index, false, "", "", nullptr);
    args["choices"][0]["delta"] = {{"tool_calls", json::array({{{"index", i}, {"function", {{"arguments", call.arguments}}}}})}};
    out += sse_event(args);
  }
  return out;
}

bool GenerationTask::start(GenerationRequest request) {
  std::weak_ptr<GenerationTask> weak = weak_from_this();
  exchange_->on_close([weak] {
    if (auto task = weak.lock()) task->client_gone();
  });
  std::vector<Generation*> others;
  for (std::size_t i = 1; i < choices_.size(); ++i) others.push_back(choices_[i].gen.get());
  if (auto err = choices_[0].gen->start(std::move(request), [weak] {
        if (auto task = weak.lock()) task->schedule_pump();
      }, others)) {
    answer_error(*err);
    return false;
  }
  begin();
  return true;
}

void GenerationTask::start_replay(std::vector<TokenEvent> events) {
  std::weak_ptr<GenerationTask> weak = weak_from_this();
  exchange_->on_close([weak] {
    if (auto task = weak.lock()) task->client_gone();
  });
  begin();
  choices_[0].gen->replay(std::move(events), [weak] {
    if (auto task = weak.lock()) task->schedule_pump();
  });
}

void GenerationTask::begin() {
  if (parsed_.stream) {
    http::Response head;
    head.content_type = "text/event-stream";
    head.headers.push_back({"Cache-Control", "no-cache"});
    head.headers.push_back({"X-Accel-Buffering", "no"});  // proxies: do not buffer the stream
    head.headers.insert(head.headers.end(), headers_.begin(), headers_.end());
    exchange_->begin_stream(std::move(head));
    host_.metrics.count_request(record_.endpoint, 200);  // a stream is counted when it starts
    if (parsed_.endpoint == Endpoint::kChatCompletions) {
      std::string out;  // each choice's role chunk, as OpenAI sends them
      for (std::size_t i = 0; i < choices_.size(); ++i) out += sse_event(chunk(static_cast<int>(i), /*first=*/true, "", "", nullptr));
      exchange_->write(std::move(out));
    }
  }
}

void GenerationTask::schedule_pump() {
  if (pump_scheduled_.exchange(true)) return;
  exchange_->post([self = shared_from_this()] {
    self->pump_scheduled_ = false;
    self->pump();
  });
}

void GenerationTask::abort_later(std::string why) {
  exchange_->post([self = shared_from_this(), why = std::move(why)] { self->abort(why); });
}

bool GenerationTask::all_done() const {
  for (const Choice& c : choices_) {
    if (!c.gen->done()) return false;
  }
  return true;
}

Outcome GenerationTask::total_outcome() const {
  if (choices_.empty()) return Outcome{};  // after end_task()
  Outcome total = choices_[0].gen->outcome();
  for (std::size_t i = 1; i < choices_.size(); ++i) {
    const Outcome& o = choices_[i].gen->outcome();
    total.completion_tokens += o.completion_tokens;
    if (total.finish_reason == "stop" || total.finish_reason == "length") {
      if (o.finish_reason != "stop" && o.finish_reason != "length") {  // a cut or failed choice marks the whole
        total.finish_reason = o.finish_reason;
        total.error = o.error;
      }
    }
  }
  return total;
}

std::string GenerationTask::end_choice(Choice& c, int index) {
  c.ended = true;
  std::string finish = c.gen->outcome().finish_reason;
  if (finish != "stop" && finish != "length") return "";  // the stream ends with an error event instead
  std::string out;
  if (c.tool_stream) {
    const ParsedOutput parsed = c.tool_stream->finish();
    out += tool_call_events(parsed, index);
    if (!parsed.calls.empty() && finish == "stop") finish = "tool_calls";
  }
  return out + sse_event(chunk(index, false, "", finish, nullptr));
}

void GenerationTask::pump() {
  if (finished_) return;
  const bool chat = parsed_.endpoint == Endpoint::kChatCompletions;
  // One chunk per token event that adds output: the stream depends on the tokens only, not on
  // how many events arrived between two pumps (a cached answer replays the same chunks).
  std::string events;
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    const int index = static_cast<int>(i);
    for (Delta& d : c.gen->poll_each(std::chrono::milliseconds(0))) {
      c.text += d.text;
      if (parsed_.stream) {
        if (c.tool_stream) d.text = c.tool_stream->push(d.text);  // a call's markup is held, never content
        if (d.text.empty() && d.logprobs.empty()) continue;
        json lp = nullptr;
        if (parsed_.logprobs) lp = chat ? chat_logprobs_json(d.logprobs, host_.tokenizer) : completion_logprobs_json(d.logprobs, host_.tokenizer);
        events += sse_event(chunk(index, false, d.text, "", lp));
      } else {
        c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      }
    }
    // With several choices each ends in the stream as it ends; with one, complete() ends it.
    if (parsed_.stream && choices_.size() > 1 && c.gen->done() && !c.ended) events += end_choice(c, index);
  }
  if (!events.empty() && !exchange_->write(std::move(events))) return client_gone();  // gone, or a reader too slow
  if (all_done()) complete();
}

json GenerationTask::choice_json(Choice& c, int index) const {
  const bool chat = parsed_.endpoint == Endpoint::kChatCompletions;
  const Outcome& o = c.gen->outcome();
  json body = chat ? chat_completion_json(meta_, c.text, o, parsed_.logprobs ? chat_logprobs_json(c.logprobs, host_.tokenizer) : json(nullptr))
                   : text_completion_json(meta_, c.text, o, parsed_.logprobs ? completion_logprobs_json(c.logprobs, host_.tokenizer) : json(nullptr));
  json choice = body["choices"][0];
  choice["index"] = index;
  if (chat && tool_format_ != ToolCallFormat::kNone) {
    const ParsedOutput parsed = parse_tool_calls(tool_format_, c.text, parsed_.tools);
    choice["message"]["content"] = parsed.content ? json(*parsed.content) : json(nullptr);
    if (!parsed.reasoning.empty()) choice["message"]["reasoning_content"] = parsed.reasoning;
    if (!parsed.calls.empty()) {
      choice["message"]["tool_calls"] = tool_calls_json(parsed.calls);
      if (o.finish_reason == "stop") choice["finish_reason"] = "tool_calls";
    }
  }
  return choice;
}

void GenerationTask::complete() {
  if (finished_ || gated_) return;
  const Outcome o = total_outcome();
  const bool chat = parsed_.endpoint == Endpoint::kChatCompletions;
  host_.metrics.observe_generation(o.prompt_tokens, o.cached_tokens, o.completion_tokens,
                                   o.completion_tokens > 0 ? o.ttft_s : -1.0, seconds_since(record_.start));
  if (on_answer_ && choices_.size() == 1 && (o.finish_reason == "stop" || o.finish_reason == "length")) {
    on_answer_(*choices_[0].gen, choices_[0].text);
  }
  if (parsed_.stream) {
    std::string out;
    if (o.finish_reason == "error") {
      out += sse_event(json::parse(ApiError{500, "generation failed: " + o.error, "server_error", "", ""}.to_json()));
    } else if (o.finish_reason == "abort") {
      // The stream is cut: an error event says so (a client must not take it as complete).
      out += sse_event(json::parse(abort_error(abort_reason_).to_json()));
    } else {
      for (std::size_t i = 0; i < choices_.size(); ++i) {
        if (!choices_[i].ended) out += end_choice(choices_[i], static_cast<int>(i));
      }
      if (parsed_.include_usage) out += sse_event(usage_chunk_json(meta_, chat, o));
    }
    out += "data: [DONE]\n\n";
    exchange_->write(std::move(out));
    exchange_->end();
    host_.log(record_, 200, o, o.finish_reason == "abort" ? "abort=" + abort_reason_ : "");
    return end_task();
  }
  if (o.finish_reason == "error") {
    answer_error(ApiError{500, "generation failed: " + o.error, "server_error", "", ""});
    return;
  }
  if (o.finish_reason != "stop" && o.finish_reason != "length") {
    // Cut by the server (shutdown, time limit): an error, never an answer that reads as whole.
    answer_error(abort_error(abort_reason_));
    return;
  }
  json body = chat ? chat_completion_json(meta_, "", o, nullptr) : text_completion_json(meta_, "", o, nullptr);
  body["choices"] = json::array();
  for (std::size_t i = 0; i < choices_.size(); ++i) body["choices"].push_back(choice_json(choices_[i], static_cast<int>(i)));
  body["usage"] = usage_json(o);
  http::Response r;
  r.body = dump_json(body);
  r.headers = headers_;
  if (gate_) {
    AnswerGate gate = std::move(gate_);
    gate_ = nullptr;
    gated_ = true;  // complete() again (a late pump) must not answer twice
    gate([self = shared_from_this(), r = std::move(r), o]() mutable {
      self->exchange_->post([self, r = std::move(r), o]() mutable {
        if (self->finished_) return;  // the client left meanwhile
        self->host_.metrics.count_request(self->record_.endpoint, 200);
        self->exchange_->respond(std::move(r));
        self->host_.log(self->record_, 200, o, "");
        self->end_task();
      });
    });
    return;
  }
  host_.metrics.count_request(record_.endpoint, 200);  // before the answer leaves
  exchange_->respond(std::move(r));
  host_.log(record_, 200, o, "");
  end_task();
}

void GenerationTask::client_gone() {
  if (finished_) return;
  for (Choice& c : choices_) c.gen->abandon();
  const Outcome o = total_outcome();
  host_.metrics.observe_generation(o.prompt_tokens, o.cached_tokens, o.completion_tokens,
                                   o.completion_tokens > 0 ? o.ttft_s : -1.0, -1.0);
  if (!parsed_.stream) host_.metrics.count_request(record_.endpoint, 499);  // nginx's "client closed request"
  host_.log(record_, parsed_.stream ? 200 : 499, o, "client_disconnected");
  end_task();
}

void GenerationTask::abort(const std::string& why) {
  if (finished_) return;
  abort_reason_ = why;
  for (Choice& c : choices_) c.gen->abort();
  pump();
}

void GenerationTask::answer_error(const ApiError& error) {
  http::Response r;
  r.status = error.http_status;
  r.body = error.to_json();
  host_.metrics.count_request(record_.endpoint, error.http_status);
  exchange_->respond(std::move(r));
  host_.log(record_, error.http_status, total_outcome(),
            (abort_reason_.empty() ? "" : "abort=" + abort_reason_ + " ") + "error=\"" + error.message.substr(0, 200) + "\"");
  end_task();
}

void GenerationTask::end_task() {
  if (finished_.exchange(true)) return;
  choices_.clear();  // cancels the engine's side if still running
  exchange_->on_close(nullptr);
  if (host_.finished) host_.finished();
}

}  // namespace kvstash::server
