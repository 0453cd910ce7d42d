// kvstash tokenize: print the token ids of stdin's UTF-8 text (no BOS unless --add-special),
// space-separated on one line, with the tokenizer of a GGUF model or vocabulary-only file (byte-level
// BPE or SentencePiece). Same code as the server's POST /tokenize (tokenize() in tokenizer.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::cli {

int tokenize_main(int argc, char** argv) {
  CLI::App app{"Print the token ids of the UTF-8 text on stdin (no BOS), space-separated on one line.",
               "kvstash tokenize"};
  std::string path;
  bool no_parse_special = false;
  bool add_special = false;
  app.add_option("-m,--model", path, "GGUF model or vocabulary-only file")->required();
  app.add_flag("--no-parse-special", no_parse_special,
               "treat special-token texts such as <|im_start|> as plain text");
  app.add_flag("--add-special", add_special, "start with BOS when the vocabulary asks for one");
  CLI11_PARSE(app, argc, argv);

  Expected<std::unique_ptr<gguf::File>> file = gguf::File::open(path);
  if (!file) {
    std::fprintf(stderr, "kvstash tokenize: %s\n", file.status().to_string().c_str());
    return 1;
  }
  Expected<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(**file);
  if (!tokenizer) {
    std::fprintf(stderr, "kvstash tokenize: %s\n", tokenizer.status().to_string().c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  const std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  const std::vector<TokenId> ids = tokenize(**tokenizer, text, add_special, /*parse_special=*/!no_parse_special);
  std::string line;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return std::ferror(stdout) ? 1 : 0;
}

}  // namespace kvstash::cli
