#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>

#include "tokenizer/byte_unicode.h"

namespace kvstash::tokenizer {

Expected<BpeModel> BpeModel::build(std::vector<std::string> tokens,
                                   const std::vector<std::string>& merges,
                                   std::vector<bool> producible, bool ignore_merges, bool utf8_units) {
  if (producible.size() != tokens.size()) {
    return corrupt("token types: " + std::to_string(producible.size()) + " entries for " +
                   std::to_string(tokens.size()) + " tokens");
  }
  BpeModel model;
  model.tokens_ = std::move(tokens);
  model.producible_ = std::move(producible);
  model.ignore_merges_ = ignore_merges;
  model.utf8_units_ = utf8_units;
  // The first id of a duplicated text wins, as in a vocabulary lookup table.
  model.index_.build(model.tokens_);
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const std::string mapped = utf8_units ? std::string{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'}
                                          : bytes_to_mapped(std::string(1, static_cast<char>(b)));
    const std::optional<TokenId> id = model.find(mapped);
    // Some vocabularies lack bytes that never occur in UTF-8 (0xC0, 0xC1, 0xF5..); such a byte
    // encodes to nothing, as in the reference tokenizer.
    model.byte_token_[b] = id ? *id : kMissingByte;
  }
  model.merges_.reserve(merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // Split at the first space after the first char: token texts are byte-mapped and hold no
    // spaces, but a left part could in principle start with one.
    const std::size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      ++model.skipped_merges_;
      continue;
    }
    const std::string_view left(merge.data(), space);
    const std::string_view right(merge.data() + space + 1, merge.size() - space - 1);
    joined.assign(left).append(right);
    const std::optional<TokenId> l = model.find(left);
    const std::optional<TokenId> r = model.find(right);
    const std::optional<TokenId> result = model.find(joined);
    if (!l || !r || !result || !model.producible_[static_cast<std::size_t>(*result)]) {
      ++model.skipped_merges_;
      continue;
    }
    model.merges_.insert(pair_key(*l, *r), Merge{static_cast<std::uint32_t>(rank), *result});
  }
  return model;
}

std::optional<TokenId> BpeModel::find(std::string_view text) const { return index_.find(text, tokens_); }

const BpeModel::Merge* BpeModel::find_merge(TokenId left, TokenId right) const {
  return merges_.find(pair_key(left, right));
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<TokenId>* out) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1 && !utf8_units_) {
    const TokenId id = byte_token_[static_cast<std::uint8_t>(bytes[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  if (ignore_merges_) {
    const std::optional<TokenId> whole = find(bytes_to_mapped(bytes));
    if (whole && producible_[static_cast<std::size_t>(*whole)]) {
      out->push_back(*whole);
      return;
    }
  }

  // Symbols form a doubly linked list over the piece's positions; a merged-away symbol keeps
  // id -1. A candidate is a pair (left, right) as it was when queued; it is stale once either
  // side changed, which the ids and links show when it is popped.
  struct Symbol {
    TokenId id;
    int prev;
    int next;
  };
  struct Candidate {
    std::uint32_t rank;
    int left;
    TokenId left_id;
    TokenId right_id;
    TokenId result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Symbol> symbols;
  std::vector<std::string_view> chars;  // utf8_units: each symbol's character
  if (utf8_units_) {
    for (std::size_t i = 0; i < bytes.size();) {
      const auto lead = static_cast<std::uint8_t>(bytes[i]);
      std::size_t len = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
      len = std::min(len, bytes.size() - i);
      chars.push_back(bytes.substr(i, len));
      i += len;
    }
    symbols.resize(chars.size());
    for (std::size_t i = 0; i < chars.size(); ++i) {
      const std::optional<TokenId> id = find(chars[i]);
      symbols[i].id = id && producible_[static_cast<std::size_t>(*id)] ? *id : kMissingChar;
    }
  } else {
    symbols.resize(bytes.size());
    for (std::size_t i = 0; i < bytes.size(); ++i) symbols[i].id = byte_token_[static_cast<std::uint8_t>(bytes[i])];
  }
  const int n = static_cast<int>(symbols.size());
  for (int i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto offer = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    if (const Merge* m = find_merge(symbols[left].id, symbols[right].id)) {
      queue.push({m->rank, left, symbols[left].id, symbols[right].id, m->result});
    }
  };
  for (int i = 0; i + 1 < n; ++i) offer(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    left.id = c.result;
    const int after = right.next;
    right.id = -1;
    left.next = after;
    if (after >= 0) symbols[after].prev = c.left;
    offer(left.prev);
    offer(c.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) {
      out->push_back(symbols[i].id);
    } else if (symbols[i].id == kMissingChar) {
      for (char b : chars[static_cast<std::size_t>(i)]) {
        const TokenId id = byte_token_[static_cast<std::uint8_t>(b)];
        if (id >= 0) out->push_back(id);
      }
    }
  }
}

}  // namespace kvstash::tokenizer
