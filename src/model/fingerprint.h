// The model fingerprint: a SHA-256 that names a model's weights and shape on every machine, the
// root of every KV cache key (ARCHITECTURE.md, "The cache key").
//
// Definition (version 1): SHA-256("kvstash-model-v1" ‖ architecture ‖ hyper-parameters as u32/f32
// LE ‖ for MoE models only, per MoE layer: "moe" ‖ experts used ‖ gating ‖ renormalise ‖ for each
// tensor in file order: name ‖ type ‖ dims ‖ SHA-256(tensor bytes)). Hashing tensors separately
// lets the work spread over cores; the result is remembered in a sidecar file under
// $XDG_CACHE_HOME/kvstash/fingerprints (or ~/.cache/...) found by the file's path, size and mtime,
// and trusted only when a probe recorded in it (a hash of the tensor table and a sample of the
// weights) matches the file: every cache key depends on the fingerprint, so it is never inherited
// by another file that shares path, size and mtime.
#pragma once

#include <optional>

#include "common/sha256.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace kvstash {

Expected<Digest> model_fingerprint(const gguf::File& file, const ModelConfig& config);

// model_fingerprint in two halves, so that a first start can hash the file beside other work
// (copying the weights reads the same pages): probe_fingerprint reads the probe (a few hundred KiB)
// and the sidecar, and gives the fingerprint when the sidecar holds it for this file;
// hash_fingerprint hashes every tensor (the whole file) and records the result in the sidecar.
struct FingerprintProbe {
  Digest probe{};
  std::optional<Digest> remembered;  // the sidecar's fingerprint, when its probe matches the file
};
FingerprintProbe probe_fingerprint(const gguf::File& file);
// The fingerprint the sidecar holds for this path, size and mtime, without the probe's check (no
// byte of the model is read): only to start work early, the prepared weights' read, that
// probe_fingerprint then confirms or drops.
std::optional<Digest> unverified_fingerprint(const std::string& model_path);
Digest hash_fingerprint(const gguf::File& file, const ModelConfig& config, const Digest& probe);

}  // namespace kvstash
