// Tokenizer::from_gguf: reads tokenizer.ggml.* metadata into a BpeVocabulary ("gpt2", and
// "gemma4": BPE over SentencePiece-style text) or an SpmVocabulary ("llama").
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace kvstash {
namespace {

using tokenizer::TokenType;

// An optional integer key: -1 when absent, an error when present with a non-integer type.
Expected<TokenId> optional_id(const gguf::File& file, std::string_view key) {
  if (file.find(key) == nullptr) return TokenId{-1};
  const Expected<std::int64_t> v = file.get_int(key);
  if (!v) return v.status();
  if (*v < -1 || *v > INT32_MAX) return corrupt(std::string(key) + ": id " + std::to_string(*v) + " out of range");
  return static_cast<TokenId>(*v);
}

Expected<std::optional<bool>> optional_bool(const gguf::File& file, std::string_view key) {
  if (file.find(key) == nullptr) return std::optional<bool>();
  const Expected<bool> v = file.get_bool(key);
  if (!v) return v.status();
  return std::optional<bool>(*v);
}

// What both kinds of vocabulary read the same way.
struct CommonFields {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  TokenId bos_id = -1;
  TokenId eos_id = -1;
  std::vector<TokenId> end_of_generation_ids;
  std::optional<bool> add_bos;
  std::string chat_template;
};

Status read_common(const gguf::File& file, CommonFields* out) {
  Expected<std::vector<std::string>> tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return tokens.status();
  out->tokens = std::move(*tokens);
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    const Expected<std::vector<std::int64_t>> types = file.get_int_array("tokenizer.ggml.token_type");
    if (!types) return types.status();
    out->types.reserve(types->size());
    for (std::int64_t t : *types) out->types.push_back(static_cast<TokenType>(t));
  }
  Expected<TokenId> bos = optional_id(file, "tokenizer.ggml.bos_token_id");
  if (!bos) return bos.status();
  out->bos_id = *bos;
  Expected<TokenId> eos = optional_id(file, "tokenizer.ggml.eos_token_id");
  if (!eos) return eos.status();
  out->eos_id = *eos;
  for (std::string_view key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    Expected<TokenId> id = optional_id(file, key);
    if (!id) return id.status();
    if (*id >= 0) out->end_of_generation_ids.push_back(*id);
  }
  Expected<std::optional<bool>> add_bos = optional_bool(file, "tokenizer.ggml.add_bos_token");
  if (!add_bos) return add_bos.status();
  out->add_bos = *add_bos;
  if (file.find("tokenizer.chat_template") != nullptr) {
    Expected<std::string> tmpl = file.get_string("tokenizer.chat_template");
    if (!tmpl) return tmpl.status();
    out->chat_template = std::move(*tmpl);
  }
  return Status::ok();
}

Expected<std::unique_ptr<Tokenizer>> bpe_from_gguf(const gguf::File& file, CommonFields common, bool gemma4) {
  tokenizer::BpeVocabulary vocab;
  vocab.tokens = std::move(common.tokens);
  vocab.types = std::move(common.types);
  vocab.bos_id = common.bos_id;
  vocab.eos_id = common.eos_id;
  vocab.end_of_generation_ids = std::move(common.end_of_generation_ids);
  vocab.add_bos = common.add_bos;
  vocab.chat_template = std::move(common.chat_template);
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
  if (gemma4) {
    // Gemma 4's tokenizer is BPE over SentencePiece-style text whatever the file's pre says, and
    // always starts with BOS (llama.cpp overrides a file that says otherwise).
    vocab.pre = "gemma4";
    vocab.add_bos = true;
  }
  Expected<std::unique_ptr<tokenizer::BpeTokenizer>> tok = tokenizer::BpeTokenizer::create(std::move(vocab));
  if (!tok) return Status(tok.status().code(), file.path() + ": " + tok.status().message());
  return std::unique_ptr<Tokenizer>(std::move(*tok));
}

Expected<std::unique_ptr<Tokenizer>> spm_from_gguf(const gguf::File& file, CommonFields common) {
  tokenizer::SpmVocabulary vocab;
  vocab.tokens = std::move(common.tokens);
  vocab.types = std::move(common.types);
  vocab.bos_id = common.bos_id;
  vocab.eos_id = common.eos_id;
  vocab.end_of_generation_ids = std::move(common.end_of_generation_ids);
  vocab.add_bos = common.add_bos.value_or(true);
  vocab.chat_template = std::move(common.chat_template);
  if (const gguf::Value* scores = file.find("tokenizer.ggml.scores")) {
    const auto* array = std::get_if<gguf::Array>(&scores->data);
    if (array == nullptr) return corrupt(file.path() + ": tokenizer.ggml.scores is not an array");
    vocab.scores.reserve(array->items.size());
    for (const gguf::Value& item : array->items) {
      const auto* score = std::get_if<double>(&item.data);
      if (score == nullptr) return corrupt(file.path() + ": tokenizer.ggml.scores holds a non-float");
      vocab.scores.push_back(static_cast<float>(*score));
    }
  }
  Expected<std::optional<bool>> space_prefix = optional_bool(file, "tokenizer.ggml.add_space_prefix");
  if (!space_prefix) return space_prefix.status();
  vocab.add_space_prefix = space_prefix->value_or(true);
  Expected<std::unique_ptr<tokenizer::SpmTokenizer>> tok = tokenizer::SpmTokenizer::create(std::move(vocab));
  if (!tok) return Status(tok.status().code(), file.path() + ": " + tok.status().message());
  return std::unique_ptr<Tokenizer>(std::move(*tok));
}

}  // namespace

std::vector<TokenId> Tokenizer::encode_with_plain_spans(std::string_view text, const std::vector<TextSpan>& plain) const {
  std::vector<TokenId> out;
  const auto append = [&](std::string_view piece, bool parse_special) {
    if (piece.empty()) return;
    const std::vector<TokenId> ids = encode(piece, parse_special);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  std::size_t pos = 0;
  for (const TextSpan& span : plain) {
    const std::size_t begin = std::min(std::max(span.offset, pos), text.size());
    const std::size_t end = std::max(begin, std::min(span.offset + span.length, text.size()));
    append(text.substr(pos, begin - pos), true);
    append(text.substr(begin, end - begin), false);
    pos = end;
  }
  append(text.substr(pos), true);
  return out;
}

std::vector<TokenId> tokenize(const Tokenizer& tokenizer, std::string_view text, bool add_special, bool parse_special) {
  std::vector<TokenId> ids;
  if (add_special && tokenizer.add_bos() && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  const std::vector<TokenId> body = tokenizer.encode(text, parse_special);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  const Expected<std::string> model = file.get_string("tokenizer.ggml.model");
  if (!model) return model.status();
  if (*model != "gpt2" && *model != "llama" && *model != "gemma4") {
    return unsupported(file.path() + ": tokenizer model '" + *model +
                       "' (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece, 'gemma4' SentencePiece-style BPE)");
  }
  CommonFields common;
  if (Status s = read_common(file, &common); !s.is_ok()) return s;
  if (*model == "llama") return spm_from_gguf(file, std::move(common));
  return bpe_from_gguf(file, std::move(common), *model == "gemma4");
}

}  // namespace kvstash
