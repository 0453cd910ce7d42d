// Every reference vector in shared/vocab, and those of llama.cpp's models/ folder that shared/vocab
// lacks for the model families kvstash runs (testdata/: Qwen2/Qwen3's vectors for the vocabulary in
// shared/vocab, Gemma 4's vocabulary zstd-compressed with its vectors; llama.cpp commit de3ff815,
// 2026-09-28). NAME.gguf.inp holds test strings, each followed by a line "__ggml_vocab_test__";
// NAME.gguf.out holds one line of token ids per string (no BOS). The strings are encoded as
// llama.cpp's reference run does: special tokens parsed, no BOS.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <zstd.h>

#include "tokenizer/tokenizer.h"

namespace kvstash {
namespace {

const std::string kVocabDir = KVSTASH_SHARED_DIR "/vocab/";
const std::string kTestdataDir = (std::filesystem::path(__FILE__).parent_path() / "testdata").string() + "/";

// The vocabulary file of `name` and where its vectors are: shared/vocab, or testdata (a
// vocabulary only there is stored as NAME.gguf.zst and unpacked into the build directory once).
struct VocabFiles {
  std::string gguf;
  std::string vectors;  // path of NAME.gguf, to which .inp / .out are appended
};

std::string read_file(const std::string& path);

VocabFiles vocab_files(const std::string& name) {
  const std::string file = "ggml-vocab-" + name + ".gguf";
  if (std::ifstream(kVocabDir + file + ".inp")) return {kVocabDir + file, kVocabDir + file};
  if (std::ifstream(kVocabDir + file)) return {kVocabDir + file, kTestdataDir + file};
  const std::string unpacked = std::string(KVSTASH_BINARY_DIR) + "/" + file;
  if (!std::ifstream(unpacked)) {
    const std::string packed = read_file(kTestdataDir + file + ".zst");
    const unsigned long long size = ZSTD_getFrameContentSize(packed.data(), packed.size());
    if (packed.empty() || size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) return {unpacked, kTestdataDir + file};
    std::string bytes(size, '\0');
    if (ZSTD_isError(ZSTD_decompress(bytes.data(), bytes.size(), packed.data(), packed.size()))) return {unpacked, kTestdataDir + file};
    const std::string temp = unpacked + ".tmp." + std::to_string(::getpid());  // tests may run at once
    std::ofstream(temp, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::rename(temp.c_str(), unpacked.c_str());
  }
  return {unpacked, kTestdataDir + file};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_inputs(const std::string& data) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t next = data.find(sep, pos);
    if (next == std::string::npos) break;
    out.push_back(data.substr(pos, next - pos));
    pos = next + sep.size();
  }
  if (pos < data.size()) out.push_back(data.substr(pos));  // the last string, when no separator follows it
  return out;
}

std::vector<std::vector<TokenId>> read_outputs(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<TokenId>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<TokenId> ids;
    TokenId id;
    while (ls >> id) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, AllReferenceOutputsMatch) {
  const std::string name = GetParam();
  const VocabFiles files = vocab_files(name);
  const std::string& path = files.vectors;
  Expected<std::unique_ptr<gguf::File>> file = gguf::File::open(files.gguf);
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  Expected<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
  const std::string inp = read_file(path + ".inp");
  ASSERT_FALSE(inp.empty()) << "missing " << path << ".inp";
  const auto inputs = split_inputs(inp);
  const auto outputs = read_outputs(path + ".out");
  ASSERT_EQ(inputs.size(), outputs.size()) << name;
  ASSERT_GE(inputs.size(), 40u) << name;
  std::size_t passing = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<TokenId> ids = (*tok)->encode(inputs[i], /*parse_special=*/true);
    EXPECT_EQ(ids, outputs[i]) << name << " test string " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ((*tok)->decode(ids), inputs[i]) << name << " test string " << i;
    if (ids == outputs[i]) ++passing;
  }
  std::printf("%s reference vectors: %zu / %zu pass\n", name.c_str(), passing, inputs.size());
  EXPECT_EQ(passing, inputs.size());
}

// Random texts (ASCII, accents, CJK, emoji, whitespace runs, special-token look-alikes) decode back
// to themselves with every vocabulary, and encoding never crashes (this runs under ASan in CI).
// Not "▁" (U+2581): SentencePiece writes spaces as that char, so a literal one decodes as a space;
// not "</s>": Phi-3 has it as a user-defined token, matched in any text, and SentencePiece puts a
// space before the text that follows a special token (as at the start), which decode keeps.
TEST_P(VocabVectors, RandomTextsRoundTrip) {
  const std::string name = GetParam();
  Expected<std::unique_ptr<gguf::File>> file = gguf::File::open(vocab_files(name).gguf);
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  Expected<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
  const char* pieces[] = {"a", "Z", "7", "42", " ", "  ", "\n", "\t", "\r\n", "'s", "'LL", ".", "!?", "é", "ü", "中",
                          "文", "😀", "👩‍👩‍👧", "ا", "β", "½", "<", ">", "<s>", "<|", "|>",
                          "$", "+=", "_", "\u3000", "\xC2\xA0", "\xE0\xA4\x95\xE0\xA5\x8D"};
  std::uint32_t state = 12345;
  const auto next = [&] { state = state * 1103515245u + 12345u; return state >> 8; };
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = static_cast<int>(next() % 24);
    for (int i = 0; i < n; ++i) text += pieces[next() % (sizeof(pieces) / sizeof(pieces[0]))];
    const std::vector<TokenId> ids = (*tok)->encode(text, /*parse_special=*/false);
    ASSERT_EQ((*tok)->decode(ids), text) << name << " round " << round;
  }
}

// Every vocabulary with vectors in shared/vocab (its README lists them), then those in testdata.
INSTANTIATE_TEST_SUITE_P(SharedVocab, VocabVectors,
                         ::testing::Values("llama-bpe", "llama-spm", "phi-3", "deepseek-coder", "falcon",
                                           "starcoder", "refact", "command-r", "mpt", "qwen2", "gemma-4"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = (c == '-') ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace kvstash
