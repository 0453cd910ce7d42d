// The prepared-weights file (weights_cache.h): round trip, each way a file can be unusable
// (missing, truncated, stale, damaged), concurrent writers; and through Model::load, that the
// weights read back give the same greedy tokens as a fresh preparation, and that a bad file is
// named and rebuilt.
#include "model/weights_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <numeric>
#include <thread>

#include "kernels/kernels.h"
#include "model/model.h"
#include "model/swap_gate_for_test.h"
#include "modelgen/test_models.h"

namespace kvstash {
namespace {

namespace fs = std::filesystem;

fs::path test_root() {
  return fs::temp_directory_path() / ("kvstash-weights-cache-test-" + std::to_string(::getpid()));
}

// Removes this process's directories (up to 160 MiB of files) when the tests end.
struct RemoveTestRoot : ::testing::Environment {
  void TearDown() override { fs::remove_all(test_root()); }
};
const auto* const kRemoveTestRoot = ::testing::AddGlobalTestEnvironment(new RemoveTestRoot);

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = test_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

WeightsCacheKey key_of(std::uint8_t model, std::uint32_t layout = 1, std::string simd = "avx512") {
  WeightsCacheKey k;
  k.fingerprint.fill(model);
  k.layout_version = layout;
  k.simd_path = std::move(simd);
  return k;
}

// 40 MiB: three checksum chunks (16 MiB each), the last one short.
std::vector<std::uint8_t> payload() {
  std::vector<std::uint8_t> p(std::size_t{40} << 20);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>(i * 2654435761u >> 13);
  return p;
}

const std::vector<PreparedMatrix> kTable = {{1, 32, 64, 128, 0}, {14, 16, 256, 272, 8192}};

void flip_byte(const fs::path& p, std::uint64_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

std::string load_error(const fs::path& dir, const WeightsCacheKey& key) {
  auto r = load_prepared_weights(dir, key);
  EXPECT_FALSE(r.has_value());
  if (r) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().to_string();
  return r.status().message();
}

TEST(WeightsCache, RoundTripsPayloadAndTable) {
  const fs::path dir = fresh_dir("round-trip");
  const auto bytes = payload();
  ASSERT_TRUE(store_prepared_weights(dir, key_of(7), kTable, bytes).is_ok());
  for (int readers : {1, 3}) {
    auto r = load_prepared_weights(dir, key_of(7), readers);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    EXPECT_EQ(r->matrices, kTable);
    ASSERT_EQ(r->payload_bytes, bytes.size());
    ASSERT_GE(r->memory.size(), bytes.size());
    EXPECT_EQ(0, std::memcmp(r->memory.data(), bytes.data(), bytes.size()));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r->memory.data()) % 4096, 0u);  // the payload's offset in the file
    // Written, then read back from the disk (the writer drops its pages): the page cache holds it
    // in 2 MiB folios, and the payload is the file's mapping, mapped with huge pages. (This needs
    // a file system with large folios, ext4 or XFS on Linux 6.x: the project's machines.)
    EXPECT_TRUE(r->mapped);
    EXPECT_TRUE(r->memory.file_backed());
    EXPECT_GE(r->memory.huge_bytes(), static_cast<long long>(bytes.size() / kHugePageBytes * kHugePageBytes) - 2 * static_cast<long long>(kHugePageBytes));
  }
  // Nothing but the file is left behind (the temporary was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

// Drops the file's pages from the page cache (written and flushed: clean, so they can go).
void evict_from_page_cache(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

// A cold file (a start after the page cache was dropped) reads back the same, and damage is found
// in it as in a warm one.
TEST(WeightsCache, ColdFileReadsBackTheSame) {
  const fs::path dir = fresh_dir("cold");
  const auto bytes = payload();
  ASSERT_TRUE(store_prepared_weights(dir, key_of(7), kTable, bytes).is_ok());
  const fs::path file = weights_cache_file(dir, key_of(7));
  evict_from_page_cache(file);
  auto r = load_prepared_weights(dir, key_of(7), 8);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  ASSERT_EQ(r->payload_bytes, bytes.size());
  EXPECT_EQ(0, std::memcmp(r->memory.data(), bytes.data(), bytes.size()));
  EXPECT_EQ(r->matrices, kTable);

  flip_byte(file, fs::file_size(file) - (std::uint64_t{20} << 20));  // in the second chunk
  evict_from_page_cache(file);
  EXPECT_NE(load_error(dir, key_of(7)).find("damaged (checksum mismatch in payload bytes 16777216.."), std::string::npos);
}

// A file whose pages came into the page cache by writes (small folios) is mapped with 4 KiB
// pages: its weights are copied into huge-page memory instead, with the same bytes.
TEST(WeightsCache, PagesTheKernelCannotMapHugeAreCopied) {
  const fs::path dir = fresh_dir("small-pages");
  const auto bytes = payload();
  ASSERT_TRUE(store_prepared_weights(dir, key_of(7), kTable, bytes).is_ok());
  const fs::path file = weights_cache_file(dir, key_of(7));
  // Rewritten 4 KiB at a time: its pages come into the page cache by small writes (small folios).
  const fs::path rewritten = dir / "rewritten";
  {
    std::ifstream in(file, std::ios::binary);
    std::ofstream out(rewritten, std::ios::binary);
    out.rdbuf()->pubsetbuf(nullptr, 0);  // unbuffered: each write() is one 4 KiB page
    std::vector<char> page(4096);
    while (in.read(page.data(), static_cast<std::streamsize>(page.size())) || in.gcount() > 0) {
      out.write(page.data(), in.gcount());
    }
  }
  fs::rename(rewritten, file);
  auto r = load_prepared_weights(dir, key_of(7), 3);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_FALSE(r->mapped);
  EXPECT_GE(r->mapped_huge_bytes, 0);
  EXPECT_LT(r->mapped_huge_bytes, static_cast<long long>(bytes.size()) / 2);
  EXPECT_FALSE(r->memory.file_backed());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r->memory.data()) % kHugePageBytes, 0u);
  ASSERT_EQ(r->payload_bytes, bytes.size());
  EXPECT_EQ(0, std::memcmp(r->memory.data(), bytes.data(), bytes.size()));
}

TEST(WeightsCache, MissingFileIsNotFound) {
  const fs::path dir = fresh_dir("missing");
  auto r = load_prepared_weights(dir, key_of(7));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(WeightsCache, TruncatedFileIsRefused) {
  const fs::path dir = fresh_dir("truncated");
  const auto bytes = payload();
  const fs::path file = weights_cache_file(dir, key_of(7));
  for (std::uintmax_t keep : {std::uintmax_t{0}, std::uintmax_t{50}, std::uintmax_t{200}, std::uintmax_t{5000},
                              (std::uintmax_t{40} << 20) - 1}) {
    ASSERT_TRUE(store_prepared_weights(dir, key_of(7), kTable, bytes).is_ok());
    const std::uintmax_t whole = fs::file_size(file);
    fs::resize_file(file, keep < whole ? keep : whole - 1);
    EXPECT_NE(load_error(dir, key_of(7)).find("truncated"), std::string::npos) << "kept " << keep;
  }
}

TEST(WeightsCache, StaleFileIsRefused) {
  const fs::path dir = fresh_dir("stale");
  const auto bytes = payload();
  // Each file is written for one key and then found under another key's name (as after a copy,
  // or a bug in naming): the header, not the name, decides.
  const WeightsCacheKey wanted = key_of(7);
  for (const WeightsCacheKey& other : {key_of(8), key_of(7, 2), key_of(7, 1, "avx2")}) {
    ASSERT_TRUE(store_prepared_weights(dir, other, kTable, bytes).is_ok());
    fs::rename(weights_cache_file(dir, other), weights_cache_file(dir, wanted));
    const std::string why = load_error(dir, wanted);
    EXPECT_NE(why.find("stale"), std::string::npos) << why;
  }
  EXPECT_NE(load_error(dir, wanted).find("avx2"), std::string::npos);
}

TEST(WeightsCache, DamagedFileIsRefused) {
  const fs::path dir = fresh_dir("damaged");
  const auto bytes = payload();
  const fs::path file = weights_cache_file(dir, key_of(7));
  // One flipped bit in each payload chunk, in the matrix table, and in the magic.
  const std::uint64_t payload_at = 4096;  // the header of two matrices fits in the first page
  for (std::uint64_t at : {payload_at, payload_at + (std::uint64_t{20} << 20), payload_at + bytes.size() - 1,
                           std::uint64_t{100}, std::uint64_t{0}}) {
    ASSERT_TRUE(store_prepared_weights(dir, key_of(7), kTable, bytes).is_ok());
    flip_byte(file, at);
    const std::string why = load_error(dir, key_of(7));
    EXPECT_NE(why.find("damaged"), std::string::npos) << "byte " << at << ": " << why;
  }
}

TEST(WeightsCache, ConcurrentWritersLeaveOneWholeFile) {
  const fs::path dir = fresh_dir("concurrent");
  const auto bytes = payload();
  std::vector<std::thread> writers;
  for (int i = 0; i < 4; ++i) {
    writers.emplace_back([&] { EXPECT_TRUE(store_prepared_weights(dir, key_of(7), kTable, bytes).is_ok()); });
  }
  for (auto& t : writers) t.join();
  auto r = load_prepared_weights(dir, key_of(7));
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(0, std::memcmp(r->memory.data(), bytes.data(), bytes.size()));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

// --- Through Model::load ---

std::unique_ptr<Model> load_model(const std::string& path, const fs::path& cache_dir) {
  ModelLoadOptions o;
  o.weights_cache_dir = cache_dir.string();
  auto m = Model::load(path, o);
  EXPECT_TRUE(m.has_value()) << m.status().to_string();
  return m ? std::move(*m) : nullptr;
}

// Greedy decoding of n tokens after a short prompt, one token per forward pass; returns the
// tokens and every step's logits. after_step(step) runs after each pass.
std::pair<std::vector<TokenId>, std::vector<float>> greedy(const Model& model, int n,
                                                          const std::function<void(int)>& after_step = {}) {
  const ModelConfig& c = model.config();
  KvPoolView kv;
  kv.set_shape(c);
  kv.n_blocks = 4;
  std::vector<std::uint16_t> storage(kv.block_elems() * 4);
  kv.base = storage.data();
  const std::vector<std::int32_t> table = {0, 1, 2, 3};
  ThreadPool threads(2);
  std::vector<TokenId> tokens = {1, 17, 5, 42};
  std::vector<float> all_logits, logits(static_cast<std::size_t>(c.n_vocab));
  int pos = 0;
  std::vector<TokenId> feed = tokens;
  for (int step = 0; step < n; ++step) {
    ForwardBatch b;
    b.tokens = feed;
    b.sequences.push_back({table.data(), 4, pos, static_cast<int>(feed.size())});
    EXPECT_TRUE(model.forward(b, kv, logits.data(), threads).is_ok());
    pos += static_cast<int>(feed.size());
    all_logits.insert(all_logits.end(), logits.begin(), logits.end());
    const auto next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    tokens.push_back(next);
    feed = {next};
    if (after_step) after_step(step);
  }
  return {tokens, all_logits};
}

std::string test_model(const std::string& kind) {
  return kind == "f16" ? testing::test_model_path("tiny", gguf::TensorType::kF16)
                       : testing::test_model_path_scheme("tiny-k", "q4_k_m");
}

TEST(WeightsCacheModel, CachedWeightsGiveTheSameGreedyOutput) {
  for (const std::string kind : {"f16", "q4_k_m"}) {
    const fs::path dir = fresh_dir("model-" + kind);
    ModelLoadOptions fresh_options;  // no cache: today's preparation
    auto fresh = Model::load(test_model(kind), fresh_options);
    ASSERT_TRUE(fresh.has_value()) << fresh.status().to_string();
    auto writer = load_model(test_model(kind), dir);
    ASSERT_TRUE(writer);
    EXPECT_NE(writer->load_report().weights_cache.find("not there yet; prepared again, written"), std::string::npos)
        << writer->load_report().weights_cache;
    auto reader = load_model(test_model(kind), dir);
    ASSERT_TRUE(reader);
    EXPECT_EQ(reader->load_report().weights_cache.rfind("read ", 0), 0u) << reader->load_report().weights_cache;
    EXPECT_EQ(reader->weight_memory_summary(), (*fresh)->weight_memory_summary());
    if (std::string(kernels::simd_path()) == "avx512") {  // every matrix interleaved there
      EXPECT_NE(reader->weight_memory_summary().find("interleaved"), std::string::npos);
    }
    const auto expected = greedy(**fresh, 12);
    const auto got = greedy(*reader, 12);
    EXPECT_EQ(got.first, expected.first) << kind;
    EXPECT_EQ(0, std::memcmp(got.second.data(), expected.second.data(), expected.second.size() * sizeof(float))) << kind;
  }
}

// A first start of a file (no fingerprint remembered for it): the file is hashed beside the copy of
// the weights. The fingerprint is the one a plain hash gives, the prepared file is written, and a
// copy of the model under another path finds it there and leaves it alone.
TEST(WeightsCacheModel, FirstStartHashesBesideTheCopy) {
  const fs::path dir = fresh_dir("model-first");
  const fs::path copy = dir / "first.gguf";
  fs::copy_file(test_model("q4_k_m"), copy);
  auto first = load_model(copy.string(), dir / "cache");
  ASSERT_TRUE(first);
  const ModelLoadReport& r = first->load_report();
  EXPECT_TRUE(r.fingerprint_beside_copy);
  EXPECT_GT(r.hashed_seconds, 0);
  EXPECT_NE(r.weights_cache.find("not there yet (first start of this file, prepared beside its fingerprint); written"),
            std::string::npos) << r.weights_cache;
  ModelLoadOptions mapping;  // hashes in bind(), nothing beside it
  mapping.weights = WeightMemory::kFileMapping;
  auto reference = Model::load(test_model("q4_k_m"), mapping);
  ASSERT_TRUE(reference.has_value());
  EXPECT_EQ(first->fingerprint(), (*reference)->fingerprint());
  EXPECT_EQ(greedy(*first, 6).first, greedy(**reference, 6).first);

  auto again = load_model(copy.string(), dir / "cache");  // remembered now: the file is read
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->load_report().fingerprint_beside_copy);
  EXPECT_EQ(again->load_report().weights_cache.rfind("read ", 0), 0u) << again->load_report().weights_cache;

  const fs::path other = dir / "other.gguf";
  fs::copy_file(copy, other);
  auto second_copy = load_model(other.string(), dir / "cache");
  ASSERT_TRUE(second_copy);
  EXPECT_TRUE(second_copy->load_report().fingerprint_beside_copy);
  EXPECT_NE(second_copy->load_report().weights_cache.find("is there already"), std::string::npos)
      << second_copy->load_report().weights_cache;
  EXPECT_EQ(greedy(*second_copy, 6).first, greedy(**reference, 6).first);
}

// The prepared file's read starts before the GGUF's probe, on the fingerprint the sidecar names for
// the path, size and mtime. A file replaced in place with all three kept is caught by the probe:
// that read is dropped and the new file's own weights are used.
TEST(WeightsCacheModel, AReplacedFileIsNotGivenTheOldPreparedWeights) {
  const fs::path dir = fresh_dir("model-replaced");
  const fs::path path = dir / "model.gguf";
  fs::copy_file(test_model("f16"), path);
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  auto original = load_model(path.string(), dir / "cache");
  ASSERT_TRUE(original);
  auto again = load_model(path.string(), dir / "cache");
  ASSERT_TRUE(again);
  ASSERT_EQ(again->load_report().weights_cache.rfind("read ", 0), 0u) << again->load_report().weights_cache;

  // A weight of the first tensor changed (the probe reads each tensor's first bytes), then the
  // size and mtime of the original.
  {
    auto file = gguf::File::open(path.string());
    ASSERT_TRUE(file.has_value());
    // The data section runs to the end of the file.
    const std::uint64_t at = fs::file_size(path) - (*file)->data_size() +
                             static_cast<std::uint64_t>((*file)->tensors()[0].data - (*file)->data_begin());
    file->reset();
    flip_byte(path, at + 2);
  }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  auto replaced = load_model(path.string(), dir / "cache");
  ASSERT_TRUE(replaced);
  EXPECT_NE(replaced->fingerprint(), original->fingerprint());
  EXPECT_TRUE(replaced->load_report().fingerprint_beside_copy);
  auto reference = Model::load(path.string(), ModelLoadOptions{});  // prepared again, no cache
  ASSERT_TRUE(reference.has_value());
  EXPECT_EQ(replaced->fingerprint(), (*reference)->fingerprint());
  const auto got = greedy(*replaced, 4), expected = greedy(**reference, 4);
  EXPECT_EQ(got.first, expected.first);
  EXPECT_EQ(0, std::memcmp(got.second.data(), expected.second.data(), expected.second.size() * sizeof(float)));
}

TEST(WeightsCacheModel, BadFileIsNamedAndRebuilt) {
  const fs::path dir = fresh_dir("model-rebuild");
  auto first = load_model(test_model("f16"), dir);
  ASSERT_TRUE(first);
  const auto expected = greedy(*first, 6);
  const fs::path file = weights_cache_file(dir, {first->fingerprint(), kernels::kInterleavedLayoutVersion,
                                                 kernels::simd_path()});
  ASSERT_TRUE(fs::exists(file));
  // Damaged, truncated, then another model's file under this model's name.
  auto other = load_model(test_model("q4_k_m"), dir);
  ASSERT_TRUE(other);
  const fs::path other_file = weights_cache_file(dir, {other->fingerprint(), kernels::kInterleavedLayoutVersion,
                                                       kernels::simd_path()});
  struct Case {
    std::function<void()> spoil;
    const char* said;
  };
  const std::vector<Case> cases = {
      {[&] { flip_byte(file, fs::file_size(file) - 3); }, "damaged"},
      {[&] { fs::resize_file(file, fs::file_size(file) / 2); }, "truncated"},
      {[&] { fs::copy_file(other_file, file, fs::copy_options::overwrite_existing); }, "stale"},
  };
  for (const Case& c : cases) {
    c.spoil();
    auto rebuilt = load_model(test_model("f16"), dir);
    ASSERT_TRUE(rebuilt);
    const std::string& line = rebuilt->load_report().weights_cache;
    EXPECT_NE(line.find(c.said), std::string::npos) << line;
    EXPECT_NE(line.find("prepared again, written"), std::string::npos) << line;
    EXPECT_EQ(greedy(*rebuilt, 6).first, expected.first);
    auto again = load_model(test_model("f16"), dir);  // the rewritten file is good
    ASSERT_TRUE(again);
    EXPECT_EQ(again->load_report().weights_cache.rfind("read ", 0), 0u) << again->load_report().weights_cache;
    EXPECT_EQ(greedy(*again, 6).first, expected.first);
  }
}

// Serving while preparing (ModelLoadOptions::prepare_in_background, what the server asks for):
// load() returns with the matrices that keep their file layout still on the file mapping, copies
// them on a thread of its own, and swaps them in between two passes. The swap is held until a
// decode has run four passes, then let go while it runs: every pass, before, during and after it,
// gives the logits of a model prepared before load() returned, bit for bit (and, where this SIMD
// path interleaves none of its matrices, those of the file mapping too). A first start (the
// fingerprint hashed beside), its prepared file written after the swap and read back. F32 keeps
// its layout on every path; F16 and Q4_K_M's Q6_K matrices on AVX2 (model_weights_cache_test_avx2); on AVX-512
// those are interleaved before load() returns and nothing is left to the background.
TEST(WeightsCacheModel, BackgroundCopyIsSwappedInBetweenPassesWithTheSameBits) {
  for (const std::string kind : {"f32", "f16", "q4_k_m"}) {
    SCOPED_TRACE(kind);
    const fs::path dir = fresh_dir("model-background-" + kind);
    const fs::path path = dir / "model.gguf";  // a path never seen: a first start
    fs::copy_file(kind == "f32" ? testing::test_model_path("tiny", gguf::TensorType::kF32) : test_model(kind), path);
    auto gate = std::make_shared<testing::SwapGate>();
    std::atomic<bool> hook_ran{false};
    ModelLoadOptions o;
    o.prepare_in_background = true;
    o.weights_cache_dir = (dir / "cache").string();
    o.defer_weights_cache_write = true;
    o.before_weights_swap = [gate, &hook_ran] {
      hook_ran = true;
      gate->wait();
    };
    auto loaded = Model::load(path.string(), o);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
    const std::unique_ptr<Model> m = std::move(*loaded);
    testing::SwapGate::LetGoOnExit let_go_on_exit{gate};
    // The references, loaded after it (the fingerprint is remembered from here on).
    auto prepared = Model::load(path.string(), ModelLoadOptions{});
    ASSERT_TRUE(prepared.has_value()) << prepared.status().to_string();
    ModelLoadOptions mapping;
    mapping.weights = WeightMemory::kFileMapping;
    auto mapped = Model::load(path.string(), mapping);
    ASSERT_TRUE(mapped.has_value()) << mapped.status().to_string();
    const auto expected = greedy(**prepared, 12);
    const ModelLoadReport& r = m->load_report();
    EXPECT_TRUE(r.fingerprint_beside_copy);
    EXPECT_EQ(m->fingerprint(), (*prepared)->fingerprint());
    EXPECT_TRUE(r.cache_write_due);
    const bool interleaves_none = (*prepared)->weight_memory_summary().find("interleaved") == std::string::npos;
    if (kind == "f32" || (kind == "f16" && interleaves_none)) EXPECT_GT(r.background_bytes, 0u);
    if (r.background_bytes > 0) {
      EXPECT_FALSE(m->weights_prepared());
      EXPECT_NE(m->weight_memory_summary().find("read from the file mapping while a background thread copies"),
                std::string::npos) << m->weight_memory_summary();
    } else {
      EXPECT_TRUE(m->weights_prepared());
    }
    const auto got = greedy(*m, 12, [&](int step) {
      if (step == 3) {
        EXPECT_EQ(m->weights_prepared(), r.background_bytes == 0) << "swapped before it was let go";
        gate->let_go();  // the swap now races the next passes
      }
      if (step == 7) m->wait_weights_prepared();  // the last four passes run after it
    });
    EXPECT_TRUE(m->weights_prepared());
    EXPECT_EQ(hook_ran.load(), r.background_bytes > 0);
    EXPECT_EQ(m->weight_memory_summary(), (*prepared)->weight_memory_summary());
    EXPECT_EQ(got.first, expected.first);
    ASSERT_EQ(got.second.size(), expected.second.size());
    EXPECT_EQ(0, std::memcmp(got.second.data(), expected.second.data(), expected.second.size() * sizeof(float)))
        << "the logits of some pass differ from the prepared model's";
    if (interleaves_none) {
      const auto from_mapping = greedy(**mapped, 12);
      EXPECT_EQ(0, std::memcmp(from_mapping.second.data(), expected.second.data(), expected.second.size() * sizeof(float)))
          << "the file mapping's logits differ from the copy's";
    }
    // The deferred write waits for the copy; a later start reads that file and decodes the same.
    ASSERT_TRUE(m->save_prepared_weights().is_ok());
    auto reader = load_model(path.string(), dir / "cache");
    ASSERT_TRUE(reader);
    EXPECT_EQ(reader->load_report().weights_cache.rfind("read ", 0), 0u) << reader->load_report().weights_cache;
    EXPECT_EQ(reader->load_report().background_bytes, 0u);
    EXPECT_EQ(greedy(*reader, 12).second, expected.second);
  }
}

TEST(WeightsCacheModel, DeferredWriteIsLeftToTheCaller) {
  const fs::path dir = fresh_dir("model-deferred");
  ModelLoadOptions o;
  o.weights_cache_dir = dir.string();
  o.defer_weights_cache_write = true;
  auto m = Model::load(test_model("f16"), o);
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE((*m)->load_report().cache_write_due);
  EXPECT_TRUE(fs::is_empty(dir));
  ASSERT_TRUE((*m)->save_prepared_weights().is_ok());
  auto reader = load_model(test_model("f16"), dir);
  ASSERT_TRUE(reader);
  EXPECT_EQ(reader->load_report().weights_cache.rfind("read ", 0), 0u);
  EXPECT_FALSE(reader->load_report().cache_write_due);
}

TEST(WeightsCacheModel, FileMappingNeverTouchesTheCache) {
  const fs::path dir = fresh_dir("model-mapping");
  ModelLoadOptions o;
  o.weights = WeightMemory::kFileMapping;
  o.weights_cache_dir = dir.string();
  auto m = Model::load(test_model("f16"), o);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ((*m)->load_report().weights_cache, "off");
  EXPECT_TRUE(fs::is_empty(dir));
  EXPECT_FALSE((*m)->save_prepared_weights().is_ok());
}

}  // namespace
}  // namespace kvstash
