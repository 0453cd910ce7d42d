// Fuzzes the GGUF reader (gguf::File::open) and what reads a vocabulary out of it
// (Tokenizer::from_gguf): a model file is untrusted input (downloaded from anywhere). The bytes are
// written to a memfd and opened through /proc/self/fd, so File::open's mmap path is the one taken.
// A file that opens is walked (getters on every key, every tensor's bytes touched) and, when it
// holds a vocabulary, a short text is tokenized and detokenized with it.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

int memory_file() {
  static const int fd = memfd_create("gguf_fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  return fd;
}

void walk(const kvstash::gguf::File& file) {
  for (const auto& [key, value] : file.metadata()) {
    (void)kvstash::gguf::describe_value(value);
    (void)file.get_string(key);
    (void)file.get_uint(key);
    (void)file.get_int(key);
    (void)file.get_float(key);
    (void)file.get_bool(key);
    (void)file.get_string_array(key);
    (void)file.get_int_array(key);
  }
  std::uint64_t sum = 0;
  for (const auto& tensor : file.tensors()) {
    // First and last byte: ASan flags a range the reader accepted but the mapping does not hold.
    if (tensor.n_bytes > 0) sum += tensor.data[0] + tensor.data[tensor.n_bytes - 1];
    if (file.find_tensor(tensor.name) == nullptr) std::abort();
  }
  if (sum == 0xdeadbeef) std::abort();  // keeps the reads
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = memory_file();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = kvstash::gguf::File::open(path);
  if (!file) return 0;
  walk(**file);
  auto tokenizer = kvstash::Tokenizer::from_gguf(**file);
  if (!tokenizer) return 0;
  const kvstash::Tokenizer& t = **tokenizer;
  for (bool special : {false, true}) {
    const auto ids = kvstash::tokenize(t, "Hello wörld 123 <|im_start|>user\n  \t<s>😀", true, special);
    (void)t.decode(ids);
    for (auto id : ids) (void)t.token_to_piece(id);
  }
  (void)t.token_text(static_cast<kvstash::TokenId>(t.vocab_size()));
  (void)t.token_text(-1);
  (void)t.find_token("<|im_end|>");
  return 0;
}
