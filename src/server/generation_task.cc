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
    tool_stream_ = std::make_unique<ToolCallStream>(tool_format_, parsed_.tools);
  }
}

std::string GenerationTask::tool_call_events(const ParsedOutput& parsed) {
  std::string out;
  if (!parsed.reasoning.empty()) {
    json chunk = chat_chunk_json(meta_, false, "", "", nullptr);
    chunk["choices"][0]["delta"] = {{"reasoning_content", parsed.reasoning}};
    out += sse_event(chunk);
  }
  if (parsed.content) out += sse_event(chat_chunk_json(meta_, false, *parsed.content, "", nullptr));
  for (std::size_t i = 0; i < parsed.calls.size(); ++i) {
    const ParsedToolCall& call = parsed.calls[i];
    // As OpenAI streams a call: its index, id, type and name first, then the arguments' text.
    json head = chat_chunk_json(meta_, false, "", "", nullptr);
    head["choices"][0]["delta"] = {{"tool_calls", json::array({{{"index", i}, {"id", call.id}, {"type", "function"},
                                                                 {"function", {{"name", call.name}, {"arguments", ""}}}}})}};
    out += sse_event(head);
    json args = chat_chunk_json(meta_, false, "", "", nullptr);
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
  if (auto err = gen_->start(std::move(request), [weak] {
        if (auto task = weak.lock()) task->schedule_pump();
      })) {
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
  gen_->replay(std::move(events), [weak] {
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
      exchange_->write(sse_event(chat_chunk_json(meta_, /*first=*/true, "", "", nullptr)));
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

void GenerationTask::pump() {
  if (finished_) return;
  const bool chat = parsed_.endpoint == Endpoint::kChatCompletions;
  // One chunk per token event that adds output: the stream depends on the tokens only, not on
  // how many events arrived between two pumps (a cached answer replays the same chunks).
  std::string events;
  for (Delta& d : gen_->poll_each(std::chrono::milliseconds(0))) {
    text_ += d.text;
    if (parsed_.stream) {
      if (tool_stream_) d.text = tool_stream_->push(d.text);  // a call's markup is held, never content
      if (d.text.empty() && d.logprobs.empty()) continue;
      json lp = nullptr;
      if (parsed_.logprobs) lp = chat ? chat_logprobs_json(d.logprobs, host_.tokenizer) : completion_logprobs_json(d.logprobs, host_.tokenizer);
      events += sse_event(chat ? chat_chunk_json(meta_, false, d.text, "", lp) : text_chunk_json(meta_, d.text, "", lp));
    } else {
      logprobs_.insert(logprobs_.end(), d.logprobs.begin(), d.logprobs.end());
    }
  }
  if (!events.empty() && !exchange_->write(std::move(events))) return client_gone();  // gone, or a reader too slow
  if (gen_->done()) complete();
}

void GenerationTask::complete() {
  if (finished_) return;
  const Outcome& o = gen_->outcome();
  const bool chat = parsed_.endpoint == Endpoint::kChatCompletions;
  host_.metrics.observe_generation(o.prompt_tokens, o.cached_tokens, o.completion_tokens,
                                   o.completion_tokens > 0 ? o.ttft_s : -1.0, seconds_since(record_.start));
  if (on_answer_ && (o.finish_reason == "stop" || o.finish_reason == "length")) on_answer_(*gen_, text_);
  if (parsed_.stream) {
    std::string out;
    if (o.finish_reason == "error") {
      out += sse_event(json::parse(ApiError{500, "generation failed: " + o.error, "server_error", "", ""}.to_json()));
    } else if (o.finish_reason == "abort") {
      // The stream is cut: an error event says so (a client must not take it as complete).
      out += sse_event(json::parse(abort_error(abort_reason_).to_json()));
    } else {
      std::string finish = o.finish_reason;
      if (tool_stream_) {
        const ParsedOutput parsed = tool_stream_->finish();
        out += tool_call_events(parsed);
        if (!parsed.calls.empty() && finish == "stop") finish = "tool_calls";
      }
      out += sse_event(chat ? chat_chunk_json(meta_, false, "", finish, nullptr)
                            : text_chunk_json(meta_, "", finish, nullptr));
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
  json body;
  if (chat) {
    body = chat_completion_json(meta_, text_, o, parsed_.logprobs ? chat_logprobs_json(logprobs_, host_.tokenizer) : json(nullptr));
    if (tool_format_ != ToolCallFormat::kNone) {
      const ParsedOutput parsed = parse_tool_calls(tool_format_, text_, parsed_.tools);
      json& choice = body["choices"][0];
      choice["message"]["content"] = parsed.content ? json(*parsed.content) : json(nullptr);
      if (!parsed.reasoning.empty()) choice["message"]["reasoning_content"] = parsed.reasoning;
      if (!parsed.calls.empty()) {
        choice["message"]["tool_calls"] = tool_calls_json(parsed.calls);
        if (o.finish_reason == "stop") choice["finish_reason"] = "tool_calls";
      }
    }
  } else {
    body = text_completion_json(meta_, text_, o, parsed_.logprobs ? completion_logprobs_json(logprobs_, host_.tokenizer) : json(nullptr));
  }
  http::Response r;
  r.body = dump_json(body);
  r.headers = headers_;
  host_.metrics.count_request(record_.endpoint, 200);  // before the answer leaves
  exchange_->respond(std::move(r));
  host_.log(record_, 200, o, o.finish_reason == "abort" ? "abort=" + abort_reason_ : "");
  end_task();
}

void GenerationTask::client_gone() {
  if (finished_) return;
  gen_->abandon();
  const Outcome& o = gen_->outcome();
  host_.metrics.observe_generation(o.prompt_tokens, o.cached_tokens, o.completion_tokens,
                                   o.completion_tokens > 0 ? o.ttft_s : -1.0, -1.0);
  if (!parsed_.stream) host_.metrics.count_request(record_.endpoint, 499);  // nginx's "client closed request"
  host_.log(record_, parsed_.stream ? 200 : 499, o, "client_disconnected");
  end_task();
}

void GenerationTask::abort(const std::string& why) {
  if (finished_) return;
  abort_reason_ = why;
  gen_->abort();
  pump();
}

void GenerationTask::answer_error(const ApiError& error) {
  http::Response r;
  r.status = error.http_status;
  r.body = error.to_json();
  host_.metrics.count_request(record_.endpoint, error.http_status);
  exchange_->respond(std::move(r));
  host_.log(record_, error.http_status, gen_->outcome(), "error=\"" + error.message.substr(0, 200) + "\"");
  end_task();
}

void GenerationTask::end_task() {
  if (finished_.exchange(true)) return;
  gen_.reset();  // cancels the engine's side if still running
  exchange_->on_close(nullptr);
  if (host_.finished) host_.finished();
}

}  // namespace kvstash::server
