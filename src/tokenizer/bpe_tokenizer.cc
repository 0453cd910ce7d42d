#include "tokenizer/bpe_tokenizer.h"

#include "tokenizer/byte_unicode.h"

namespace kvstash::tokenizer {
namespace {

bool is_special(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

// Texts that end a turn in the chat formats of the families this reads (Llama 3, Qwen2, GPT-2,
// Phi, Gemma), for files whose metadata names no eot id. Only special tokens qualify.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>",
    "<|end|>", "<end_of_turn>", "<EOT>",
};

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// What a token of a SentencePiece-style BPE vocabulary decodes to: its text with U+2581 as
// spaces, a byte token "<0xXX>" its byte, a user-defined token its text as it is.
std::string spm_style_piece(const std::string& text, TokenType type) {
  if (type == TokenType::kUserDefined) return text;
  if (type == TokenType::kByte && text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
    return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
      out += ' ';
      i += kSpmSpace.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

Expected<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(BpeVocabulary vocab) {
  const Expected<PreTokenizerKind> kind = pre_tokenizer_kind(vocab.pre);
  if (!kind) return kind.status();
  const std::size_t n = vocab.tokens.size();
  if (vocab.types.empty()) vocab.types.assign(n, TokenType::kNormal);
  if (vocab.types.size() != n) {
    return corrupt("tokenizer: " + std::to_string(vocab.types.size()) + " token types for " +
                   std::to_string(n) + " tokens");
  }
  const auto valid_id = [&](TokenId id) { return id >= 0 && static_cast<std::size_t>(id) < n; };
  for (TokenId id : {vocab.bos_id, vocab.eos_id}) {
    if (id != -1 && !valid_id(id)) return corrupt("tokenizer: special token id " + std::to_string(id) + " out of range");
  }

  std::vector<bool> producible(n);
  for (std::size_t id = 0; id < n; ++id) producible[id] = !is_special(vocab.types[id]);
  // The decoded pieces are computed before the texts move into the model.
  std::vector<std::string> pieces(n);
  const bool spm_style = *kind == PreTokenizerKind::kGemma4;
  for (std::size_t id = 0; id < n; ++id) {
    const std::string& text = vocab.tokens[id];
    if (vocab.types[id] == TokenType::kControl) continue;
    if (spm_style) {
      pieces[id] = spm_style_piece(text, vocab.types[id]);
    } else if (vocab.types[id] == TokenType::kUserDefined || !mapped_to_bytes(text, &pieces[id])) {
      pieces[id] = text;  // stored as plain text, not byte-mapped
    }
  }

  const bool is_llama3 = *kind == PreTokenizerKind::kLlama3;
  // Llama 3's tokenizer.json sets ignore_merges: a piece that is a whole token stays whole.
  Expected<BpeModel> model = BpeModel::build(std::move(vocab.tokens), vocab.merges, std::move(producible), is_llama3, spm_style);
  if (!model) return model.status();

  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer(std::move(*model)));
  tok->pre_kind_ = *kind;
  tok->pre_ = vocab.pre;
  tok->chat_template_ = std::move(vocab.chat_template);
  tok->pieces_ = std::move(pieces);
  tok->bos_id_ = vocab.bos_id;
  tok->eos_id_ = vocab.eos_id;
  tok->add_bos_ = vocab.add_bos.value_or(is_llama3);
  for (std::size_t id = 0; id < n; ++id) {
    if (is_special(vocab.types[id])) tok->specials_.add(tok->model_.token_text(static_cast<TokenId>(id)), static_cast<TokenId>(id));
  }
  if (vocab.eos_id >= 0) tok->end_of_generation_.insert(vocab.eos_id);
  for (TokenId id : vocab.end_of_generation_ids) {
    if (valid_id(id)) tok->end_of_generation_.insert(id);
  }
  for (std::string_view text : kEndOfGenerationTexts) {
    const std::optional<TokenId> id = tok->model_.find(text);
    if (id && is_special(vocab.types[static_cast<std::size_t>(*id)])) tok->end_of_generation_.insert(*id);
  }
  return tok;
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<TokenId>* out) const {
  if (text.empty()) return;
  std::vector<std::string_view> words;
  if (pre_kind_ == PreTokenizerKind::kGemma4) {
    // SentencePiece-style: spaces become U+2581 first; a run of newlines that is a token stays
    // whole (as llama.cpp does for Gemma 4), anything else goes through BPE.
    std::string escaped;
    escaped.reserve(text.size() + text.size() / 4);
    for (char c : text) {
      if (c == ' ') {
        escaped += kSpmSpace;
      } else {
        escaped += c;
      }
    }
    pre_tokenize(pre_kind_, escaped, &words);
    for (std::string_view word : words) {
      if (word.front() == '\n') {
        if (const std::optional<TokenId> id = model_.find(word)) {
          out->push_back(*id);
          continue;
        }
      }
      model_.encode_piece(word, out);
    }
    return;
  }
  pre_tokenize(pre_kind_, text, &words);
  for (std::string_view word : words) model_.encode_piece(word, out);
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 1);  // English averages about four bytes a token
  std::size_t pos = 0;
  if (parse_special) {
    for (;;) {
      const SpecialTokenMatcher::Match match = specials_.find(text, pos);
      if (match.length == 0) break;
      encode_plain(text.substr(pos, match.offset - pos), &out);
      out.push_back(match.id);
      pos = match.offset + match.length;
    }
  }
  encode_plain(text.substr(pos), &out);
  return out;
}

std::vector<TokenId> BpeTokenizer::encode_with_plain_spans(std::string_view text,
                                                          const std::vector<TextSpan>& plain) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 1);
  std::size_t pos = 0;
  for (const SpecialTokenMatcher::Match& match : find_specials(text, plain, &specials_, nullptr)) {
    encode_plain(text.substr(pos, match.offset - pos), &out);
    out.push_back(match.id);
    pos = match.offset + match.length;
  }
  encode_plain(text.substr(pos), &out);
  return out;
}

std::string BpeTokenizer::token_to_piece(TokenId token) const {
  if (token < 0 || static_cast<std::size_t>(token) >= pieces_.size()) return {};
  return pieces_[static_cast<std::size_t>(token)];
}

std::string BpeTokenizer::decode(std::span<const TokenId> tokens) const {
  std::string out;
  for (TokenId token : tokens) {
    if (token >= 0 && static_cast<std::size_t>(token) < pieces_.size()) out += pieces_[static_cast<std::size_t>(token)];
  }
  return out;
}

}  // namespace kvstash::tokenizer
