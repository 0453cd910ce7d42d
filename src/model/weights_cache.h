// The prepared-weights cache: the weight matrices as the kernels read them (copied in forward
// order, the ones the SIMD path multiplies faster interleaved by 16 rows), written to one file the
// first time a model is prepared, so that a later start reads that file sequentially into
// huge-page memory instead of converting the GGUF again (issue 37).
//
// A file is named and headed by what makes its bytes valid: the model fingerprint, the kernels'
// interleaved layout version (kernels::kInterleavedLayoutVersion) and the SIMD path. Its header
// and every 16 MiB of its payload carry an XXH3-64, checked on every load. A file that is
// truncated, stale (another model, layout version or SIMD path) or damaged is refused with a
// message that says which; the caller logs it and prepares the weights again. The byte format is
// in docs/startup.md.
//
// Thread safety: the functions are reentrant. Writers write a private temporary file and rename
// it into place, so concurrent starts of the same model never read a partial file (the last
// rename wins; both wrote the same bytes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "common/huge_pages.h"
#include "common/sha256.h"
#include "kvstash/status.h"

namespace kvstash {

// What a prepared file must have been made for.
struct WeightsCacheKey {
  Digest fingerprint{};           // the model's (model/fingerprint.h)
  std::uint32_t layout_version = 0;  // kernels::kInterleavedLayoutVersion
  std::string simd_path;          // kernels::simd_path(): "avx512", "avx2" or "scalar"
};

// One matrix of the payload: its kernel weight type (kernels::WeightType as a number), shape,
// row stride as the kernels see it, and where its bytes start in the payload.
struct PreparedMatrix {
  std::uint32_t type = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::uint64_t row_bytes = 0;
  std::uint64_t offset = 0;
  bool operator==(const PreparedMatrix&) const = default;
};

struct PreparedWeights {
  HugePageBuffer memory;                // the payload, in huge-page memory where the kernel gives it
  std::uint64_t payload_bytes = 0;      // of memory.size() (rounded up to 2 MiB), the bytes read
  // The payload is the file's own mapping (the page cache's pages, mapped with huge pages), not a
  // copy. When false after a mapping that the kernel gave small pages, mapped_huge_bytes says how
  // much it did map huge (the weights were then copied into huge-page memory).
  bool mapped = false;
  long long mapped_huge_bytes = -1;
  std::vector<PreparedMatrix> matrices;
};

// The default directory: $XDG_CACHE_HOME/kvstash/weights, else ~/.cache/kvstash/weights; empty if
// neither variable is set.
std::filesystem::path default_weights_cache_dir();

// The file of a key under dir: <fingerprint hex>-l<layout>-<simd>.kvw.
std::filesystem::path weights_cache_file(const std::filesystem::path& dir, const WeightsCacheKey& key);

// Maps the key's file under dir (MAP_SHARED, read-only, 2 MiB aligned, MADV_HUGEPAGE) and brings
// its payload in with `readers` threads, each checking the checksums of the chunks it read. Where
// the kernel maps it with huge pages (a file system with large folios, ext4 and XFS on recent
// kernels, and pages the page cache read rather than had written) the payload stays the mapping:
// no copy, no fresh memory to clear, and a warm start costs the checksums alone. Otherwise it is
// copied into huge-page memory (or read there when the file cannot be mapped). The file must not
// be changed in place while mapped (writers write a new file and rename it: store below). Errors: kNotFound when there is no
// file; kCorrupt for a file that cannot be used, with a message naming the file and saying
// "truncated", "stale (...)" or "damaged (...)"; kIoError when it cannot be read or the memory
// not mapped.
Expected<PreparedWeights> load_prepared_weights(const std::filesystem::path& dir, const WeightsCacheKey& key,
                                                int readers = 8);

// Writes payload and its matrix table as the key's file under dir (created if missing), through
// a temporary file renamed into place. Errors: kIoError naming the path.
Status store_prepared_weights(const std::filesystem::path& dir, const WeightsCacheKey& key,
                              std::span<const PreparedMatrix> matrices, std::span<const std::uint8_t> payload);

}  // namespace kvstash
