#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace kvstash::tokenizer {

SpecialTokenMatcher::SpecialTokenMatcher() : nodes_(1) {}

std::int32_t SpecialTokenMatcher::child(std::int32_t node, std::uint8_t byte) const {
  const auto& children = nodes_[static_cast<std::size_t>(node)].children;
  const auto it = std::lower_bound(children.begin(), children.end(), byte,
                                   [](const auto& entry, std::uint8_t b) { return entry.first < b; });
  return (it != children.end() && it->first == byte) ? it->second : -1;
}

void SpecialTokenMatcher::add(std::string_view text, std::int32_t id) {
  if (text.empty()) return;
  std::int32_t node = 0;
  for (char c : text) {
    const auto byte = static_cast<std::uint8_t>(c);
    std::int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<std::int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[static_cast<std::size_t>(node)].children;
      const auto it = std::lower_bound(children.begin(), children.end(), byte,
                                       [](const auto& entry, std::uint8_t b) { return entry.first < b; });
      children.insert(it, {byte, next});
    }
    node = next;
  }
  Node& end = nodes_[static_cast<std::size_t>(node)];
  if (end.id < 0) {
    end.id = id;
    ++count_;
  }
  starts_[static_cast<std::uint8_t>(text[0])] = true;
}

SpecialTokenMatcher::Match SpecialTokenMatcher::find(std::string_view text, std::size_t from) const {
  if (count_ == 0) return {};
  for (std::size_t start = from; start < text.size(); ++start) {
    if (!starts_[static_cast<std::uint8_t>(text[start])]) continue;
    Match best;
    std::int32_t node = 0;
    for (std::size_t i = start; i < text.size(); ++i) {
      node = child(node, static_cast<std::uint8_t>(text[i]));
      if (node < 0) break;
      const std::int32_t id = nodes_[static_cast<std::size_t>(node)].id;
      if (id >= 0) best = {start, i + 1 - start, id};
    }
    if (best.length > 0) return best;
  }
  return {};
}

std::vector<SpecialTokenMatcher::Match> find_specials(std::string_view text, const std::vector<TextSpan>& plain,
                                                      const SpecialTokenMatcher* outside,
                                                      const SpecialTokenMatcher* inside) {
  std::vector<SpecialTokenMatcher::Match> out;
  // Matches in [begin, end): the matcher sees the text only up to `end`, so none runs past it.
  const auto scan = [&](std::size_t begin, std::size_t end, const SpecialTokenMatcher* matcher) {
    if (matcher == nullptr || matcher->empty() || begin >= end) return;
    const std::string_view region = text.substr(0, end);
    std::size_t pos = begin;
    for (;;) {
      const SpecialTokenMatcher::Match m = matcher->find(region, pos);
      if (m.length == 0) break;
      out.push_back(m);
      pos = m.offset + m.length;
    }
  };
  std::size_t pos = 0;
  for (const TextSpan& span : plain) {
    const std::size_t begin = std::min(std::max(span.offset, pos), text.size());
    const std::size_t end = std::max(begin, std::min(span.offset + span.length, text.size()));
    scan(pos, begin, outside);
    scan(begin, end, inside);
    pos = end;
  }
  scan(pos, text.size(), outside);
  return out;
}

}  // namespace kvstash::tokenizer
