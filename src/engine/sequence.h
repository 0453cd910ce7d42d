// One request's state inside the engine: its tokens, its block table and how far its KV has been
// computed. Owned by the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/chunk_key.h"
#include "engine/engine.h"
#include "engine/block_pool.h"
#include "engine/draft_model.h"
#include "engine/kv_compactor.h"
#include "engine/prefetcher.h"
#include "engine/sampler.h"
#include "engine/speculative.h"

namespace kvstash {

using Clock = std::chrono::steady_clock;

struct Sequence {
  Sequence(std::uint64_t id, GenerationRequest req, TokenCallback cb)
      : id(id), request(std::move(req)), on_token(std::move(cb)), sampler(request.sampling, end_tokens(request)) {
    tokens = request.prompt;
    n_prompt = static_cast<int>(tokens.size());
  }

  // The tokens that end this request, which a grammar allows only where its output is complete:
  // the stop tokens, and the vocabulary's end-of-generation tokens unless ignore_eos.
  static std::vector<TokenId> end_tokens(const GenerationRequest& r) {
    std::vector<TokenId> out = r.stop_tokens;
    if (r.sampling.grammar && r.stop_at_end_of_generation) {
      const auto& eog = r.sampling.grammar->vocabulary().end_of_generation();
      out.insert(out.end(), eog.begin(), eog.end());
    }
    return out;
  }

  std::uint64_t id;      // the request's; every choice of a request shares it (cancel() ends all)
  int choice = 0;        // which of the request's n choices (engine/fork.cc); 0 until the fork
  // A request with n > 1 forks once, when its prompt's KV is complete: until then it stands for
  // all n choices (its final event, if it ends before, is sent once per choice).
  bool forked = false;
  GenerationRequest request;
  TokenCallback on_token;
  Sampler sampler;
  Clock::time_point submitted = Clock::now();

  std::vector<TokenId> tokens;  // prompt, then generated tokens
  int n_prompt = 0;
  int n_generated() const { return static_cast<int>(tokens.size()) - n_prompt; }

  std::vector<std::int32_t> block_table;
  // Leading blocks whose window layers' KV this sequence no longer needs (its window starts after
  // them) and whose window holder it gave up (BlockPool::drop_window); 0 without window layers.
  int window_dropped = 0;
  int num_computed_tokens = 0;  // leading tokens whose KV has been computed (the next position)
  int num_slots = 0;            // KV slots they occupy: num_computed_tokens until a compaction
  int kv_budget = 0;            // KV slots this sequence may hold; 0 = no budget
  KvCompactionState kv;         // with a budget: slot positions, query statistics
  int num_cached_tokens = 0;    // prompt tokens whose KV was reused, not computed
  int pinned_tokens = 0;        // the longest pinned prefix, in whole blocks' tokens (pin_prefixes)
  // The taint of every KV this sequence attends to (block_pool.h): null while all of it is
  // trusted. Set at admission from its pool hits and loaded chunks; what it computes inherits it.
  KvTaint taint;
  // Prefix keys of the leading full blocks (block_keys[i] names tokens [0, (i+1) * block_size)),
  // each registered in the pool once computed.
  std::vector<cache::ChunkKey> block_keys;
  int num_registered_blocks = 0;
  std::vector<cache::ChunkKey> chunk_keys;  // the tiered store's keys, chunk_tokens per key
  int num_stored_chunks = 0;                // leading chunks known to be in the store (or sent)
  int stored_tail_end = 0;                  // blocks [0, stored_tail_end) stored, the last ones as a tail
  bool admitted_before = false;  // set at first admission; a preempted sequence keeps its counts
  // The store load started for it while it waits (engine_store.cc); null when none.
  std::shared_ptr<PrefetchJob> prefetch;
  int prefetch_first_chunk = 0;      // the chunk index the prefetched run starts at
  Clock::time_point load_deadline;   // past it, the sequence stops waiting and recomputes

  // Speculative decoding (engine/speculative.h): this step's drafted tokens (verified after the
  // forward pass, then cleared; never in `tokens` until accepted) and the adaptive draft length.
  std::vector<TokenId> draft;
  SpecState spec;
  DraftKv draft_kv;  // DraftKind::kModel: the draft model's KV of this sequence (engine/draft_model.h)

  double ttft_s = -1.0;        // < 0 until the first token is out
  bool cancelled = false;
  bool finished = false;  // its final event is out; removed from the running batch
  // Choices this sequence still stands for: the request's n until the fork, then 1.
  int choices_held() const { return forked ? 1 : request.n; }
  int pending() const { return static_cast<int>(tokens.size()) - num_computed_tokens; }
};

}  // namespace kvstash
