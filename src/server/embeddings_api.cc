#include "server/embeddings_api.h"

#include <cstring>

#include <nlohmann/json.hpp>

namespace kvstash::server {
namespace {

using nlohmann::json;

std::string base64(const std::uint8_t* data, std::size_t n) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t b = (std::uint32_t{data[i]} << 16) | (i + 1 < n ? std::uint32_t{data[i + 1]} << 8 : 0) |
                            (i + 2 < n ? std::uint32_t{data[i + 2]} : 0);
    out += kAlphabet[(b >> 18) & 63];
    out += kAlphabet[(b >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(b >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[b & 63] : '=';
  }
  return out;
}

bool is_token_array(const json& j) {
  if (!j.is_array() || j.empty()) return false;
  for (const json& t : j) {
    if (!t.is_number_integer()) return false;
  }
  return true;
}

// The inputs as token ids, or the error naming the bad one.
std::optional<ApiError> inputs_of(const json& input, const Tokenizer& tokenizer, std::vector<std::vector<TokenId>>* out) {
  auto from_json = [&](const json& one, const std::string& param) -> std::optional<ApiError> {
    if (one.is_string()) {
      out->push_back(tokenize(tokenizer, one.get<std::string>(), /*add_special=*/false, /*parse_special=*/false));
      if (out->back().empty()) return bad_request("'" + param + "' is empty", "input");
      return std::nullopt;
    }
    if (is_token_array(one)) {
      std::vector<TokenId> ids;
      for (const json& t : one) {
        const std::int64_t id = t.get<std::int64_t>();
        if (id < 0 || id >= static_cast<std::int64_t>(tokenizer.vocab_size())) {
          return bad_request("'" + param + "' holds token id " + std::to_string(id) + ", not an id of this vocabulary (size " +
                                 std::to_string(tokenizer.vocab_size()) + ")",
                             "input", "invalid_token");
        }
        ids.push_back(static_cast<TokenId>(id));
      }
      out->push_back(std::move(ids));
      return std::nullopt;
    }
    return bad_request("'" + param + "' must be a non-empty string or a non-empty array of token ids", "input");
  };
  if (input.is_string() || is_token_array(input)) return from_json(input, "input");
  if (!input.is_array() || input.empty()) {
    return bad_request("'input' must be a string, an array of strings or token arrays (not empty)", "input");
  }
  if (input.size() > kMaxEmbeddingInputs) {
    return bad_request("'input' has " + std::to_string(input.size()) + " inputs, more than the " +
                           std::to_string(kMaxEmbeddingInputs) + " allowed",
                       "input");
  }
  for (std::size_t i = 0; i < input.size(); ++i) {
    if (auto err = from_json(input[i], "input[" + std::to_string(i) + "]")) return err;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> embeddings_request(const std::string& body, GenerationBackend& backend,
                                           const std::function<std::optional<ApiError>(const std::string&)>& check_model,
                                           std::string* response) {
  const json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) return bad_request("the body is not a JSON object");
  if (!request.contains("model")) return bad_request("'model' is required (the id from GET /v1/models)", "model");
  if (!request["model"].is_string()) return bad_request("'model' must be a string", "model");
  const std::string model = request["model"].get<std::string>();
  if (auto err = check_model(model)) return err;
  std::string format = "float";
  if (request.contains("encoding_format") && !request["encoding_format"].is_null()) {
    if (!request["encoding_format"].is_string()) return bad_request("'encoding_format' must be a string", "encoding_format");
    format = request["encoding_format"].get<std::string>();
    if (format != "float" && format != "base64") {
      return bad_request("'encoding_format' must be \"float\" or \"base64\", not \"" + format + "\"", "encoding_format");
    }
  }
  if (request.contains("dimensions") && !request["dimensions"].is_null()) {
    return bad_request("'dimensions' is not supported: embeddings have the model's hidden size", "dimensions",
                       "unsupported_parameter");
  }
  if (!request.contains("input")) return bad_request("'input' is required", "input");
  if (backend.embedding_max_tokens() <= 0) {
    return ApiError{501, "this server computes no embeddings", "invalid_request_error", "", "unsupported"};
  }
  std::vector<std::vector<TokenId>> inputs;
  if (auto err = inputs_of(request["input"], *backend.model_info().tokenizer, &inputs)) return err;
  json data = json::array();
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int>(inputs[i].size()) > backend.embedding_max_tokens()) {
      return ApiError{400,
                      "input " + std::to_string(i) + " has " + std::to_string(inputs[i].size()) +
                          " tokens; embeddings take at most " + std::to_string(backend.embedding_max_tokens()),
                      "invalid_request_error", "input", "context_length_exceeded"};
    }
    Expected<std::vector<float>> e = backend.embed(inputs[i]);
    if (!e) return from_status(e.status());
    tokens += static_cast<std::int64_t>(inputs[i].size());
    json item = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") {
      item["embedding"] = base64(reinterpret_cast<const std::uint8_t*>(e->data()), e->size() * sizeof(float));
    } else {
      item["embedding"] = *e;
    }
    data.push_back(std::move(item));
  }
  *response = json{{"object", "list"},
                   {"data", std::move(data)},
                   {"model", backend.model_info().id},
                   {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}
                  .dump();
  return std::nullopt;
}

EmbeddingsApi::EmbeddingsApi(GenerationBackend& backend,
                             std::function<std::optional<ApiError>(const std::string&)> check_model, std::size_t max_queued)
    : backend_(backend), check_model_(std::move(check_model)), max_queued_(max_queued) {
  worker_ = std::thread([this] { worker_loop(); });
}

EmbeddingsApi::~EmbeddingsApi() { stop(); }

void EmbeddingsApi::submit(std::string body, std::function<void(int, std::string)> done) {
  ApiError refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && jobs_.size() < max_queued_) {
      jobs_.push_back({std::move(body), std::move(done)});
      wake_.notify_one();
      return;
    }
    refused = stopping_ ? ApiError{503, "the server is shutting down", "server_error", "", "shutdown"}
                        : ApiError{429, "too many embedding requests waiting (" + std::to_string(max_queued_) + "); retry later",
                                   "rate_limit_error", "", "queue_full"};
  }
  done(refused.http_status, refused.to_json());
}

void EmbeddingsApi::stop() {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    left.swap(jobs_);
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (Job& job : left) job.done(503, ApiError{503, "the server is shutting down", "server_error", "", "shutdown"}.to_json());
}

void EmbeddingsApi::worker_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::string response;
    if (auto err = embeddings_request(job.body, backend_, check_model_, &response)) {
      job.done(err->http_status, err->to_json());
    } else {
      job.done(200, std::move(response));
    }
  }
}

}  // namespace kvstash::server
