// tokenizer_bench: encode throughput (tokens/s, MB/s) of the real vocabularies in shared/vocab
// on long texts, and the time of pathological inputs (one 100 KB word, long whitespace runs).
// Besides wall time it prints the best thread CPU time of one encode, which a machine busy with
// other work inflates much less (compare builds with that column).
//
// usage: tokenizer_bench [VOCAB_DIR]   (default: the shared/vocab folder the build knows)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs encode until at least min_seconds have passed; prints tokens/s and MB/s.
void measure(const kvstash::Tokenizer& tok, const char* name, const std::string& text, double min_seconds) {
  std::size_t tokens = 0;
  std::size_t bytes = 0;
  int runs = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  double best_cpu = 1e30;
  do {
    const double cpu_start = thread_cpu_seconds();
    tokens += tok.encode(text, /*parse_special=*/true).size();
    best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
    bytes += text.size();
    ++runs;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < min_seconds);
  std::printf("  %-28s %8zu bytes  %7.3f ms/encode  %10.0f tokens/s  %7.2f MB/s  best CPU %7.2f ms\n", name,
              text.size(), 1e3 * elapsed / runs, tokens / elapsed, bytes / elapsed / 1e6, 1e3 * best_cpu);
}

}  // namespace

int main(int argc, char** argv) {
#ifdef KVSTASH_SHARED_DIR
  std::string dir = KVSTASH_SHARED_DIR "/vocab/";
#else
  std::string dir = "../shared/vocab/";
#endif
  if (argc > 1) dir = std::string(argv[1]) + "/";
  // A mixed text: the reference test strings (English, code, CJK, emoji, whitespace runs)
  // repeated to about 1 MB.
  const std::string sample = read_file(dir + "ggml-vocab-llama-bpe.gguf.inp");
  std::string mixed;
  while (mixed.size() < (1u << 20)) mixed += sample;
  std::string prose;
  const std::string sentence = "The quick brown fox jumps over the lazy dog, and it doesn't stop until 2024. ";
  while (prose.size() < (1u << 20)) prose += sentence;
  const std::string word(100000, 'a');
  const std::string spaces = std::string(50000, ' ') + "x" + std::string(50000, '\n');

  for (const char* name : {"ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    const auto load_start = Clock::now();
    auto file = kvstash::gguf::File::open(dir + name);
    if (!file) {
      std::fprintf(stderr, "%s\n", file.status().to_string().c_str());
      return 1;
    }
    auto tok = kvstash::Tokenizer::from_gguf(**file);
    if (!tok) {
      std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
      return 1;
    }
    std::printf("%s (load %.0f ms)\n", name,
                1e3 * std::chrono::duration<double>(Clock::now() - load_start).count());
    measure(**tok, "mixed test strings", mixed, 1.0);
    measure(**tok, "english prose", prose, 1.0);
    measure(**tok, "one 100 KB word", word, 0.2);
    measure(**tok, "100 KB of whitespace", spaces, 0.2);
  }
  return 0;
}
