#include "server/semantic_cache.h"

#include <hnswlib/hnswlib.h>

#include <bit>
#include <cctype>

#include "common/sha256.h"
#include "server/sampling_key.h"

namespace kvstash::server {
namespace {

constexpr std::string_view kNamespaceDomain = "kvstash-semantic-ns-v1";
// hnswlib's graph: M links per node and the candidate lists at build and search time (its
// documented defaults are 16 and 200; ef 64 keeps recall near 1 for the few neighbours asked).
constexpr std::size_t kHnswM = 16;
constexpr std::size_t kHnswEfConstruction = 200;
constexpr std::size_t kHnswEfSearch = 64;
constexpr std::size_t kInitialCapacity = 256;  // grown by doubling up to max_entries_per_namespace

// What one slot of a namespace's capacity costs: its vector, its level-0 links (2M of them, each a
// 4-byte id, plus the count) and hnswlib's per-element bookkeeping (label, lock, level list).
std::size_t slot_bytes(std::size_t dims) {
  return dims * sizeof(float) + (2 * kHnswM + 1) * sizeof(std::uint32_t) + 64;
}

void update_string(Sha256& h, std::string_view s) {
  h.update_u32(static_cast<std::uint32_t>(s.size()));
  h.update(s);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(unsigned char c) { return std::isalnum(c) || c >= 0x80; }
// Characters that may join digits into one number literal ("2+3", "1,000.5", "(4*5)").
bool joins_numbers(char c) { return std::string_view("0123456789.,+-*/^%=<>() ").find(c) != std::string_view::npos; }

// Quote pairs: ASCII double quote, backtick, and the UTF-8 curly quotes and guillemets.
struct QuotePair {
  std::string_view open, close;
};
constexpr QuotePair kQuotes[] = {{"\"", "\""}, {"`", "`"}, {"\xE2\x80\x9C", "\xE2\x80\x9D"},
                                 {"\xE2\x80\x98", "\xE2\x80\x99"}, {"\xC2\xAB", "\xC2\xBB"}};

}  // namespace

std::vector<std::string> extract_literals(std::string_view text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < text.size()) {
    // A quoted string: its content byte for byte (an unterminated one runs to the end).
    bool quoted = false;
    for (const QuotePair& q : kQuotes) {
      if (text.substr(i, q.open.size()) != q.open) continue;
      const std::size_t start = i + q.open.size();
      const std::size_t end = text.find(q.close, start);
      out.push_back("q:" + std::string(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
      i = end == std::string_view::npos ? text.size() : end + q.close.size();
      quoted = true;
      break;
    }
    if (quoted) continue;
    // A single quote opens a string only where it cannot be an apostrophe (not after a letter).
    if (text[i] == '\'' && (i == 0 || !is_word(static_cast<unsigned char>(text[i - 1])))) {
      std::size_t end = i + 1;
      while (end < text.size() &&
             !(text[end] == '\'' && (end + 1 == text.size() || !is_word(static_cast<unsigned char>(text[end + 1]))))) {
        ++end;
      }
      out.push_back("q:" + std::string(text.substr(i + 1, end - i - 1)));
      i = std::min(text.size(), end + 1);
      continue;
    }
    if (is_digit(text[i])) {
      // The run of number characters around this digit, spaces dropped, trailing punctuation cut.
      std::size_t start = i;
      while (start > 0 && joins_numbers(text[start - 1]) && text[start - 1] != ' ') --start;
      std::size_t end = i;
      while (end < text.size() && joins_numbers(text[end])) ++end;
      std::string number;
      for (std::size_t k = start; k < end; ++k) {
        if (text[k] != ' ') number += text[k];
      }
      while (!number.empty() && !is_digit(number.back()) && number.back() != ')' && number.back() != '%') number.pop_back();
      out.push_back("n:" + number);
      i = end;
      continue;
    }
    ++i;
  }
  return out;
}

std::optional<SemanticQuery> semantic_query(const ParsedRequest& parsed, const GenerationRequest& request,
                                            const Tokenizer& tokenizer, const cache::ModelFingerprint& fingerprint,
                                            const std::string& engine_config, std::string* why) {
  auto skip = [why](const char* reason) -> std::optional<SemanticQuery> {
    *why = reason;
    return std::nullopt;
  };
  const SamplingParams& s = request.sampling;
  if (s.temperature != 0.0f) return skip("sampled");
  if (parsed.seed_given) return skip("seed");
  if (parsed.logprobs || parsed.top_logprobs > 0) return skip("logprobs");
  // The namespace below hashes roles and contents only: tools and a history's tool calls would
  // not separate two conversations, so tool conversations are never near-duplicates.
  if (parsed.tools.has_tools()) return skip("tools");
  for (const ChatMessage& m : parsed.messages) {
    if (!m.tool_calls.empty() || !m.tool_call_id.empty() || !m.name.empty()) return skip("tools");
  }
  std::string_view text;
  Sha256 h;
  h.update(kNamespaceDomain);
  h.update(fingerprint.data(), fingerprint.size());
  update_string(h, request.cache_salt);
  update_string(h, engine_config);
  if (parsed.endpoint == Endpoint::kChatCompletions) {
    if (parsed.messages.empty() || parsed.messages.back().role != "user") return skip("last message not user");
    text = parsed.messages.back().content;
    h.update_u32(0);
    h.update_u32(static_cast<std::uint32_t>(parsed.messages.size() - 1));
    for (std::size_t i = 0; i + 1 < parsed.messages.size(); ++i) {
      update_string(h, parsed.messages[i].role);
      update_string(h, parsed.messages[i].content);
    }
  } else {
    if (parsed.prompt_is_tokens) return skip("token prompt");
    text = parsed.prompt_text;
    h.update_u32(1);
  }
  h.update_u32(std::bit_cast<std::uint32_t>(s.temperature));
  h.update_u32(static_cast<std::uint32_t>(s.top_k));
  h.update_u32(std::bit_cast<std::uint32_t>(s.top_p));
  h.update_u32(parsed.max_tokens ? static_cast<std::uint32_t>(*parsed.max_tokens) : 0xFFFFFFFFu);
  h.update_u32(request.stop_at_end_of_generation ? 1 : 0);
  h.update_u32(static_cast<std::uint32_t>(request.stop_tokens.size()));
  for (TokenId t : request.stop_tokens) h.update_u32(static_cast<std::uint32_t>(t));
  h.update_u32(static_cast<std::uint32_t>(parsed.stop.size()));
  for (const std::string& stop : parsed.stop) update_string(h, stop);
  h.update_u32(static_cast<std::uint32_t>(request.kv_budget));
  hash_sampling_knobs(h, s);  // a near-duplicate answers only under the same knobs and grammar
  SemanticQuery q;
  q.ns.bytes = h.finish();
  q.text_tokens = tokenize(tokenizer, text, /*add_special=*/false, /*parse_special=*/false);
  if (q.text_tokens.empty()) return skip("empty text");
  q.literals = extract_literals(text);
  return q;
}

struct SemanticIndex::Namespace {
  explicit Namespace(std::size_t d) : dims(d), space(d), graph(&space, kInitialCapacity, kHnswM, kHnswEfConstruction) {
    graph.setEf(kHnswEfSearch);
  }
  std::size_t dims;
  hnswlib::InnerProductSpace space;
  hnswlib::HierarchicalNSW<float> graph;
  std::size_t capacity = kInitialCapacity;
  struct Entry {
    cache::ChunkKey record_key;
    std::vector<std::string> literals;
  };
  std::vector<Entry> entries;  // by hnswlib label
  std::map<cache::ChunkKey, std::size_t> by_key;
  std::size_t bytes() const { return capacity * slot_bytes(dims); }
  mutable std::uint64_t last_used = 0;  // SemanticIndex::clock_ at the last add or find
};

bool SemanticIndex::evict_one_locked(const Namespace* keep) {
  auto victim = namespaces_.end();
  for (auto it = namespaces_.begin(); it != namespaces_.end(); ++it) {
    if (it->second.get() == keep) continue;
    if (victim == namespaces_.end() || it->second->last_used < victim->second->last_used) victim = it;
  }
  if (victim == namespaces_.end()) return false;
  bytes_ -= victim->second->bytes();
  entries_ -= victim->second->entries.size();
  namespaces_.erase(victim);
  ++evicted_;
  return true;
}

SemanticIndex::SemanticIndex(SemanticCacheOptions options) : options_(std::move(options)) {}
SemanticIndex::~SemanticIndex() = default;

bool SemanticIndex::add(const cache::ChunkKey& ns, const cache::ChunkKey& record_key, std::span<const float> embedding,
                        std::vector<std::string> literals) {
  if (embedding.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) {
    // Room for a new namespace: the least recently used ones go (never refuse new tenants forever).
    const std::size_t need = kInitialCapacity * slot_bytes(embedding.size());
    if (need > options_.max_bytes || options_.max_namespaces == 0) return false;
    while (namespaces_.size() >= options_.max_namespaces || bytes_ + need > options_.max_bytes) {
      if (!evict_one_locked(nullptr)) break;
    }
    try {
      it = namespaces_.emplace(ns, std::make_unique<Namespace>(embedding.size())).first;
    } catch (const std::exception&) {
      return false;  // hnswlib reports allocation failures by exception
    }
    bytes_ += it->second->bytes();
  }
  Namespace& n = *it->second;
  n.last_used = ++clock_;
  if (n.dims != embedding.size()) return false;
  if (n.by_key.count(record_key)) return true;
  if (n.entries.size() >= options_.max_entries_per_namespace) return false;
  try {
    if (n.entries.size() >= n.capacity) {
      const std::size_t grown = std::min(options_.max_entries_per_namespace, n.capacity * 2);
      const std::size_t extra = (grown - n.capacity) * slot_bytes(n.dims);
      while (bytes_ + extra > options_.max_bytes) {
        if (!evict_one_locked(&n)) return false;  // this namespace alone fills the bound
      }
      n.graph.resizeIndex(grown);
      bytes_ += extra;
      n.capacity = grown;
    }
    n.graph.addPoint(embedding.data(), n.entries.size());
  } catch (const std::exception&) {
    return false;  // hnswlib reports allocation failures by exception; not indexed
  }
  n.by_key.emplace(record_key, n.entries.size());
  n.entries.push_back({record_key, std::move(literals)});
  ++entries_;
  return true;
}

std::vector<SemanticIndex::Candidate> SemanticIndex::find(const cache::ChunkKey& ns, std::span<const float> embedding,
                                                          const std::vector<std::string>& literals,
                                                          int* refused_by_literals) const {
  std::vector<Candidate> out;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return out;
  const Namespace& n = *it->second;
  n.last_used = ++clock_;
  if (n.entries.empty() || n.dims != embedding.size()) return out;
  std::vector<std::pair<float, hnswlib::labeltype>> near;
  try {
    near = n.graph.searchKnnCloserFirst(embedding.data(), std::min<std::size_t>(options_.candidates, n.entries.size()));
  } catch (const std::exception&) {
    return out;
  }
  for (const auto& [distance, label] : near) {
    const float cosine = 1.0f - distance;  // InnerProductSpace: distance = 1 - <a, b>
    if (cosine < options_.threshold) break;
    const Namespace::Entry& e = n.entries[label];
    if (e.literals != literals) {
      if (refused_by_literals) ++*refused_by_literals;
      continue;
    }
    out.push_back({e.record_key, cosine});
  }
  return out;
}

std::size_t SemanticIndex::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::size_t SemanticIndex::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

std::uint64_t SemanticIndex::evicted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evicted_;
}

}  // namespace kvstash::server
