#include "cache/response_record.h"

#include <bit>
#include <cstring>

#include "cache/byte_io.h"
#include "common/sha256.h"

namespace kvstash::cache {
namespace {

constexpr std::array<std::uint8_t, 4> kMagic = {'K', 'V', 'R', 'R'};
// magic 4 + version 2 + flags 2 + request key 32 + fingerprint 32 + producer 32 + signature 64 +
// created 8 (docs/response-record.md).
constexpr std::size_t kHeaderBytes = 4 + 2 + 2 + 32 + 32 + 32 + 64 + 8;
constexpr std::size_t kMaxFinishReason = 64;
constexpr std::size_t kMaxTopPerToken = 255;  // stored in a u8

// The output section: everything output_hash() covers, in its canonical order.
Status write_output(const ResponseRecord& r, Bytes& out) {
  if (r.has_logprobs && r.logprobs.size() != r.tokens.size()) {
    return invalid_argument("response record: " + std::to_string(r.logprobs.size()) + " logprobs for " +
                            std::to_string(r.tokens.size()) + " tokens");
  }
  if (r.finish_reason.size() > kMaxFinishReason) return invalid_argument("response record: finish_reason too long");
  ByteWriter w(out);
  w.le(r.prompt_tokens, 4);
  w.le(r.completion_tokens, 4);
  w.u8(r.final_finish);
  w.u8(r.final_event_has_token ? 1 : 0);
  w.u8(r.has_logprobs ? 1 : 0);
  w.u8(0);  // reserved
  w.le(r.finish_reason.size(), 2);
  w.raw(r.finish_reason.data(), r.finish_reason.size());
  w.le(r.tokens.size(), 4);
  for (std::int32_t t : r.tokens) w.le(static_cast<std::uint32_t>(t), 4);
  if (r.has_logprobs) {
    for (const RecordTokenLogprob& lp : r.logprobs) {
      if (lp.top.size() > kMaxTopPerToken) return invalid_argument("response record: too many top logprobs");
      w.f32(lp.logprob);
      w.u8(static_cast<std::uint8_t>(lp.top.size()));
      for (const auto& [id, value] : lp.top) {
        w.le(static_cast<std::uint32_t>(id), 4);
        w.f32(value);
      }
    }
  }
  w.le(r.text.size(), 4);
  w.raw(r.text.data(), r.text.size());
  if (out.size() > kMaxResponseRecordBytes) return invalid_argument("response record: larger than the record bound");
  return Status::ok();
}

Status fail(RecordError error, RecordError* why, const std::string& detail) {
  if (why) *why = error;
  const std::string message = std::string("response record: ") + record_error_name(error) + ": " + detail;
  return error == RecordError::kBadVersion ? Status(StatusCode::kUnsupported, message) : corrupt(message);
}

}  // namespace

const char* record_error_name(RecordError error) {
  switch (error) {
    case RecordError::kNone: return "none";
    case RecordError::kTooLarge: return "too_large";
    case RecordError::kTruncated: return "truncated";
    case RecordError::kTrailingBytes: return "trailing_bytes";
    case RecordError::kBadMagic: return "bad_magic";
    case RecordError::kBadVersion: return "bad_version";
    case RecordError::kBadField: return "bad_field";
  }
  return "unknown";
}

std::array<std::uint8_t, 32> output_hash(const ResponseRecord& record) {
  Bytes out;
  (void)write_output(record, out);  // an unencodable record hashes what was written; it never verifies
  return sha256(out.data(), out.size());
}

std::string signed_message(const ResponseRecord& r) {
  const auto out_hash = output_hash(r);
  std::string m;
  m.reserve(32 * 4 + 8);
  m.append(reinterpret_cast<const char*>(r.request_key.bytes.data()), 32);
  m.append(reinterpret_cast<const char*>(out_hash.data()), 32);
  m.append(reinterpret_cast<const char*>(r.model_fingerprint.data()), 32);
  m.append(reinterpret_cast<const char*>(r.producer.data()), 32);
  for (int i = 0; i < 8; ++i) m.push_back(static_cast<char>(r.created_unix >> (8 * i)));
  return m;
}

Expected<Bytes> encode_response_record(const ResponseRecord& r) {
  Bytes out;
  ByteWriter w(out);
  w.raw(kMagic.data(), kMagic.size());
  w.le(kResponseRecordVersion, 2);
  w.le(0, 2);  // flags
  w.raw(r.request_key.bytes.data(), 32);
  w.raw(r.model_fingerprint.data(), 32);
  w.raw(r.producer.data(), 32);
  w.raw(r.signature.data(), 64);
  w.le(r.created_unix, 8);
  KVSTASH_RETURN_IF_ERROR(write_output(r, out));
  return out;
}

Expected<ResponseRecord> decode_response_record(std::span<const std::uint8_t> bytes, RecordError* why) {
  if (why) *why = RecordError::kNone;
  if (bytes.size() > kMaxResponseRecordBytes) return fail(RecordError::kTooLarge, why, std::to_string(bytes.size()) + " bytes");
  if (bytes.size() < kHeaderBytes) return fail(RecordError::kTruncated, why, "shorter than its header");
  if (!std::equal(kMagic.begin(), kMagic.end(), bytes.begin())) return fail(RecordError::kBadMagic, why, "not a response record");
  ByteReader in(bytes.subspan(4));
  const auto version = static_cast<std::uint16_t>(in.le(2));
  if (version != kResponseRecordVersion) return fail(RecordError::kBadVersion, why, "version " + std::to_string(version));
  in.le(2);  // flags: none defined in version 1
  ResponseRecord r;
  in.raw(r.request_key.bytes.data(), 32);
  in.raw(r.model_fingerprint.data(), 32);
  in.raw(r.producer.data(), 32);
  in.raw(r.signature.data(), 64);
  r.created_unix = in.le(8);
  r.prompt_tokens = static_cast<std::uint32_t>(in.le(4));
  r.completion_tokens = static_cast<std::uint32_t>(in.le(4));
  r.final_finish = static_cast<std::uint8_t>(in.le(1));
  r.final_event_has_token = in.le(1) != 0;
  r.has_logprobs = in.le(1) != 0;
  in.le(1);  // reserved
  const std::size_t finish_len = in.le(2);
  if (!in.ok()) return fail(RecordError::kTruncated, why, "ends in the output header");
  if (finish_len > kMaxFinishReason) return fail(RecordError::kBadField, why, "finish_reason length");
  r.finish_reason.resize(finish_len);
  in.raw(r.finish_reason.data(), finish_len);
  const std::size_t n_tokens = in.le(4);
  if (!in.ok() || n_tokens > in.left() / 4) return fail(RecordError::kTruncated, why, "ends in the tokens");
  r.tokens.resize(n_tokens);
  for (auto& t : r.tokens) t = static_cast<std::int32_t>(static_cast<std::uint32_t>(in.le(4)));
  if (r.has_logprobs) {
    r.logprobs.resize(n_tokens);
    for (RecordTokenLogprob& lp : r.logprobs) {
      lp.logprob = in.f32();
      const std::size_t n_top = in.le(1);
      if (!in.ok() || n_top > in.left() / 8) return fail(RecordError::kTruncated, why, "ends in the logprobs");
      lp.top.resize(n_top);
      for (auto& [id, value] : lp.top) {
        id = static_cast<std::int32_t>(static_cast<std::uint32_t>(in.le(4)));
        value = in.f32();
      }
    }
  }
  const std::size_t text_len = in.le(4);
  if (!in.ok() || text_len > in.left()) return fail(RecordError::kTruncated, why, "ends in the text");
  r.text.resize(text_len);
  in.raw(r.text.data(), text_len);
  if (!in.ok()) return fail(RecordError::kTruncated, why, "ends early");
  if (!in.at_end()) return fail(RecordError::kTrailingBytes, why, std::to_string(in.left()) + " bytes after the text");
  return r;
}

ChunkMeta response_envelope_meta(const ChunkKey& key, const ModelFingerprint& fingerprint) {
  ChunkMeta meta;
  meta.key = key;
  meta.model_fingerprint = fingerprint;
  meta.kv_format = std::string(kResponseKvFormat);
  return meta;
}

}  // namespace kvstash::cache
