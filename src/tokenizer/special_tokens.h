// Literal matching of special tokens (control and user-defined tokens such as "<|im_start|>")
// in text, so that encode can cut the text around them before pre-tokenizing.
//
// A byte trie of the tokens' texts: at each position the longest token that starts there wins,
// and the scan moves left to right, so overlapping tokens resolve leftmost-longest. A lookup at
// one position walks at most the longest token's length, so splitting a text costs
// O(length x longest special token) in the worst case and O(length) for ordinary text.
//
// Thread safety: immutable after the last add(); find() may run on many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace kvstash::tokenizer {

class SpecialTokenMatcher {
 public:
  SpecialTokenMatcher();

  // Adds a token's literal text. An empty text is ignored; a repeated text keeps the first id.
  void add(std::string_view text, std::int32_t id);
  bool empty() const { return count_ == 0; }

  struct Match {
    std::size_t offset = 0;  // where in the text the token starts
    std::size_t length = 0;  // its length in bytes
    std::int32_t id = -1;
  };
  // The first special token at or after `from` (leftmost, then longest); length 0 when none.
  Match find(std::string_view text, std::size_t from) const;

 private:
  struct Node {
    std::int32_t id = -1;  // the token ending here, or -1
    std::vector<std::pair<std::uint8_t, std::int32_t>> children;  // sorted by byte
  };
  std::int32_t child(std::int32_t node, std::uint8_t byte) const;

  std::vector<Node> nodes_;                 // nodes_[0] is the root
  std::array<bool, 256> starts_{};          // bytes some token starts with: a fast pre-check
  std::size_t count_ = 0;
};

// A byte range of a text [offset, offset + length).
struct TextSpan {
  std::size_t offset = 0;
  std::size_t length = 0;
};

// The special tokens to cut `text` at when some ranges of it are to stay text: outside the
// `plain` spans (sorted, not overlapping) the tokens of `outside`, inside them those of `inside`
// (nullptr: none), in text order. No match crosses a span's edge. For chat prompts: the
// template's markup becomes control tokens, a message's content never does.
std::vector<SpecialTokenMatcher::Match> find_specials(std::string_view text, const std::vector<TextSpan>& plain,
                                                      const SpecialTokenMatcher* outside,
                                                      const SpecialTokenMatcher* inside);

}  // namespace kvstash::tokenizer
