// The semantic response cache and POST /v1/embeddings end to end: real `kvstash serve` processes
// with --response-cache and --semantic-cache, real sockets.
//
// Every gate test has the same shape: a positive control first (a near-duplicate in the same
// namespace IS a semantic hit, so similarity alone would let the next request through), then the
// request that differs only in what the gate guards, which must be a miss. The cosine between the
// texts is measured through /v1/embeddings and asserted to pass the threshold, so the miss can only
// come from the gate: without it, each of these requests would be a semantic hit.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <regex>

#include "cache/test_util.h"
#include "modelgen/test_models.h"
#include "server/serve_process.h"

namespace kvstash::server::testing {
namespace {

using cache::testing::ScratchDir;

constexpr double kThreshold = 0.9;  // --semantic-cache; the texts below are measured against it

struct Answer {
  int status = 0;
  std::string cache;   // x-kvstash-cache
  std::string key;     // x-kvstash-cache-key
  std::string source;  // x-kvstash-cache-source (semantic hits)
  json body;
};

class SemanticCacheE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16);
    ASSERT_FALSE(model_.empty());
    ASSERT_TRUE(std::filesystem::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
  }

  std::unique_ptr<ServeProcess> serve(const std::string& name, std::vector<std::string> args = {},
                                      const std::string& model = "") {
    std::vector<std::string> all = {"--identity", dir_.path() + "/node.key", "--response-cache", "64MiB",
                                    "--semantic-cache", std::to_string(kThreshold)};
    all.insert(all.end(), args.begin(), args.end());
    auto p = std::make_unique<ServeProcess>(model.empty() ? model_ : model, all, dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << p->log();
    return p;
  }

  static Answer post(const ServeProcess& s, const std::string& path, const json& body) {
    Answer a;
    auto r = s.client()->Post(path, s.named(path, body.dump()), "application/json");
    if (!r) return a;
    a.status = r->status;
    a.cache = r->get_header_value("x-kvstash-cache");
    a.key = r->get_header_value("x-kvstash-cache-key");
    a.source = r->get_header_value("x-kvstash-cache-source");
    a.body = json::parse(r->body, nullptr, false);
    return a;
  }

  static json chat(const std::string& text, json extra = json::object()) {
    json body = {{"messages", {{{"role", "user"}, {"content", text}}}}, {"temperature", 0}, {"max_tokens", 8}};
    body.update(extra);
    return body;
  }
  static json chat_with_system(const std::string& system, const std::string& text) {
    json body = chat(text);
    body["messages"] = {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", text}}};
    return body;
  }

  static std::vector<std::vector<float>> embed(const ServeProcess& s, const json& input) {
    Answer a = post(s, "/v1/embeddings", {{"input", input}});
    std::vector<std::vector<float>> out;
    if (a.status != 200) return out;
    for (const json& d : a.body["data"]) out.push_back(d["embedding"].get<std::vector<float>>());
    return out;
  }
  static double cosine(const ServeProcess& s, const std::string& a, const std::string& b) {
    auto e = embed(s, json::array({a, b}));
    if (e.size() != 2) return -2;
    double dot = 0;
    for (std::size_t i = 0; i < e[0].size(); ++i) dot += double(e[0][i]) * e[1][i];
    return dot;
  }
  static std::string content(const Answer& a) {
    return a.body.is_object() ? a.body["choices"][0]["message"]["content"].get<std::string>() : "";
  }
  static long metric(const ServeProcess& s, const std::string& line) {
    auto r = s.client()->Get("/metrics");
    if (!r) return -1;
    std::smatch m;
    const std::regex re(std::regex_replace(line, std::regex(R"([{}\[\]()."+*?^$|\\])"), R"(\$&)") + R"( ([0-9]+))");
    return std::regex_search(r->body, m, re) ? std::stol(m[1]) : -1;
  }
  // The answer to `first` (a miss, stored), then `near` must be a semantic hit: the positive control.
  void expect_semantic_hit(const ServeProcess& s, const json& first, const json& near) {
    Answer a = post(s, "/v1/chat/completions", first);
    ASSERT_EQ(a.status, 200);
    ASSERT_EQ(a.cache, "miss");
    Answer b = wait_for_hit(s, near);
    EXPECT_EQ(b.cache, "semantic-hit") << b.body;
    EXPECT_EQ(b.source, a.key);
    EXPECT_EQ(content(b), content(a));
  }
  // Stores are write-behind: a near-duplicate sent at once may come before the answer is indexed.
  // Bounded retry of a request that must end as a semantic hit (each try is itself a miss until then,
  // and a miss stores its own answer; so the retried request is a near-duplicate never sent before).
  static Answer wait_for_hit(const ServeProcess& s, const json& near) {
    Answer b;
    for (int i = 0; i < 40; ++i) {  // 40 x 50 ms: a bound on the write-behind, not a timing test
      b = post(s, "/v1/chat/completions", near);
      if (b.cache != "miss") return b;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return b;
  }

  std::string model_;
  ScratchDir dir_;
};

TEST_F(SemanticCacheE2ETest, EmbeddingsAreNormalisedDeterministicAndBatchEqualsSingle) {
  auto s = serve("emb");
  const std::vector<std::string> texts = {"What is 2+3?", "Tell me a story about dragons", "x"};
  auto batch = embed(*s, texts);
  ASSERT_EQ(batch.size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    double norm = 0;
    for (float v : batch[i]) norm += double(v) * v;
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
    auto single = embed(*s, texts[i]);
    ASSERT_EQ(single.size(), 1u);
    ASSERT_EQ(single[0].size(), batch[i].size());
    for (std::size_t k = 0; k < single[0].size(); ++k) EXPECT_NEAR(single[0][k], batch[i][k], 1e-6);
  }
  EXPECT_NEAR(cosine(*s, texts[0], texts[0]), 1.0, 1e-6);
  EXPECT_LT(cosine(*s, texts[0], texts[1]), 0.99);
  // Token ids give the same embedding as the text they tokenize to (no BOS, no special tokens).
  auto tok = s->client()->Post("/tokenize", json{{"content", texts[0]}, {"add_special", false}, {"parse_special", false}}.dump(),
                               "application/json");
  ASSERT_TRUE(tok && tok->status == 200);
  auto by_ids = embed(*s, json::array({json::parse(tok->body)["tokens"]}));
  ASSERT_EQ(by_ids.size(), 1u);
  for (std::size_t k = 0; k < by_ids[0].size(); ++k) EXPECT_NEAR(by_ids[0][k], batch[0][k], 1e-6);
  // OpenAI's shape.
  Answer a = post(*s, "/v1/embeddings", {{"input", "hi there"}, {"model", s->model_id()}});
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.body["object"], "list");
  EXPECT_EQ(a.body["data"][0]["object"], "embedding");
  EXPECT_EQ(a.body["data"][0]["index"], 0);
  EXPECT_GT(a.body["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(a.body["usage"]["total_tokens"], a.body["usage"]["prompt_tokens"]);
  // base64: the same floats, little-endian.
  Answer b = post(*s, "/v1/embeddings", {{"input", "hi there"}, {"encoding_format", "base64"}});
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(b.body["data"][0]["embedding"].get<std::string>().size(), (a.body["data"][0]["embedding"].size() * 4 + 2) / 3 * 4);
  // Errors, OpenAI-style.
  EXPECT_EQ(post(*s, "/v1/embeddings", json::object()).status, 400);
  EXPECT_EQ(post(*s, "/v1/embeddings", {{"input", ""}}).status, 400);
  EXPECT_EQ(post(*s, "/v1/embeddings", {{"input", json::array()}}).status, 400);
  EXPECT_EQ(post(*s, "/v1/embeddings", {{"input", json::array({-1})}}).status, 400);
  EXPECT_EQ(post(*s, "/v1/embeddings", {{"input", "a"}, {"encoding_format", "int8"}}).status, 400);
  EXPECT_EQ(post(*s, "/v1/embeddings", {{"input", "a"}, {"model", "gpt-4"}}).status, 404);
  auto unnamed = s->client()->Post("/v1/embeddings", R"({"input": "a"})", "application/json");  // OpenAI requires `model`
  ASSERT_TRUE(unnamed);
  EXPECT_EQ(unnamed->status, 400) << unnamed->body;
  Answer long_input = post(*s, "/v1/embeddings", {{"input", std::vector<int>(5000, 1)}});
  EXPECT_EQ(long_input.status, 400);
  EXPECT_EQ(long_input.body["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(s->client()->Get("/v1/embeddings")->status, 405);
}

// A near-duplicate is answered from the record; usage counts the new request's own prompt.
TEST_F(SemanticCacheE2ETest, NearDuplicateIsASemanticHitWithItsOwnUsage) {
  auto s = serve("hit");
  ASSERT_GE(cosine(*s, "What is 2+3?", "What is 2+3"), kThreshold);
  expect_semantic_hit(*s, chat("What is 2+3?"), chat("What is 2+3"));
  Answer engine = post(*s, "/v1/chat/completions", chat("What is 2+3", {{"response_cache", false}}));
  Answer hit = post(*s, "/v1/chat/completions", chat("What is 2+3"));
  ASSERT_EQ(hit.cache, "semantic-hit");
  EXPECT_EQ(hit.body["usage"]["prompt_tokens"], engine.body["usage"]["prompt_tokens"]);
  EXPECT_EQ(hit.body["usage"]["prompt_tokens_details"]["cached_tokens"], engine.body["usage"]["prompt_tokens"]);
  EXPECT_EQ(hit.body["usage"]["completion_tokens"], 8);
  EXPECT_GE(metric(*s, "kvstash_response_cache_requests_total{result=\"semantic_hit\"}"), 2);
  // Streamed: the same answer as SSE, usage at the end with this request's prompt.
  auto sse = s->client()->Post(
      "/v1/chat/completions",
      s->named("/v1/chat/completions", chat("What is 2+3", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump()),
      "application/json");
  ASSERT_TRUE(sse);
  EXPECT_EQ(sse->get_header_value("x-kvstash-cache"), "semantic-hit");
  EXPECT_NE(sse->body.find("\"prompt_tokens\":" + engine.body["usage"]["prompt_tokens"].dump()), std::string::npos);
  EXPECT_NE(sse->body.find("data: [DONE]"), std::string::npos);
  // Texts far apart are not near-duplicates.
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("Tell me a story about dragons")).cache, "miss");
}

// Gate: numbers and quoted strings. "What is 2+4?" is as close to "What is 2+3?" as a near-duplicate.
TEST_F(SemanticCacheE2ETest, DifferentNumbersOrQuotedStringsAreNeverSemanticHits) {
  auto s = serve("literals");
  ASSERT_GE(cosine(*s, "What is 2+3?", "What is 2+4?"), kThreshold);
  ASSERT_GE(cosine(*s, "Translate \"hello\" to French", "Translate \"goodbye\" to French"), kThreshold);
  expect_semantic_hit(*s, chat("What is 2+3?"), chat("What is 2+3"));
  const long refused = metric(*s, "kvstash_response_cache_semantic_total{event=\"refused_literals\"}");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("What is 2+4?")).cache, "miss");
  EXPECT_GT(metric(*s, "kvstash_response_cache_semantic_total{event=\"refused_literals\"}"), refused);
  expect_semantic_hit(*s, chat("Translate \"hello\" to French"), chat("Translate \"hello\" to French!"));
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("Translate \"goodbye\" to French")).cache, "miss");
}

// Gate: the system prompt (the whole context before the last user message). The user texts are
// identical: cosine 1.
TEST_F(SemanticCacheE2ETest, DifferentSystemPromptsNeverShare) {
  auto s = serve("system");
  expect_semantic_hit(*s, chat_with_system("You are terse.", "Name the capital of France"),
                      chat_with_system("You are terse.", "Name the capital of France."));
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat_with_system("You are verbose.", "Name the capital of France")).cache,
            "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("Name the capital of France")).cache, "miss");
}

// Gate: sampling parameters and the salt; identical user texts.
TEST_F(SemanticCacheE2ETest, DifferentSamplingParametersOrSaltsNeverShare) {
  auto s = serve("params");
  expect_semantic_hit(*s, chat("What is 12 times 7?"), chat("What is 12 times 7"));
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("What is 12 times 7?", {{"max_tokens", 9}})).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("What is 12 times 7.", {{"stop", "xyz"}})).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("What is 12 times 7!", {{"top_p", 0.5}})).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("What is 12 times 7?!", {{"cache_salt", "tenant-b"}})).cache, "miss");
}

// Gate: never for requests with a seed or asking for logprobs (exact hits only for them).
TEST_F(SemanticCacheE2ETest, SeedOrLogprobsAreNeverSemanticHits) {
  auto s = serve("seed");
  ASSERT_GE(cosine(*s, "Name the capital of France", "Name the capital of France!"), kThreshold);
  expect_semantic_hit(*s, chat("Name the capital of France"), chat("Name the capital of France."));
  const long skipped = metric(*s, "kvstash_response_cache_semantic_total{event=\"not_eligible\"}");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("Name the capital of France!", {{"seed", 7}})).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("Name the capital of France!!", {{"logprobs", true}})).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("Name the capital of France?", {{"logprobs", true}, {"top_logprobs", 2}}))
                .cache,
            "miss");
  EXPECT_EQ(metric(*s, "kvstash_response_cache_semantic_total{event=\"not_eligible\"}"), skipped + 3);
}

// The index is rebuilt from the store at start; another model never gets the entries.
TEST_F(SemanticCacheE2ETest, IndexIsRebuiltAtStartAndNeverCrossesModels) {
  const std::string disk = dir_.path() + "/disk";
  std::string key;
  {
    auto a = serve("first", {"--cache-disk", disk});
    Answer first = post(*a, "/v1/chat/completions", chat("What is 2+3?"));
    ASSERT_EQ(first.cache, "miss");
    key = first.key;
    ASSERT_EQ(a->stop(), 0);  // finishes the write-behind
  }
  {
    auto b = serve("restarted", {"--cache-disk", disk});
    EXPECT_EQ(metric(*b, "kvstash_response_cache_semantic_entries"), 1) << b->log();
    Answer hit = post(*b, "/v1/chat/completions", chat("What is 2+3"));
    EXPECT_EQ(hit.cache, "semantic-hit");
    EXPECT_EQ(hit.source, key);
    ASSERT_EQ(b->stop(), 0);
  }
  // The same shapes in f32: nearly the same embeddings, another model fingerprint.
  const std::string other = kvstash::testing::test_model_path("tiny", gguf::TensorType::kF32);
  auto c = serve("other-model", {"--cache-disk", disk}, other);
  EXPECT_EQ(metric(*c, "kvstash_response_cache_semantic_entries"), 0);
  EXPECT_EQ(post(*c, "/v1/chat/completions", chat("What is 2+3")).cache, "miss");
}

// Embeddings (the endpoint's worker), semantic lookups (the cache's workers) and generations (the
// engine thread) at once: every answer is whole and the server stays up (run under TSan by CI).
TEST_F(SemanticCacheE2ETest, EmbeddingsLookupsAndGenerationsRunConcurrently) {
  auto s = serve("concurrent");
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  constexpr int kClients = 6;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      const std::string text = "Question number " + std::to_string(c) + " please";
      if (post(*s, "/v1/chat/completions", chat(text + "?")).status == 200) ++ok;
      if (embed(*s, json::array({text, "world"})).size() == 2) ++ok;
      if (post(*s, "/v1/chat/completions", chat(text)).status == 200) ++ok;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), 3 * kClients);
  EXPECT_EQ(s->client()->Get("/health")->status, 200);
}

}  // namespace
}  // namespace kvstash::server::testing
