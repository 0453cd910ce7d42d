#include "cache/semantic_entry.h"

#include <bit>
#include <cstring>

#include "cache/byte_io.h"
#include "common/sha256.h"

namespace kvstash::cache {
namespace {

constexpr std::array<std::uint8_t, 4> kMagic = {'K', 'V', 'S', 'E'};
constexpr std::size_t kMaxLiteralBytes = 4096;

// Everything after the signature: dims, floats, literals.
Bytes body_bytes(const SemanticEntry& e) {
  Bytes out;
  ByteWriter w(out);
  w.le(e.embedding.size(), 4);
  for (float f : e.embedding) w.f32(f);
  w.le(e.literals.size(), 4);
  for (const std::string& l : e.literals) {
    w.le(l.size(), 4);
    w.raw(l.data(), l.size());
  }
  return out;
}

}  // namespace

ChunkKey semantic_entry_key(const ChunkKey& record_key) {
  Sha256 h;
  h.update(std::string_view("kvstash-semantic-entry-v1"));
  h.update(record_key.bytes.data(), record_key.bytes.size());
  ChunkKey key;
  key.bytes = h.finish();
  return key;
}

std::string signed_message(const SemanticEntry& e) {
  std::string m;
  m.append(reinterpret_cast<const char*>(e.record_key.bytes.data()), e.record_key.bytes.size());
  m.append(reinterpret_cast<const char*>(e.ns.bytes.data()), e.ns.bytes.size());
  m.append(reinterpret_cast<const char*>(e.model_fingerprint.data()), e.model_fingerprint.size());
  m.append(reinterpret_cast<const char*>(e.producer.data()), e.producer.size());
  const Bytes body = body_bytes(e);
  m.append(reinterpret_cast<const char*>(body.data()), body.size());
  return m;
}

Expected<Bytes> encode_semantic_entry(const SemanticEntry& e) {
  if (e.embedding.empty() || e.embedding.size() > kMaxSemanticDimensions) {
    return invalid_argument("semantic entry: " + std::to_string(e.embedding.size()) + " dimensions");
  }
  if (e.literals.size() > kMaxSemanticLiterals) return invalid_argument("semantic entry: too many literals");
  for (const std::string& l : e.literals) {
    if (l.size() > kMaxLiteralBytes) return invalid_argument("semantic entry: a literal is too long");
  }
  Bytes out;
  ByteWriter w(out);
  w.raw(kMagic.data(), kMagic.size());
  w.le(kSemanticEntryVersion, 2);
  w.le(0, 2);  // flags
  w.raw(e.record_key.bytes.data(), 32);
  w.raw(e.ns.bytes.data(), 32);
  w.raw(e.model_fingerprint.data(), 32);
  w.raw(e.producer.data(), 32);
  w.raw(e.signature.data(), 64);
  const Bytes body = body_bytes(e);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Expected<SemanticEntry> decode_semantic_entry(std::span<const std::uint8_t> bytes) {
  ByteReader r(bytes);
  std::array<std::uint8_t, 4> magic{};
  r.raw(magic.data(), magic.size());
  if (!r.ok() || magic != kMagic) return corrupt("semantic entry: bad magic");
  const auto version = static_cast<std::uint16_t>(r.le(2));
  if (version != kSemanticEntryVersion) {
    return unsupported("semantic entry: format version " + std::to_string(version) + " (this build reads " +
                       std::to_string(kSemanticEntryVersion) + ")");
  }
  (void)r.le(2);  // flags
  SemanticEntry e;
  r.raw(e.record_key.bytes.data(), 32);
  r.raw(e.ns.bytes.data(), 32);
  r.raw(e.model_fingerprint.data(), 32);
  r.raw(e.producer.data(), 32);
  r.raw(e.signature.data(), 64);
  const std::uint64_t dims = r.le(4);
  if (!r.ok() || dims == 0 || dims > kMaxSemanticDimensions) return corrupt("semantic entry: bad dimension count");
  e.embedding.resize(dims);
  for (float& f : e.embedding) f = r.f32();
  const std::uint64_t n = r.le(4);
  if (!r.ok() || n > kMaxSemanticLiterals) return corrupt("semantic entry: bad literal count");
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t len = r.le(4);
    if (!r.ok() || len > kMaxLiteralBytes) return corrupt("semantic entry: bad literal length");
    std::string l(len, '\0');
    r.raw(l.data(), len);
    e.literals.push_back(std::move(l));
  }
  if (!r.ok()) return corrupt("semantic entry: truncated");
  if (!r.at_end()) return corrupt("semantic entry: trailing bytes");
  return e;
}

ChunkMeta semantic_envelope_meta(const ChunkKey& record_key, const ModelFingerprint& fingerprint) {
  ChunkMeta meta;
  meta.key = semantic_entry_key(record_key);
  meta.model_fingerprint = fingerprint;
  meta.kv_format = std::string(kSemanticKvFormat);
  return meta;
}

}  // namespace kvstash::cache
