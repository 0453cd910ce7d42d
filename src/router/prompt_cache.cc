#include "router/prompt_cache.h"

#include <xxhash.h>

#include <algorithm>

#include "tokenizer/bpe_tokenizer.h"

namespace kvstash::router {

PrefixTokenCache::PrefixTokenCache(const Tokenizer& tokenizer, std::size_t max_tokens)
    : tokenizer_(tokenizer), max_tokens_(max_tokens) {
  if (max_tokens_ == 0 || dynamic_cast<const tokenizer::BpeTokenizer*>(&tokenizer_) == nullptr) return;
  for (std::size_t id = 0; id < tokenizer_.vocab_size(); ++id) {
    const auto t = static_cast<TokenId>(id);
    if (!tokenizer_.is_end_of_generation(t)) continue;
    std::string text = tokenizer_.token_text(t);
    if (!text.empty() && tokenizer_.find_token(text) == t) delimiters_.push_back(std::move(text));
  }
  if (delimiters_.empty()) return;
  // The rule the cache rests on, checked once on a chat-shaped sample: the tokens of a text are
  // those of its pieces cut right after each end-of-turn token.
  const std::string& d = delimiters_.front();
  const std::string sample = "system\nYou are a helpful assistant." + d + "\nuser\nHello there,  world 12345!" + d +
                             "\n assistant\n\tHi " + d + d + " again";
  std::vector<TokenId> whole = tokenizer_.encode(sample, true), pieces;
  std::size_t from = 0;
  for (std::size_t at = sample.find(d); at != std::string::npos; at = sample.find(d, from)) {
    std::vector<TokenId> p = tokenizer_.encode(std::string_view(sample).substr(from, at + d.size() - from), true);
    pieces.insert(pieces.end(), p.begin(), p.end());
    from = at + d.size();
  }
  std::vector<TokenId> tail = tokenizer_.encode(std::string_view(sample).substr(from), true);
  pieces.insert(pieces.end(), tail.begin(), tail.end());
  enabled_ = whole == pieces;
}

std::vector<TokenId> PrefixTokenCache::encode_uncached(std::string_view text) const { return tokenizer_.encode(text, true); }

std::vector<TokenId> PrefixTokenCache::encode(std::string_view text) {
  if (!enabled_) return encode_uncached(text);
  // Where the text may be cut: right after each end-of-turn token.
  std::vector<std::size_t> cuts;
  for (const std::string& d : delimiters_) {
    for (std::size_t at = text.find(d); at != std::string_view::npos; at = text.find(d, at + d.size())) {
      cuts.push_back(at + d.size());
    }
  }
  if (cuts.empty()) return encode_uncached(text);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  // The hash of each prefix text[0, cut), in one pass.
  std::vector<Hash128> hashes(cuts.size());
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  std::size_t hashed = 0;
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    XXH3_128bits_update(state, text.data() + hashed, cuts[i] - hashed);
    hashed = cuts[i];
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    hashes[i] = {h.low64, h.high64};
  }
  XXH3_freeState(state);

  lookups_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<const std::vector<TokenId>> prefix;
  std::size_t next = 0;  // the first cut after the cached prefix
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = cuts.size(); i-- > 0;) {
      auto it = map_.find(hashes[i]);
      if (it == map_.end() || it->second->text_bytes != cuts[i]) continue;
      lru_.splice(lru_.begin(), lru_, it->second);
      prefix = it->second->tokens;
      next = i + 1;
      break;
    }
  }
  std::vector<TokenId> out;
  if (prefix) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    tokens_reused_.fetch_add(prefix->size(), std::memory_order_relaxed);
    out.reserve(prefix->size() + (text.size() - cuts[next - 1]) / 3 + 8);
    out = *prefix;
  }
  std::size_t from = next == 0 ? 0 : cuts[next - 1];
  for (std::size_t i = next; i < cuts.size(); ++i) {
    std::vector<TokenId> piece = encode_uncached(text.substr(from, cuts[i] - from));
    out.insert(out.end(), piece.begin(), piece.end());
    from = cuts[i];
  }
  if (next < cuts.size()) {  // a longer prefix than the cache held: keep it for the next turn
    insert(hashes.back(), cuts.back(), std::make_shared<const std::vector<TokenId>>(out));
  }
  std::vector<TokenId> tail = encode_uncached(text.substr(from));
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

void PrefixTokenCache::insert(const Hash128& key, std::size_t text_bytes, std::shared_ptr<const std::vector<TokenId>> tokens) {
  const std::size_t n = tokens->size();
  if (n > max_tokens_) return;
  std::lock_guard lock(mu_);
  if (map_.count(key)) return;  // another thread tokenized the same prefix meanwhile
  lru_.push_front(Entry{key, text_bytes, std::move(tokens)});
  map_.emplace(key, lru_.begin());
  tokens_held_ += n;
  while (tokens_held_ > max_tokens_ && !lru_.empty()) {
    tokens_held_ -= lru_.back().tokens->size();
    map_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

PrefixTokenCache::Stats PrefixTokenCache::stats() const {
  Stats s;
  s.lookups = lookups_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.tokens_reused = tokens_reused_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.entries = map_.size();
  s.tokens_held = tokens_held_;
  return s;
}

}  // namespace kvstash::router
