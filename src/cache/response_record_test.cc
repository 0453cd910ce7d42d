#include "cache/response_record.h"

#include <gtest/gtest.h>

namespace kvstash::cache {
namespace {

ResponseRecord sample(bool logprobs) {
  ResponseRecord r;
  r.request_key.bytes[0] = 7;
  r.model_fingerprint[1] = 9;
  r.producer[2] = 3;
  r.signature[63] = 5;
  r.created_unix = 1796000000;
  r.prompt_tokens = 41;
  r.completion_tokens = 3;
  r.finish_reason = "length";
  r.final_finish = 2;
  r.tokens = {5, 17, 200};
  r.has_logprobs = logprobs;
  if (logprobs) r.logprobs = {{-0.5f, {{5, -0.5f}, {6, -1.25f}}}, {-0.1f, {}}, {-2.0f, {{200, -2.0f}}}};
  r.text = "h\xc3\xa9llo";
  return r;
}

TEST(ResponseRecordTest, RoundTripsWithAndWithoutLogprobs) {
  for (bool lp : {false, true}) {
    const ResponseRecord r = sample(lp);
    auto bytes = encode_response_record(r);
    ASSERT_TRUE(bytes) << bytes.status().to_string();
    auto back = decode_response_record(*bytes);
    ASSERT_TRUE(back) << back.status().to_string();
    EXPECT_EQ(*back, r);
    EXPECT_EQ(output_hash(*back), output_hash(r));
  }
}

TEST(ResponseRecordTest, OutputHashAndSignedMessageCoverTheOutput) {
  const ResponseRecord r = sample(true);
  ResponseRecord text = r, token = r, logprob = r, usage = r, created = r;
  text.text += "!";
  token.tokens[1] = 18;
  logprob.logprobs[0].top[1].second = -1.5f;
  usage.prompt_tokens = 40;
  created.created_unix += 1;
  for (const ResponseRecord* other : {&text, &token, &logprob, &usage}) {
    EXPECT_NE(output_hash(*other), output_hash(r));
    EXPECT_NE(signed_message(*other), signed_message(r));
  }
  EXPECT_NE(signed_message(created), signed_message(r));
}

TEST(ResponseRecordTest, RefusesDamagedBytes) {
  auto bytes = encode_response_record(sample(true));
  ASSERT_TRUE(bytes);
  RecordError why{};
  Bytes truncated(bytes->begin(), bytes->end() - 1);
  EXPECT_FALSE(decode_response_record(truncated, &why));
  EXPECT_EQ(why, RecordError::kTruncated);
  Bytes trailing = *bytes;
  trailing.push_back(0);
  EXPECT_FALSE(decode_response_record(trailing, &why));
  EXPECT_EQ(why, RecordError::kTrailingBytes);
  Bytes magic = *bytes;
  magic[0] = 'X';
  EXPECT_FALSE(decode_response_record(magic, &why));
  EXPECT_EQ(why, RecordError::kBadMagic);
  Bytes version = *bytes;
  version[4] = 2;
  auto v = decode_response_record(version, &why);
  EXPECT_EQ(why, RecordError::kBadVersion);
  EXPECT_EQ(v.status().code(), StatusCode::kUnsupported);
  // Every prefix fails cleanly (no read past the end).
  for (std::size_t n = 0; n < bytes->size(); ++n) {
    EXPECT_FALSE(decode_response_record(std::span<const std::uint8_t>(bytes->data(), n)));
  }
}

TEST(ResponseRecordTest, RefusesLogprobsThatDoNotMatchTheTokens) {
  ResponseRecord r = sample(true);
  r.logprobs.pop_back();
  EXPECT_FALSE(encode_response_record(r));
}

TEST(ResponseRecordTest, EnvelopeSeparatesRecordsFromKvChunks) {
  const ResponseRecord r = sample(false);
  auto payload = encode_response_record(r);
  ASSERT_TRUE(payload);
  const ChunkMeta meta = response_envelope_meta(r.request_key, r.model_fingerprint);
  auto chunk = encode_chunk(meta, *payload);
  ASSERT_TRUE(chunk);
  EXPECT_TRUE(decode_chunk(*chunk, meta));
  ChunkMeta kv = meta;
  kv.kv_format = "f16-blk16-v2";
  ChunkError why{};
  EXPECT_FALSE(decode_chunk(*chunk, kv, &why));
  EXPECT_EQ(why, ChunkError::kKvFormatMismatch);
}

}  // namespace
}  // namespace kvstash::cache
