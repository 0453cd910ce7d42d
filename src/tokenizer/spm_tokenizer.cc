#include "tokenizer/spm_tokenizer.h"

#include <cstdio>
#include <queue>

namespace kvstash::tokenizer {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's space

bool is_special(TokenType type) { return type == TokenType::kControl || type == TokenType::kUserDefined; }

// The length of the UTF-8 char that starts with `byte` (1 for a stray continuation byte).
std::size_t utf8_char_length(unsigned char byte) {
  if (byte < 0xC0) return 1;
  if (byte < 0xE0) return 2;
  if (byte < 0xF0) return 3;
  return 4;
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

// Whether a token holds a "▁" right after a char that is not one ("a▁b"): then a merge may cross
// the start of a word and words cannot be merged one by one.
bool spans_word_start(std::string_view token) {
  for (std::size_t at = token.find(kSpaceMark, 1); at != std::string_view::npos; at = token.find(kSpaceMark, at + 1)) {
    if (at < kSpaceMark.size() || token.compare(at - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) != 0) return true;
  }
  return false;
}

// Whether the char split of the whole text (utf8_char_length from each lead byte) runs over
// position `at`, which happens only after invalid UTF-8.
bool inside_a_char(std::string_view text, std::size_t at) {
  for (std::size_t back = 1; back <= 3 && back <= at; ++back) {
    const auto byte = static_cast<unsigned char>(text[at - back]);
    if (byte >= 0xC0) return utf8_char_length(byte) > back;
  }
  return false;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (std::size_t hit; (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos)).append(to);
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

Expected<std::unique_ptr<SpmTokenizer>> SpmTokenizer::create(SpmVocabulary vocab) {
  const std::size_t n = vocab.tokens.size();
  if (vocab.types.empty()) vocab.types.assign(n, TokenType::kNormal);
  if (vocab.scores.empty()) vocab.scores.assign(n, 0.0f);
  if (vocab.types.size() != n || vocab.scores.size() != n) {
    return corrupt("tokenizer: " + std::to_string(vocab.types.size()) + " token types and " +
                   std::to_string(vocab.scores.size()) + " scores for " + std::to_string(n) + " tokens");
  }
  for (TokenId id : {vocab.bos_id, vocab.eos_id}) {
    if (id != -1 && (id < 0 || static_cast<std::size_t>(id) >= n)) {
      return corrupt("tokenizer: special token id " + std::to_string(id) + " out of range");
    }
  }
  std::unique_ptr<SpmTokenizer> tok(new SpmTokenizer());
  tok->tokens_ = std::move(vocab.tokens);
  tok->scores_ = std::move(vocab.scores);
  tok->types_ = std::move(vocab.types);
  tok->byte_token_.fill(-1);
  tok->pieces_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    const std::string& text = tok->tokens_[i];
    const TokenType type = tok->types_[i];
    tok->index_.emplace(text, id);  // the first id of a duplicated text wins
    switch (type) {
      case TokenType::kByte: {
        const int byte = parse_byte_token(text);
        if (byte < 0) return corrupt("tokenizer: byte token " + std::to_string(i) + " is '" + text + "'");
        if (tok->byte_token_[byte] < 0) tok->byte_token_[byte] = id;
        tok->pieces_[i] = std::string(1, static_cast<char>(byte));
        break;
      }
      case TokenType::kControl: tok->control_.add(text, id); tok->all_specials_.add(text, id); break;
      case TokenType::kUserDefined:
        tok->user_defined_.add(text, id);
        tok->all_specials_.add(text, id);
        tok->pieces_[i] = text;
        break;
      case TokenType::kUnknown:
        if (tok->unknown_id_ < 0) tok->unknown_id_ = id;
        break;
      default:
        tok->mergeable_.emplace(text, id);
        if (spans_word_start(text)) tok->words_are_independent_ = false;
        tok->pieces_[i] = replace_all(text, kSpaceMark, " ");
        break;
    }
  }
  tok->chat_template_ = std::move(vocab.chat_template);
  tok->bos_id_ = vocab.bos_id;
  tok->eos_id_ = vocab.eos_id;
  tok->add_bos_ = vocab.add_bos;
  tok->add_space_prefix_ = vocab.add_space_prefix;
  if (vocab.eos_id >= 0) tok->end_of_generation_.insert(vocab.eos_id);
  for (TokenId id : vocab.end_of_generation_ids) {
    if (id >= 0 && static_cast<std::size_t>(id) < n) tok->end_of_generation_.insert(id);
  }
  // Chat formats of SentencePiece families that end a turn with their own token (Phi-3).
  for (std::string_view text : {"<|end|>", "<|endoftext|>", "<end_of_turn>", "<|im_end|>"}) {
    const std::optional<TokenId> id = tok->find_token(text);
    if (id && is_special(tok->types_[static_cast<std::size_t>(*id)])) tok->end_of_generation_.insert(*id);
  }
  return tok;
}

std::optional<TokenId> SpmTokenizer::find_token(std::string_view text) const {
  const auto it = index_.find(text);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void SpmTokenizer::encode_piece(std::string_view text, std::vector<TokenId>* out) const {
  if (!words_are_independent_) {
    merge_chunk(text, out);
    return;
  }
  // No token spans a char followed by "▁", so no merge crosses such a place: the words between
  // them merge alone, with the same result and a small heap that stays in cache.
  std::size_t start = 0;
  for (std::size_t at = text.find(kSpaceMark, 1); at != std::string_view::npos; at = text.find(kSpaceMark, at + 1)) {
    if (at >= kSpaceMark.size() && text.compare(at - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) == 0) {
      continue;  // "▁▁": a run of spaces stays together
    }
    if (inside_a_char(text, at)) continue;  // invalid UTF-8 before it: split as the whole text would
    merge_chunk(text.substr(start, at - start), out);
    start = at;
  }
  merge_chunk(text.substr(start), out);
}

void SpmTokenizer::merge_chunk(std::string_view text, std::vector<TokenId>* out) const {
  // Symbols form a linked list over the text's UTF-8 chars; a merged-away symbol has size 0.
  struct Symbol {
    std::size_t offset;
    std::size_t size;
    int prev;
    int next;
  };
  struct Candidate {
    float score;
    int left;
    int right;
    std::size_t size;  // the merged text's bytes: stale when the symbols no longer add up to it
    bool operator<(const Candidate& o) const {  // the queue's top: highest score, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::vector<Symbol> symbols;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t len = std::min(utf8_char_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({pos, len, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    pos += len;
  }
  std::priority_queue<Candidate> queue;
  const auto view = [&](const Symbol& s) { return text.substr(s.offset, s.size); };
  const auto offer = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view joined = text.substr(symbols[left].offset, symbols[left].size + symbols[right].size);
    const auto it = mergeable_.find(joined);
    if (it == mergeable_.end()) return;
    queue.push({scores_[static_cast<std::size_t>(it->second)], left, right, joined.size()});
  };
  for (std::size_t i = 1; i < symbols.size(); ++i) offer(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.size == 0 || right.size == 0 || left.size + right.size != c.size || left.next != c.right) continue;
    left.size = c.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    offer(left.prev, c.left);
    offer(c.left, left.next);
  }
  // A merged symbol is a token by construction; a single char may not be: then its bytes.
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = view(symbols[i]);
    if (const auto it = mergeable_.find(piece); it != mergeable_.end()) {
      out->push_back(it->second);
      continue;
    }
    for (char c : piece) {
      const TokenId byte = byte_token_[static_cast<unsigned char>(c)];
      out->push_back(byte >= 0 ? byte : unknown_id_);
    }
  }
}

std::vector<TokenId> SpmTokenizer::encode(std::string_view text, bool parse_special) const {
  return encode_split(text, find_specials(text, {}, parse_special ? &all_specials_ : &user_defined_, nullptr));
}

std::vector<TokenId> SpmTokenizer::encode_with_plain_spans(std::string_view text,
                                                           const std::vector<TextSpan>& plain) const {
  // Inside the spans, user-defined tokens are still matched, as encode(.., false) matches them.
  return encode_split(text, find_specials(text, plain, &all_specials_, &user_defined_));
}

std::vector<TokenId> SpmTokenizer::encode_split(std::string_view text,
                                                const std::vector<SpecialTokenMatcher::Match>& specials) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 1);
  bool after_special = true;  // the text's start counts as following a special token
  const auto plain = [&](std::string_view piece) {
    if (piece.empty()) return;
    std::string prepared = add_space_prefix_ && after_special ? " " : "";
    prepared.append(piece);
    encode_piece(replace_all(prepared, " ", kSpaceMark), &out);
    after_special = false;
  };
  std::size_t pos = 0;
  for (const SpecialTokenMatcher::Match& match : specials) {
    plain(text.substr(pos, match.offset - pos));
    out.push_back(match.id);
    after_special = true;
    pos = match.offset + match.length;
  }
  plain(text.substr(pos));
  return out;
}

std::string SpmTokenizer::token_to_piece(TokenId token) const {
  if (token < 0 || static_cast<std::size_t>(token) >= pieces_.size()) return {};
  return pieces_[static_cast<std::size_t>(token)];
}

std::string SpmTokenizer::decode(std::span<const TokenId> tokens) const {
  std::string out;
  bool first_text = true;
  for (TokenId token : tokens) {
    if (token < 0 || static_cast<std::size_t>(token) >= pieces_.size()) continue;
    const std::string& piece = pieces_[static_cast<std::size_t>(token)];
    if (piece.empty()) continue;
    // The space encode added in front of the text (the text's first piece only).
    if (first_text && add_space_prefix_ && piece[0] == ' ' && types_[static_cast<std::size_t>(token)] == TokenType::kNormal) {
      out.append(piece, 1);
    } else {
      out += piece;
    }
    first_text = false;
  }
  return out;
}

}  // namespace kvstash::tokenizer
