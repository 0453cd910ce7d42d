// The model's side of the prepared-weights cache (model/weights_cache.h): at load, read the
// weights as the kernels want them from the cache file instead of copying and interleaving them
// again, or prepare them and write the file for the next start.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "model/model.h"

namespace kvstash {
namespace {

WeightsCacheKey cache_key(const Digest& fingerprint) {
  return {fingerprint, kernels::kInterleavedLayoutVersion, kernels::simd_path()};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void Model::start_prepared_read(const std::string& dir) {
  weights_cache_dir_ = dir;
  // Readers wait on the disk, not on the cores: eight keep enough reads in flight (on the 2-vCPU
  // VM of BENCHMARKS.md's cold start, 1 GB read in 0.56-0.71 s to the first token with 8 against
  // 0.84-1.34 s with 2, page cache dropped).
  const int readers = 8;
  prepared_read_ = std::async(std::launch::async, [dir, key = cache_key(fingerprint_), readers] {
    return load_prepared_weights(dir, key, readers);
  });
}

void Model::prepare_weights(const ModelLoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  weights_cache_dir_ = options.weights_cache_dir;
  // Prepares the weights here, or (prepare_in_background) those that must be in place before the
  // first pass, leaving the rest to a background copy.
  auto prepare = [&] {
    std::vector<PendingCopy> pending = copy_weights_to_huge_pages(options.prepare_in_background);
    if (!pending.empty()) start_background_copy(std::move(pending), options.before_weights_swap);
  };
  if (fingerprint_hash_.valid()) {  // a first start: copy while bind()'s hash runs, then take it
    prepare();
    report_.prepare_seconds = seconds_since(start);
    const auto wait_start = std::chrono::steady_clock::now();
    fingerprint_ = fingerprint_hash_.get();
    report_.fingerprint_seconds += seconds_since(wait_start);
    report_.fingerprint_beside_copy = true;
    if (weights_cache_dir_.empty()) return;
    const std::string path = weights_cache_file(weights_cache_dir_, cache_key(fingerprint_)).string();
    if (weights_.data() == nullptr) {
      report_.weights_cache = path + ": not prepared (no memory for the copy); the weights stay on the file mapping";
      return;
    }
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {  // the same model prepared under another path: left as it is
      report_.weights_cache = "first start of this file, prepared beside its fingerprint (" + path + " is there already)";
      return;
    }
    write_prepared(path + ": not there yet (first start of this file, prepared beside its fingerprint); ", options);
    return;
  }
  if (weights_cache_dir_.empty()) {
    prepare();
    report_.prepare_seconds = seconds_since(start);
    return;
  }
  if (!prepared_read_.valid()) start_prepared_read(weights_cache_dir_);
  const std::string path = weights_cache_file(weights_cache_dir_, cache_key(fingerprint_)).string();
  Expected<PreparedWeights> prepared = prepared_read_.get();
  std::string why;
  const bool mapped = prepared && prepared->mapped;
  const long long huge_mapped = prepared ? prepared->mapped_huge_bytes : -1;
  if (prepared && bind_prepared(std::move(*prepared), &why)) {
    report_.prepare_seconds = seconds_since(start);
    report_.weights_cache = "read " + path + (mapped ? " (mapped)" : "");
    if (!mapped && huge_mapped >= 0) {
      report_.weights_cache += " (copied: the kernel mapped " + std::to_string(huge_mapped >> 20) +
                               " MiB of it with huge pages; its file system may lack large folios)";
    }
    return;
  }
  if (!prepared) {
    why = prepared.status().code() == StatusCode::kNotFound ? path + ": not there yet" : prepared.status().message();
  }
  prepare();
  if (weights_.data() == nullptr) {  // no memory for the copy: nothing to write either
    report_.prepare_seconds = seconds_since(start);
    report_.weights_cache = why + "; the weights stay on the file mapping";
    return;
  }
  write_prepared(why + "; prepared again, ", options);
  report_.prepare_seconds = seconds_since(start);
}

void Model::write_prepared(const std::string& line, const ModelLoadOptions& options) {
  report_.weights_cache = line + (options.defer_weights_cache_write ? "writing it" : "written");
  if (options.defer_weights_cache_write) {
    report_.cache_write_due = true;
  } else if (Status st = save_prepared_weights(); !st) {
    report_.weights_cache = line + "cannot write it: " + st.message();
  }
}

bool Model::bind_prepared(PreparedWeights prepared, std::string* why) {
  const std::string path = weights_cache_file(weights_cache_dir_, cache_key(fingerprint_)).string();
  std::vector<kernels::WeightView*> matrices = weight_matrices();
  if (prepared.matrices.size() != matrices.size()) {
    *why = path + ": stale (" + std::to_string(prepared.matrices.size()) + " matrices, the model has " +
           std::to_string(matrices.size()) + ")";
    return false;
  }
  // Check every entry before binding any: a mismatch leaves the views on the file mapping.
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    const kernels::WeightView& w = *matrices[i];
    const PreparedMatrix& p = prepared.matrices[i];
    const std::size_t repacked = kernels::repack_bytes(w);
    const std::size_t bytes = repacked > 0 ? repacked : w.row_bytes * static_cast<std::size_t>(w.rows);
    const auto type = static_cast<kernels::WeightType>(p.type);
    const bool type_ok = p.type < std::size(kernels::kAllWeightTypes) + std::size(kernels::kAllInterleavedTypes) &&
                         (repacked > 0 ? kernels::is_interleaved(type) && kernels::interleaved_source(type) == w.type
                                       : type == w.type);
    if (!type_ok || p.rows != w.rows || p.cols != w.cols || p.row_bytes != w.row_bytes ||
        p.offset + bytes > prepared.payload_bytes) {
      *why = path + ": stale (matrix " + std::to_string(i) + " does not match the model's layout)";
      return false;
    }
  }
  repacked_matrices_ = 0;
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    kernels::WeightView& w = *matrices[i];
    w.type = static_cast<kernels::WeightType>(prepared.matrices[i].type);
    w.data = prepared.memory.data() + prepared.matrices[i].offset;
    if (kernels::is_interleaved(w.type)) ++repacked_matrices_;
  }
  if (config_.tied_output) token_embd_ = output_;
  prepared_table_ = std::move(prepared.matrices);
  prepared_bytes_ = prepared.payload_bytes;
  weights_ = std::move(prepared.memory);
  return true;
}

Status Model::save_prepared_weights() const {
  if (weights_cache_dir_.empty()) return invalid_argument("no prepared-weights cache directory");
  wait_weights_prepared();
  if (weights_.data() == nullptr || prepared_table_.empty()) {
    return invalid_argument("the weights are used from the file mapping: nothing prepared to save");
  }
  return store_prepared_weights(weights_cache_dir_, cache_key(fingerprint_), prepared_table_,
                                {weights_.data(), prepared_bytes_});
}

}  // namespace kvstash
