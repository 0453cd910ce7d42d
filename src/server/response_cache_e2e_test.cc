// The response cache end to end: real `kvstash serve` processes with --response-cache, a real
// redis-server shared by several of them, real sockets.
//
// What "a hit answers exactly as a miss" means here: the raw response bytes (the JSON body, or the
// whole SSE stream) of a hit equal those of the miss that stored the record, after three values
// that must differ are set to placeholders in both: the response id, `created`, and
// usage.prompt_tokens_details.cached_tokens (prompt_tokens on a hit, the engine's count on a miss;
// checked on its own). Every wait is a bounded poll.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "cache/redis_test_server.h"
#include "cache/redis_tier.h"
#include "cache/response_record.h"
#include "cache/test_util.h"
#include "identity/identity.h"
#include "modelgen/test_models.h"
#include "server/serve_process.h"

namespace kvstash::server::testing {
namespace {

using cache::testing::RedisTestServer;
using cache::testing::ScratchDir;

struct Answer {
  int status = 0;
  std::string cache;  // x-kvstash-cache
  std::string key;    // x-kvstash-cache-key
  std::string body;
};

// The body with id, created and cached_tokens replaced by placeholders (every occurrence: an SSE
// stream repeats them in each chunk).
std::string normalized(std::string body) {
  body = std::regex_replace(body, std::regex(R"("id":"(chatcmpl|cmpl)-[0-9a-f]+")"), R"("id":"ID")");
  body = std::regex_replace(body, std::regex(R"("created":[0-9]+)"), R"("created":0)");
  return std::regex_replace(body, std::regex(R"("cached_tokens":[0-9]+)"), R"("cached_tokens":0)");
}

int cached_tokens_in(const std::string& body) {
  std::smatch m;
  return std::regex_search(body, m, std::regex(R"("cached_tokens":([0-9]+))")) ? std::stoi(m[1]) : -1;
}
int prompt_tokens_in(const std::string& body) {
  std::smatch m;
  return std::regex_search(body, m, std::regex(R"("prompt_tokens":([0-9]+))")) ? std::stoi(m[1]) : -2;
}

class ResponseCacheE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new std::string(kvstash::testing::test_model_path("tiny", gguf::TensorType::kF16)); }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    ASSERT_FALSE(model_->empty());
    ASSERT_TRUE(std::filesystem::exists(std::string(KVSTASH_BINARY_DIR) + "/kvstash")) << "build the kvstash target first";
  }

  // A server with a response cache; `identity` names its key file in the scratch dir.
  std::unique_ptr<ServeProcess> serve(const std::string& name, const std::string& identity, std::vector<std::string> args = {}) {
    std::vector<std::string> all = {"--identity", dir_.path() + "/" + identity + ".key", "--response-cache", "64MiB",
                                    "--no-kv-store"};
    all.insert(all.end(), args.begin(), args.end());
    auto p = std::make_unique<ServeProcess>(*model_, all, dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p->ready()) << p->log();
    return p;
  }

  static Answer post(const ServeProcess& s, const std::string& path, const json& body, httplib::Headers headers = {}) {
    Answer a;
    auto r = s.client()->Post(path, headers, s.named(path, body.dump()), "application/json");
    if (!r) return a;
    a.status = r->status;
    a.cache = r->get_header_value("x-kvstash-cache");
    a.key = r->get_header_value("x-kvstash-cache-key");
    a.body = r->body;
    return a;
  }

  static json chat(const std::string& text, json extra = json::object()) {
    json body = {{"messages", {{{"role", "user"}, {"content", text}}}}, {"temperature", 0}, {"max_tokens", 10}};
    body.update(extra);
    return body;
  }

  static std::string public_key(const ServeProcess& s) {
    auto r = s.client()->Get("/v1/identity");
    return r && r->status == 200 ? json::parse(r->body)["public_key"].get<std::string>() : "";
  }

  // Waits (bounded) until redis holds the response record of `key`.
  static bool redis_has(int redis_port, const std::string& key) {
    for (int i = 0; i < 200; ++i) {  // 200 x 25 ms: a bounded wait for the write-behind, not a timing test
      if (cache::testing::redis_query(redis_port, "EXISTS kvstash:response:" + key) == "1") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }

  static cache::RedisTier response_tier(int redis_port) {
    cache::RedisTierOptions o;
    o.client.seeds = {{"127.0.0.1", redis_port}};
    o.key_prefix = std::string(cache::kRedisResponseKeyPrefix);
    return cache::RedisTier(o);
  }

  static std::string* model_;
  ScratchDir dir_;
};
std::string* ResponseCacheE2ETest::model_ = nullptr;

// Every response shape: the hit's bytes equal the miss's (see the file comment), the hit says so
// in its header and reports the whole prompt as cached.
TEST_F(ResponseCacheE2ETest, HitAnswersByteForByteAsTheMiss) {
  auto s = serve("shapes", "a");
  ASSERT_TRUE(s->ready());
  struct Shape {
    const char* name;
    const char* path;
    json body;
  };
  const std::vector<Shape> shapes = {
      {"chat json", "/v1/chat/completions", chat("shape one")},
      {"chat sse", "/v1/chat/completions", chat("shape two", {{"stream", true}})},
      {"chat sse usage", "/v1/chat/completions", chat("shape three", {{"stream", true}, {"stream_options", {{"include_usage", true}}}})},
      {"chat logprobs", "/v1/chat/completions", chat("shape four", {{"logprobs", true}, {"top_logprobs", 3}})},
      {"chat sse logprobs stop", "/v1/chat/completions",
       chat("shape five", {{"stream", true}, {"logprobs", true}, {"top_logprobs", 2}, {"stop", {"in"}}})},
      {"completion json", "/v1/completions", {{"prompt", "shape six"}, {"temperature", 0}, {"max_tokens", 10}, {"logprobs", 2}}},
      {"completion sse usage", "/v1/completions",
       {{"prompt", "shape seven"}, {"temperature", 0}, {"max_tokens", 10}, {"stream", true},
        {"stream_options", {{"include_usage", true}}}}},
      {"seeded sampled", "/v1/chat/completions", chat("shape eight", {{"temperature", 0.9}, {"seed", 42}})},
  };
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(shape.name);
    const Answer miss = post(*s, shape.path, shape.body);
    const Answer hit = post(*s, shape.path, shape.body);
    ASSERT_EQ(miss.status, 200) << miss.body;
    ASSERT_EQ(hit.status, 200) << hit.body;
    EXPECT_EQ(miss.cache, "miss");
    EXPECT_EQ(hit.cache, "hit");
    EXPECT_EQ(hit.key, miss.key);
    EXPECT_EQ(normalized(hit.body), normalized(miss.body));
    EXPECT_NE(hit.body, miss.body);  // ids differ: the placeholders did something
    if (hit.body.find("\"usage\"") != std::string::npos) {
      EXPECT_EQ(cached_tokens_in(hit.body), prompt_tokens_in(hit.body)) << hit.body;
    }
  }
  // The stream and the JSON answer share one record: a JSON request after a streamed miss hits.
  const Answer json_after_stream = post(*s, "/v1/chat/completions", chat("shape two"));
  EXPECT_EQ(json_after_stream.cache, "hit");
  EXPECT_EQ(s->metric("kvstash_response_cache_requests_total{result=\"hit\"}"), static_cast<double>(shapes.size() + 1));
}

// Only deterministic requests take part; the opt-outs bypass it and store nothing.
TEST_F(ResponseCacheE2ETest, SampledWithoutSeedAndOptOutsBypass) {
  auto s = serve("bypass", "a");
  ASSERT_TRUE(s->ready());
  for (int i = 0; i < 2; ++i) {
    const Answer sampled = post(*s, "/v1/chat/completions", chat("sampled", {{"temperature", 0.8}}));
    EXPECT_EQ(sampled.status, 200);
    EXPECT_EQ(sampled.cache, "bypass");
  }
  const Answer header = post(*s, "/v1/chat/completions", chat("opt out"), {{"Cache-Control", "no-cache"}});
  EXPECT_EQ(header.cache, "bypass");
  const Answer field = post(*s, "/v1/chat/completions", chat("opt out", {{"response_cache", false}}));
  EXPECT_EQ(field.cache, "bypass");
  // Neither opt-out stored its answer.
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("opt out")).cache, "miss");
  EXPECT_EQ(s->metric("kvstash_response_cache_requests_total{result=\"bypass\"}"), 4);
  EXPECT_EQ(s->metric("kvstash_response_cache_requests_total{result=\"hit\"}"), 0);
  EXPECT_EQ(s->metric("kvstash_response_cache_stores_total"), 1);
}

// Two salts never share a record; the same salt does.
TEST_F(ResponseCacheE2ETest, SaltsNeverShare) {
  auto s = serve("salts", "a");
  ASSERT_TRUE(s->ready());
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("salted", {{"cache_salt", "tenant-a"}})).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("salted", {{"cache_salt", "tenant-b"}})).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("salted")).cache, "miss");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("salted", {{"cache_salt", "tenant-a"}})).cache, "hit");
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("salted", {{"cache_salt", "tenant-b"}})).cache, "hit");
}

// A record older than --response-cache-ttl is a miss, counted as expired.
TEST_F(ResponseCacheE2ETest, RecordsExpireAfterTheirTtl) {
  auto s = serve("ttl", "a", {"--response-cache-ttl", "1"});
  ASSERT_TRUE(s->ready());
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("short lived")).cache, "miss");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the 1 s TTL (whole seconds)
  EXPECT_EQ(post(*s, "/v1/chat/completions", chat("short lived")).cache, "miss");
  EXPECT_EQ(s->metric("kvstash_response_cache_expired_records_total"), 1);
}

// Records travel through redis: a second node serves the first node's records when it trusts its
// key and refuses them (counted) when it does not.
TEST_F(ResponseCacheE2ETest, SecondServerServesTrustedRecordsOnly) {
  ASSERT_TRUE(cache::testing::redis_installed()) << "redis-server is not installed (scripts/install-deps.sh)";
  RedisTestServer redis(cache::testing::free_port());
  ASSERT_TRUE(redis.ready());
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  auto producer = serve("producer", "a", {"--cache-redis", url});
  ASSERT_TRUE(producer->ready());
  const Answer first = post(*producer, "/v1/chat/completions", chat("shared question"));
  ASSERT_EQ(first.cache, "miss");
  ASSERT_TRUE(redis_has(redis.port(), first.key));
  {
    std::ofstream trust(dir_.path() + "/trust.txt");
    trust << "# the producer\n" << public_key(*producer) << "\n";
  }
  auto trusting = serve("trusting", "b", {"--cache-redis", url, "--trust-keys", dir_.path() + "/trust.txt"});
  ASSERT_TRUE(trusting->ready());
  const Answer shared = post(*trusting, "/v1/chat/completions", chat("shared question"));
  EXPECT_EQ(shared.cache, "hit");
  EXPECT_EQ(normalized(shared.body), normalized(first.body));
  trusting->stop();

  auto stranger = serve("stranger", "c", {"--cache-redis", url});
  ASSERT_TRUE(stranger->ready());
  EXPECT_EQ(post(*stranger, "/v1/chat/completions", chat("shared question")).cache, "miss");
  EXPECT_EQ(stranger->metric("kvstash_response_cache_rejected_records_total{reason=\"untrusted\"}"), 1);
}

// A record whose payload or signature was changed, or that an untrusted key signed, is never
// served: each is a miss and counted by reason.
TEST_F(ResponseCacheE2ETest, TamperedAndUntrustedRecordsAreRejected) {
  ASSERT_TRUE(cache::testing::redis_installed()) << "redis-server is not installed (scripts/install-deps.sh)";
  RedisTestServer redis(cache::testing::free_port());
  ASSERT_TRUE(redis.ready());
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  const json question = chat("forged answer");
  std::string key_hex;
  cache::ModelFingerprint fingerprint{};
  {
    auto producer = serve("producer", "shared", {"--cache-redis", url});
    ASSERT_TRUE(producer->ready());
    const Answer a = post(*producer, "/v1/chat/completions", question);
    ASSERT_EQ(a.cache, "miss");
    key_hex = a.key;
    ASSERT_TRUE(redis_has(redis.port(), key_hex));
  }
  const cache::ChunkKey key = *cache::ChunkKey::from_hex(key_hex);
  cache::RedisTier tier = response_tier(redis.port());
  auto read_record = [&] {
    auto bytes = tier.get(key);
    EXPECT_TRUE(bytes.has_value());
    auto header = cache::parse_chunk_header(*bytes);
    EXPECT_TRUE(header.has_value());
    fingerprint = header->meta.model_fingerprint;
    auto view = cache::decode_chunk(*bytes, cache::response_envelope_meta(key, fingerprint));
    EXPECT_TRUE(view.has_value());
    return *cache::decode_response_record(view->payload);
  };
  // A forger who rewrites the envelope too (its XXH3 is no protection against malice).
  auto write_record = [&](const cache::ResponseRecord& r) {
    auto payload = cache::encode_response_record(r);
    ASSERT_TRUE(payload.has_value());
    auto bytes = cache::encode_chunk(cache::response_envelope_meta(key, fingerprint), *payload);
    ASSERT_TRUE(bytes.has_value());
    ASSERT_TRUE(tier.put(key, *bytes).is_ok());
  };
  const cache::ResponseRecord good = read_record();
  ASSERT_FALSE(good.text.empty());

  struct Case {
    const char* name;
    const char* reason;
    std::function<cache::ResponseRecord()> forge;
  };
  const std::vector<Case> cases = {
      {"payload", "bad_signature",
       [&] {
         cache::ResponseRecord r = good;
         r.text = "a different answer";
         return r;
       }},
      {"signature", "bad_signature",
       [&] {
         cache::ResponseRecord r = good;
         r.signature[7] ^= 0x01;
         return r;
       }},
      {"untrusted signer", "untrusted",
       [&] {
         cache::ResponseRecord r = good;
         r.text = "an answer from elsewhere";
         const identity::NodeIdentity other = identity::NodeIdentity::generate();
         r.producer = other.public_key();
         r.signature = other.sign(cache::kResponseSignatureDomain, cache::signed_message(r));
         return r;
       }},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    write_record(c.forge());
    auto reader = serve("reader-" + std::to_string(i), "shared", {"--cache-redis", url});  // trusts the producer's key
    ASSERT_TRUE(reader->ready());
    const Answer answer = post(*reader, "/v1/chat/completions", question);
    EXPECT_EQ(answer.cache, "miss");
    EXPECT_EQ(answer.body.find("answer from elsewhere"), std::string::npos);
    EXPECT_EQ(answer.body.find("a different answer"), std::string::npos);
    EXPECT_EQ(reader->metric(std::string("kvstash_response_cache_rejected_records_total{reason=\"") + c.reason + "\"}"), 1);
  }
  // The untouched record is served again.
  write_record(good);
  auto reader = serve("reader-good", "shared", {"--cache-redis", url});
  ASSERT_TRUE(reader->ready());
  EXPECT_EQ(post(*reader, "/v1/chat/completions", question).cache, "hit");
}

// Records go to the disk tier (DIR/responses) and survive a restart; the KV chunk tier in DIR
// does not take them for chunks.
TEST_F(ResponseCacheE2ETest, RecordsSurviveARestartOnDisk) {
  const std::string disk = dir_.path() + "/disk";
  std::string first_body;
  {
    auto s = serve("disk-1", "a", {"--cache-disk", disk});
    ASSERT_TRUE(s->ready());
    const Answer a = post(*s, "/v1/completions", {{"prompt", "kept on disk"}, {"temperature", 0}, {"max_tokens", 6}});
    ASSERT_EQ(a.cache, "miss");
    first_body = a.body;
    EXPECT_EQ(s->stop(), 0);  // SIGTERM: the write-behind queues are finished first
  }
  auto s = serve("disk-2", "a", {"--cache-disk", disk});
  ASSERT_TRUE(s->ready());
  const Answer b = post(*s, "/v1/completions", {{"prompt", "kept on disk"}, {"temperature", 0}, {"max_tokens", 6}});
  EXPECT_EQ(b.cache, "hit");
  EXPECT_EQ(normalized(b.body), normalized(first_body));
  EXPECT_EQ(s->metric("kvstash_response_cache_tier_hits_total{tier=\"disk\"}"), 1);
}

// `kvstash cache verify` checks response records: a valid one is kept, a forged one removed.
TEST_F(ResponseCacheE2ETest, CacheVerifyChecksResponseRecords) {
  ASSERT_TRUE(cache::testing::redis_installed()) << "redis-server is not installed (scripts/install-deps.sh)";
  RedisTestServer redis(cache::testing::free_port());
  ASSERT_TRUE(redis.ready());
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.port());
  std::string key_hex;
  {
    auto producer = serve("producer", "a", {"--cache-redis", url});
    ASSERT_TRUE(producer->ready());
    key_hex = post(*producer, "/v1/chat/completions", chat("verify me")).key;
    ASSERT_TRUE(redis_has(redis.port(), key_hex));
  }
  auto verify = [&] {
    const std::string cmd = std::string(KVSTASH_BINARY_DIR) + "/kvstash cache verify --cache-redis " + url + " 2>&1";
    std::string out;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    char buf[512];
    while (pipe && std::fgets(buf, sizeof buf, pipe)) out += buf;
    if (pipe) ::pclose(pipe);
    return out;
  };
  EXPECT_NE(verify().find("redis responses: ok=1 bad_removed=0"), std::string::npos);
  const cache::ChunkKey key = *cache::ChunkKey::from_hex(key_hex);
  cache::RedisTier tier = response_tier(redis.port());
  auto bytes = tier.get(key);
  ASSERT_TRUE(bytes.has_value());
  auto header = cache::parse_chunk_header(*bytes);
  ASSERT_TRUE(header.has_value());
  const cache::ChunkMeta meta = cache::response_envelope_meta(key, header->meta.model_fingerprint);
  auto view = cache::decode_chunk(*bytes, meta);
  ASSERT_TRUE(view.has_value());
  cache::ResponseRecord r = *cache::decode_response_record(view->payload);
  r.completion_tokens += 1;
  auto forged = cache::encode_chunk(meta, *cache::encode_response_record(r));
  ASSERT_TRUE(forged.has_value());
  ASSERT_TRUE(tier.put(key, *forged).is_ok());
  EXPECT_NE(verify().find("redis responses: ok=0 bad_removed=1"), std::string::npos);
  EXPECT_EQ(cache::testing::redis_query(redis.port(), "EXISTS kvstash:response:" + key_hex), "0");
}

// Issue 33: greedy output under a schema is cached like any greedy output, under a key that holds
// the schema; another schema, or a sampling knob, is another key.
TEST_F(ResponseCacheE2ETest, ConstrainedAndPenalisedRequestsAreKeyedByWhatChangesTheirOutput) {
  auto s = serve("constrained", "a");
  ASSERT_TRUE(s->ready());
  const json schema = {{"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}}},
                       {"required", {"ok", "n"}}, {"additionalProperties", false}};
  const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"strict", true}, {"schema", schema}}}};
  const json body = chat("Answer as JSON", {{"response_format", format}, {"max_tokens", 300}});
  const Answer miss = post(*s, "/v1/chat/completions", body);
  ASSERT_EQ(miss.status, 200) << miss.body;
  EXPECT_EQ(miss.cache, "miss");
  ASSERT_EQ(json::parse(miss.body)["choices"][0]["finish_reason"], "stop") << miss.body;
  const json content = json::parse(json::parse(miss.body)["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_TRUE(content["ok"].is_boolean() && content["n"].is_number_integer()) << content;
  Answer hit;
  for (int i = 0; i < 200 && hit.cache != "hit"; ++i) {  // bounded wait for the write-behind
    hit = post(*s, "/v1/chat/completions", body);
    if (hit.cache != "hit") std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(hit.cache, "hit");
  EXPECT_EQ(hit.key, miss.key);
  EXPECT_EQ(json::parse(hit.body)["choices"][0]["message"]["content"], json::parse(miss.body)["choices"][0]["message"]["content"]);
  json other_schema = format;
  other_schema["json_schema"]["schema"]["properties"]["n"]["maximum"] = 8;
  const Answer other = post(*s, "/v1/chat/completions", chat("Answer as JSON", {{"response_format", other_schema}, {"max_tokens", 300}}));
  EXPECT_EQ(other.cache, "miss");
  EXPECT_NE(other.key, miss.key);
  const Answer plain = post(*s, "/v1/chat/completions", chat("Answer as JSON", {{"max_tokens", 300}}));
  EXPECT_NE(plain.key, miss.key);
  const Answer penalised = post(*s, "/v1/chat/completions", chat("Answer as JSON", {{"max_tokens", 300}, {"presence_penalty", 1.0}}));
  EXPECT_EQ(penalised.cache, "miss");
  EXPECT_NE(penalised.key, plain.key);
}

}  // namespace
}  // namespace kvstash::server::testing
