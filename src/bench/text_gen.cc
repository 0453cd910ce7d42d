#include "bench/text_gen.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>
#include <vector>

namespace kvstash::bench {
namespace {

// Common English words that BPE vocabularies hold whole; grouped so that sentences read like
// "determiner adjective noun verb ..." rather than a word salad.
constexpr std::array<std::string_view, 24> kDeterminers = {
    "the", "a", "this", "that", "every", "each", "some", "one", "our", "their", "my", "your",
    "his", "her", "its", "no", "any", "another", "the", "a", "the", "the", "a", "the"};
constexpr std::array<std::string_view, 48> kAdjectives = {
    "small", "large", "old", "new", "good", "great", "long", "short", "high", "low", "early",
    "late", "young", "real", "clear", "full", "open", "simple", "quiet", "strong", "free", "warm",
    "cold", "dark", "bright", "green", "red", "blue", "white", "black", "hard", "soft", "fast",
    "slow", "deep", "wide", "light", "heavy", "rich", "poor", "true", "main", "local", "common",
    "public", "whole", "final", "best"};
constexpr std::array<std::string_view, 64> kNouns = {
    "time", "year", "people", "way", "day", "man", "world", "life", "hand", "part", "child",
    "eye", "woman", "place", "work", "week", "case", "point", "number", "group", "problem",
    "fact", "house", "river", "road", "city", "book", "story", "water", "room", "money", "night",
    "door", "table", "tree", "field", "letter", "song", "voice", "light", "market", "school",
    "train", "garden", "window", "market", "answer", "question", "idea", "plan", "system",
    "program", "model", "paper", "street", "wall", "car", "land", "sea", "fire", "game", "king",
    "music", "team"};
constexpr std::array<std::string_view, 48> kVerbs = {
    "holds", "finds", "keeps", "makes", "takes", "gives", "shows", "brings", "leaves", "meets",
    "moves", "turns", "opens", "builds", "reads", "writes", "sees", "knows", "tells", "calls",
    "needs", "wants", "starts", "follows", "carries", "changes", "reaches", "sends", "covers",
    "helps", "watches", "plays", "runs", "joins", "loses", "wins", "pays", "sets", "hears",
    "lifts", "counts", "draws", "fills", "marks", "names", "packs", "paints", "saves"};
constexpr std::array<std::string_view, 16> kPrepositions = {
    "in", "on", "near", "by", "with", "for", "from", "under", "over", "after", "before",
    "behind", "across", "along", "into", "through"};
constexpr std::array<std::string_view, 12> kQuestionWords = {
    "What", "Why", "How", "Where", "When", "Which", "Who", "What", "How", "Why", "What", "How"};

template <std::size_t N>
std::string_view pick(Rng& rng, const std::array<std::string_view, N>& words) {
  return words[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(N) - 1))];
}

// Appends one word, capitalised when it starts a sentence; returns the tokens it adds (1).
int add_word(std::string& out, std::string_view word, bool capitalise) {
  if (!out.empty() && out.back() != '\n') out += ' ';
  const std::size_t at = out.size();
  out += word;
  if (capitalise) out[at] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[at])));
  return 1;
}

// The words of one clause in order: determiner adjective noun verb determiner noun
// [preposition determiner adjective noun].
std::vector<std::string_view> clause(Rng& rng) {
  std::vector<std::string_view> words = {pick(rng, kDeterminers), pick(rng, kAdjectives),
                                         pick(rng, kNouns),       pick(rng, kVerbs),
                                         pick(rng, kDeterminers), pick(rng, kNouns)};
  if (rng.uniform() < 0.6) {
    for (auto w : {pick(rng, kPrepositions), pick(rng, kDeterminers), pick(rng, kAdjectives),
                   pick(rng, kNouns)}) {
      words.push_back(w);
    }
  }
  return words;
}

}  // namespace

std::string pseudo_english(Rng& rng, int approx_tokens) {
  std::string out;
  int tokens = 0;
  while (tokens < approx_tokens) {
    const auto words = clause(rng);
    bool first = true;
    for (auto word : words) {
      if (tokens >= approx_tokens - 1) break;  // keep one token for the full stop
      tokens += add_word(out, word, first);
      first = false;
    }
    out += '.';
    ++tokens;
  }
  return out;
}

std::string pseudo_question(Rng& rng, int approx_tokens) {
  std::string out;
  int tokens = add_word(out, pick(rng, kQuestionWords), false);
  const int target = std::max(approx_tokens, 6);
  while (tokens < target - 1) {
    for (auto word : clause(rng)) {
      if (tokens >= target - 1) break;
      tokens += add_word(out, word, false);
    }
  }
  out += '?';
  return out;
}

int approx_token_count(const std::string& text) {
  int words = 0;
  int punctuation = 0;
  bool in_word = false;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c >= 0x80) {
      if (!in_word) ++words;
      in_word = true;
    } else {
      in_word = false;
      if (std::ispunct(c)) ++punctuation;
    }
  }
  return std::max(words + punctuation, static_cast<int>(text.size() / 6));
}

}  // namespace kvstash::bench
