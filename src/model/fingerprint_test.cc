// The fingerprint's sidecar cache (fingerprint.h): remembered by path, size and mtime, and never
// handed to another file that replaced the first under the same path, size and mtime.
#include "model/fingerprint.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "model/model.h"
#include "modelgen/modelgen.h"

namespace kvstash {
namespace {

namespace fs = std::filesystem;

class FingerprintSidecar : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kvstash-fingerprint-test-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "cache");
    const char* old = std::getenv("XDG_CACHE_HOME");
    old_xdg_ = old ? old : "";
    had_xdg_ = old != nullptr;
    ::setenv("XDG_CACHE_HOME", (root_ / "cache").c_str(), 1);
  }
  void TearDown() override {
    if (had_xdg_) {
      ::setenv("XDG_CACHE_HOME", old_xdg_.c_str(), 1);
    } else {
      ::unsetenv("XDG_CACHE_HOME");
    }
    fs::remove_all(root_);
  }
  // The tiny preset with the given seed: the same size for every seed.
  fs::path generate(const std::string& name, std::uint64_t seed) {
    modelgen::GenerateOptions o;
    o.preset = "tiny";
    o.seed = seed;
    o.out_path = (root_ / name).string();
    EXPECT_TRUE(modelgen::generate_model(o).is_ok());
    return o.out_path;
  }
  static std::string fingerprint_of(const fs::path& p) {
    ModelLoadOptions o;
    o.weights = WeightMemory::kFileMapping;  // the fingerprint is all this test reads
    auto m = Model::load(p.string(), o);
    EXPECT_TRUE(m.has_value()) << m.status().to_string();
    return m ? (*m)->fingerprint_hex() : "";
  }
  static std::size_t sidecars(const fs::path& cache) {
    const fs::path dir = cache / "kvstash" / "fingerprints";
    return fs::exists(dir) ? static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator())) : 0;
  }
  fs::path root_;
  std::string old_xdg_;
  bool had_xdg_ = false;
};

TEST_F(FingerprintSidecar, RememberedAndNotInheritedByAReplacement) {
  const fs::path a = generate("a.gguf", 1), b = generate("b.gguf", 2);
  ASSERT_EQ(fs::file_size(a), fs::file_size(b));
  const std::string fp_b = fingerprint_of(b);
  const fs::path served = root_ / "served.gguf";
  fs::copy_file(a, served);
  const std::string fp_a = fingerprint_of(served);
  ASSERT_NE(fp_a, fp_b);
  EXPECT_EQ(sidecars(root_ / "cache"), 2u);  // b's and served's
  EXPECT_EQ(fingerprint_of(served), fp_a);   // from the sidecar now
  EXPECT_EQ(sidecars(root_ / "cache"), 2u);

  // Replace the file by another model of the same size and give it the very same mtime: the
  // sidecar's name (path, size, mtime) matches, its probe does not.
  struct stat st {};
  ASSERT_EQ(::stat(served.c_str(), &st), 0);
  fs::copy_file(b, served, fs::copy_options::overwrite_existing);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, served.c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(served.c_str(), &after), 0);
  ASSERT_EQ(after.st_size, st.st_size);
  ASSERT_EQ(after.st_mtim.tv_nsec, st.st_mtim.tv_nsec);
  EXPECT_EQ(fingerprint_of(served), fp_b);

  // And an ordinary replacement (new mtime) too.
  fs::copy_file(a, served, fs::copy_options::overwrite_existing);
  EXPECT_EQ(fingerprint_of(served), fp_a);
}

}  // namespace
}  // namespace kvstash
