#include "grammar/token_matcher.h"

#include <algorithm>
#include <cstring>

namespace kvstash::grammar {
namespace {

constexpr std::int32_t kFull = -3;  // step(): the state table is full

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

Status full_error(std::size_t max_states) {
  return resource_exhausted("the grammar's state table is full (" + std::to_string(max_states) +
                            " states): the output nests deeper than this grammar can follow");
}

}  // namespace

std::shared_ptr<const TokenVocabulary> TokenVocabulary::create(std::vector<std::string> token_bytes,
                                                               std::vector<TokenIndex> end_of_generation) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  v->token_bytes_ = std::move(token_bytes);
  v->end_of_generation_ = std::move(end_of_generation);
  // Breadth first over the tokens sorted by their bytes: a node is a run of them sharing a prefix,
  // its children the sub-runs by the next byte, numbered as they are queued, so each node's
  // children are contiguous. Work: one look at each byte of each token (the per-node child lists
  // this replaced took 4 times as long on 151,936 tokens: 350 ms against 80 ms).
  std::vector<TokenIndex> order;
  for (std::size_t t = 0; t < v->token_bytes_.size(); ++t) {
    if (!v->token_bytes_[t].empty()) order.push_back(static_cast<TokenIndex>(t));  // control tokens: never allowed
  }
  const auto& bytes = v->token_bytes_;
  std::sort(order.begin(), order.end(), [&bytes](TokenIndex a, TokenIndex b) {
    return bytes[static_cast<std::size_t>(a)] < bytes[static_cast<std::size_t>(b)];
  });
  struct Run {
    std::uint32_t lo, hi, depth;
  };
  std::vector<Run> nodes{{0, static_cast<std::uint32_t>(order.size()), 0}};
  auto byte_at = [&](std::uint32_t i, std::uint32_t d) {
    return static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(order[i])][d]);
  };
  for (std::size_t id = 0; id < nodes.size(); ++id) {
    const Run run = nodes[id];
    v->first_child_.push_back(static_cast<std::uint32_t>(v->child_.size()));
    v->first_token_.push_back(static_cast<std::uint32_t>(v->tokens_.size()));
    std::uint32_t i = run.lo;
    // The tokens that end here sort first in the run (a prefix sorts before its extensions).
    while (i < run.hi && bytes[static_cast<std::size_t>(order[i])].size() == run.depth) v->tokens_.push_back(order[i++]);
    while (i < run.hi) {
      const std::uint8_t b = byte_at(i, run.depth);
      std::uint32_t j = i + 1;
      while (j < run.hi && byte_at(j, run.depth) == b) ++j;
      v->child_byte_.push_back(b);
      v->child_.push_back(static_cast<std::uint32_t>(nodes.size()));
      nodes.push_back({i, j, run.depth + 1});
      i = j;
    }
  }
  v->first_child_.push_back(static_cast<std::uint32_t>(v->child_.size()));
  v->first_token_.push_back(static_cast<std::uint32_t>(v->tokens_.size()));
  return v;
}

std::size_t CompiledGrammar::FrameHash::operator()(const Frame& f) const {
  return mix(mix(mix(mix(0, f.parent), f.rule), f.alt), f.pos);
}

std::size_t CompiledGrammar::VecHash::operator()(const std::vector<std::uint32_t>& v) const {
  std::uint64_t h = v.size();
  for (std::uint32_t x : v) h = mix(h, x);
  return h;
}

Expected<std::shared_ptr<CompiledGrammar>> CompiledGrammar::create(Grammar grammar,
                                                                   std::shared_ptr<const TokenVocabulary> vocabulary,
                                                                   std::string key, const CompiledGrammarOptions& options) {
  if (Status st = grammar.check(); !st) return st;
  auto g = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  g->grammar_ = std::move(grammar);
  g->vocabulary_ = std::move(vocabulary);
  g->key_ = std::move(key);
  g->options_ = options;
  std::lock_guard<std::mutex> lock(g->mu_);
  g->frames_.push_back(Frame{0, 0, 0, 0});  // id 0: the bottom of every stack
  g->expansions_.emplace_back();
  g->expanded_.push_back(true);
  std::vector<std::uint32_t> start;
  for (std::uint32_t a = 0; a < g->grammar_.rules[0].alternatives.size(); ++a) g->expand(g->frame(0, 0, a, 0), start);
  g->initial_ = g->intern_state(std::move(start));
  if (g->initial_ < 0) return invalid_argument("the grammar matches nothing");
  return g;
}

std::uint32_t CompiledGrammar::frame(std::uint32_t parent, std::uint32_t rule, std::uint32_t alt, std::uint32_t pos) const {
  const Frame f{parent, rule, alt, pos};
  auto [it, inserted] = frame_ids_.try_emplace(f, static_cast<std::uint32_t>(frames_.size()));
  if (inserted) {
    frames_.push_back(f);
    expansions_.emplace_back();
    expanded_.push_back(false);
  }
  return it->second;
}

// The stacks a frame stands for once every rule reference at its top is expanded: each one's top
// is a byte class to match, or 0 (the stack emptied: the input so far is a sentence).
void CompiledGrammar::expand(std::uint32_t frame_id, std::vector<std::uint32_t>& out) const {
  if (expanded_[frame_id]) {
    out.insert(out.end(), expansions_[frame_id].begin(), expansions_[frame_id].end());
    return;
  }
  std::vector<std::uint32_t> result;
  const Frame f = frames_[frame_id];  // a copy: frame() may grow frames_
  const Sequence& alt = grammar_.rules[f.rule].alternatives[f.alt];
  if (f.pos == alt.size()) {
    if (f.parent == 0) {
      result.push_back(0);
    } else {
      expand(f.parent, result);
    }
  } else if (alt[f.pos].kind == Element::Kind::kBytes) {
    result.push_back(frame_id);
  } else {
    // A reference in tail position returns straight to this frame's parent.
    const std::uint32_t callee = alt[f.pos].index;
    const std::uint32_t ret = f.pos + 1 == alt.size() ? f.parent : frame(f.parent, f.rule, f.alt, f.pos + 1);
    for (std::uint32_t a = 0; a < grammar_.rules[callee].alternatives.size(); ++a) expand(frame(ret, callee, a, 0), result);
  }
  std::sort(result.begin(), result.end());
  result.erase(std::unique(result.begin(), result.end()), result.end());
  out.insert(out.end(), result.begin(), result.end());
  expansions_[frame_id] = std::move(result);
  expanded_[frame_id] = true;
}

// The stacks after the byte class on top of `top` matched.
void CompiledGrammar::continue_after(std::uint32_t top, std::vector<std::uint32_t>& out) const {
  const Frame f = frames_[top];
  const Sequence& alt = grammar_.rules[f.rule].alternatives[f.alt];
  if (f.pos + 1 < alt.size()) {
    expand(frame(f.parent, f.rule, f.alt, f.pos + 1), out);
  } else if (f.parent == 0) {
    out.push_back(0);
  } else {
    expand(f.parent, out);
  }
}

std::int32_t CompiledGrammar::intern_state(std::vector<std::uint32_t> stacks) const {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty()) return kDead;
  if (auto it = state_ids_.find(stacks); it != state_ids_.end()) return it->second;
  if (states_.size() >= options_.max_states || frames_.size() >= options_.max_states * 16) {
    full_ = true;
    return kFull;
  }
  State s;
  s.accepts = stacks.front() == 0;
  s.stacks = stacks;
  states_.push_back(std::move(s));
  const auto id = static_cast<std::int32_t>(states_.size() - 1);
  state_ids_.emplace(std::move(stacks), id);
  return id;
}

std::int32_t CompiledGrammar::step(std::int32_t state, std::uint8_t byte) const {
  State* s = &states_[static_cast<std::size_t>(state)];
  if (!s->next) {
    s->next.reset(new std::int32_t[256]);
    std::fill(s->next.get(), s->next.get() + 256, kUnknown);
  }
  if (s->next[byte] != kUnknown) return s->next[byte];
  std::vector<std::uint32_t> out;
  for (std::uint32_t top : s->stacks) {
    if (top == 0) continue;
    const Frame& f = frames_[top];
    const Element& e = grammar_.rules[f.rule].alternatives[f.alt][f.pos];
    if (grammar_.classes[e.index].has(byte)) continue_after(top, out);
  }
  const std::int32_t next = intern_state(std::move(out));
  if (next != kFull) states_[static_cast<std::size_t>(state)].next[byte] = next;  // states_ may have moved
  return next;
}

Status CompiledGrammar::walk_mask(std::int32_t state, std::vector<std::uint64_t>& mask) const {
  const TokenVocabulary& v = *vocabulary_;
  mask.assign((v.size() + 63) / 64, 0);
  struct Item {
    std::uint32_t node;
    std::int32_t state;
  };
  std::vector<Item> todo{{0, state}};
  while (!todo.empty()) {
    const Item it = todo.back();
    todo.pop_back();
    for (std::uint32_t c = v.first_child_[it.node]; c < v.first_child_[it.node + 1]; ++c) {
      const std::int32_t next = step(it.state, v.child_byte_[c]);
      if (next == kDead) continue;
      if (next == kFull) return full_error(options_.max_states);
      const std::uint32_t child = v.child_[c];
      for (std::uint32_t k = v.first_token_[child]; k < v.first_token_[child + 1]; ++k) {
        const auto t = static_cast<std::size_t>(v.tokens_[k]);
        mask[t >> 6] |= std::uint64_t{1} << (t & 63);
      }
      if (v.first_child_[child] < v.first_child_[child + 1]) todo.push_back({child, next});
    }
  }
  ++mask_walks_;
  return {};
}

Status CompiledGrammar::check_state(MatcherState state) const {
  if (state < 0 || static_cast<std::size_t>(state) >= states_.size()) return invalid_argument("not a state of this grammar");
  return {};
}

Status CompiledGrammar::allowed_tokens(MatcherState state, std::vector<std::uint64_t>& mask) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status st = check_state(state); !st) return st;
  if (const auto& cached = states_[static_cast<std::size_t>(state)].mask) {
    mask.assign(cached->begin(), cached->end());
    return {};
  }
  if (Status st = walk_mask(state, mask); !st) return st;
  const std::size_t bytes = mask.size() * sizeof(std::uint64_t);
  if (mask_bytes_ + bytes > options_.max_mask_bytes) {
    for (State& s : states_) s.mask.reset();
    mask_bytes_ = 0;
  }
  states_[static_cast<std::size_t>(state)].mask = std::make_shared<const std::vector<std::uint64_t>>(mask);
  mask_bytes_ += bytes;
  return {};
}

bool CompiledGrammar::accepts(MatcherState state) const {
  std::lock_guard<std::mutex> lock(mu_);
  return check_state(state) && states_[static_cast<std::size_t>(state)].accepts;
}

Expected<MatcherState> CompiledGrammar::advance_bytes(MatcherState state, std::string_view bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status st = check_state(state); !st) return st;
  for (char ch : bytes) {
    state = step(state, static_cast<std::uint8_t>(ch));
    if (state == kFull) return full_error(options_.max_states);
    if (state == kDead) return invalid_argument("the bytes leave the grammar");
  }
  return state;
}

Expected<MatcherState> CompiledGrammar::advance(MatcherState state, TokenIndex token) const {
  if (token < 0 || static_cast<std::size_t>(token) >= vocabulary_->size() || vocabulary_->bytes(token).empty()) {
    return invalid_argument("token " + std::to_string(token) + " has no bytes for the grammar to match");
  }
  Expected<MatcherState> next = advance_bytes(state, vocabulary_->bytes(token));
  if (!next && next.status().code() == StatusCode::kInvalidArgument) {
    return invalid_argument("token " + std::to_string(token) + " leaves the grammar");
  }
  return next;
}

CompiledGrammarStats CompiledGrammar::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CompiledGrammarStats s;
  s.states = states_.size();
  s.frames = frames_.size();
  for (const State& st : states_) s.cached_masks += st.mask ? 1 : 0;
  s.mask_walks = mask_walks_;
  return s;
}

}  // namespace kvstash::grammar
