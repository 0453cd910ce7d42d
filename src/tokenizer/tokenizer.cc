// Tokenizer::from_gguf: reads tokenizer.ggml.* metadata into a BpeVocabulary.
#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe_tokenizer.h"

namespace kvstash {
namespace {

// An optional integer key: -1 when absent, an error when present with a non-integer type.
Expected<TokenId> optional_id(const gguf::File& file, std::string_view key) {
  if (file.find(key) == nullptr) return TokenId{-1};
  const Expected<std::int64_t> v = file.get_int(key);
  if (!v) return v.status();
  if (*v < -1 || *v > INT32_MAX) return corrupt(std::string(key) + ": id " + std::to_string(*v) + " out of range");
  return static_cast<TokenId>(*v);
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  const Expected<std::string> model = file.get_string("tokenizer.ggml.model");
  if (!model) return model.status();
  if (*model != "gpt2") {
    return unsupported(file.path() + ": tokenizer model '" + *model + "' (only byte-level BPE 'gpt2')");
  }
  tokenizer::BpeVocabulary vocab;
  Expected<std::vector<std::string>> tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return tokens.status();
  vocab.tokens = std::move(*tokens);
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    const Expected<std::vector<std::int64_t>> types = file.get_int_array("tokenizer.ggml.token_type");
    if (!types) return types.status();
    vocab.types.reserve(types->size());
    for (std::int64_t t : *types) vocab.types.push_back(static_cast<tokenizer::TokenType>(t));
  }
  if (file.find("tokenizer.ggml.merges") != nullptr) {
    Expected<std::vector<std::string>> merges = file.get_string_array("tokenizer.ggml.merges");
    if (!merges) return merges.status();
    vocab.merges = std::move(*merges);
  }
  if (file.find("tokenizer.ggml.pre") != nullptr) {
    Expected<std::string> pre = file.get_string("tokenizer.ggml.pre");
    if (!pre) return pre.status();
    vocab.pre = std::move(*pre);
  }
  Expected<TokenId> bos = optional_id(file, "tokenizer.ggml.bos_token_id");
  if (!bos) return bos.status();
  vocab.bos_id = *bos;
  Expected<TokenId> eos = optional_id(file, "tokenizer.ggml.eos_token_id");
  if (!eos) return eos.status();
  vocab.eos_id = *eos;
  for (std::string_view key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    Expected<TokenId> id = optional_id(file, key);
    if (!id) return id.status();
    if (*id >= 0) vocab.end_of_generation_ids.push_back(*id);
  }
  if (file.find("tokenizer.ggml.add_bos_token") != nullptr) {
    const Expected<bool> add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
    if (!add_bos) return add_bos.status();
    vocab.add_bos = *add_bos;
  }
  if (file.find("tokenizer.chat_template") != nullptr) {
    Expected<std::string> tmpl = file.get_string("tokenizer.chat_template");
    if (!tmpl) return tmpl.status();
    vocab.chat_template = std::move(*tmpl);
  }
  Expected<std::unique_ptr<tokenizer::BpeTokenizer>> tok = tokenizer::BpeTokenizer::create(std::move(vocab));
  if (!tok) return Status(tok.status().code(), file.path() + ": " + tok.status().message());
  return std::unique_ptr<Tokenizer>(std::move(*tok));
}

}  // namespace kvstash
