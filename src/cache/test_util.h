// Helpers shared by the cache module's tests (header only, so it never enters the library):
// encoded test chunks and scratch directories.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "cache/chunk_codec.h"

namespace kvstash::cache::testing {

inline ModelFingerprint test_model(std::uint8_t salt = 0) {
  ModelFingerprint fp{};
  for (int i = 0; i < 32; ++i) fp[i] = static_cast<std::uint8_t>(i + salt);
  return fp;
}

inline ChunkKey test_key(int i) {
  ChunkKey k;
  for (int b = 0; b < 32; ++b) k.bytes[b] = static_cast<std::uint8_t>((i * 37 + b * 11) ^ (i >> 8));
  k.bytes[0] = static_cast<std::uint8_t>(i);  // spread over shards
  k.bytes[1] = static_cast<std::uint8_t>(i >> 8);
  return k;
}

inline ChunkMeta test_meta(const ChunkKey& key, std::uint32_t first_position = 0,
                           const ModelFingerprint& model = test_model()) {
  ChunkMeta m;
  m.key = key;
  m.model_fingerprint = model;
  m.kv_format = "f16-test-v1";
  m.token_count = 16;
  m.first_position = first_position;
  m.n_layers = 2;
  m.n_kv_heads = 2;
  m.head_dim = 8;
  m.element_type = 1;
  return m;
}

inline Bytes test_payload(std::size_t n, int seed) {
  Bytes p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 13 + seed * 7);
  return p;
}

inline Bytes test_chunk(const ChunkMeta& meta, std::size_t payload_bytes = 256, int seed = 1) {
  return *encode_chunk(meta, test_payload(payload_bytes, seed));
}

// A fresh directory under the temp dir, removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvstash-cache-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvstash::cache::testing
