// The engine's side of the tiered KV store: prefetch on arrival (off the engine thread), copying
// prefetched chunks into pool blocks at admission, and handing newly computed chunks to the store.
//
// A request whose prompt has full chunks beyond what the pool holds waits in `loading` while a
// Prefetcher thread loads them; the running batch keeps stepping. It moves on to `waiting` when its
// load is done, or at its deadline (EngineOptions::store_load_timeout), when it recomputes instead:
// a slow or failed load costs time, never an error and never a wrong token.
#include <algorithm>
#include <cstring>

#include "engine/engine_impl.h"

namespace kvstash {

cache::ChunkMeta Engine::Impl::chunk_meta(const Sequence& seq, int chunk) const {
  const ModelConfig& c = model.config();
  cache::ChunkMeta m;
  if (chunk < static_cast<int>(seq.chunk_keys.size())) m.key = seq.chunk_keys[static_cast<std::size_t>(chunk)];
  m.model_fingerprint = model.fingerprint();
  m.kv_format = kv_format;
  m.token_count = static_cast<std::uint32_t>(options.chunk_tokens);
  m.first_position = static_cast<std::uint32_t>(chunk * options.chunk_tokens);
  m.n_layers = static_cast<std::uint32_t>(c.n_layers);
  m.n_kv_heads = static_cast<std::uint32_t>(c.n_kv_heads);
  m.head_dim = static_cast<std::uint32_t>(c.head_dim);
  m.element_type = static_cast<std::uint32_t>(gguf::TensorType::kF16);
  m.salted = !seq.request.cache_salt.empty();  // a tenant's chunk never leaves the node unasked
  return m;
}

cache::ChunkMeta Engine::Impl::tail_meta(const Sequence& seq, int chunk, int n_blocks) const {
  cache::ChunkMeta m = chunk_meta(seq, chunk);  // the shape fields; key and extent below
  const int bpc = options.chunk_tokens / pool.block_size();
  m.key = seq.block_keys[static_cast<std::size_t>(chunk * bpc + n_blocks - 1)];
  m.token_count = static_cast<std::uint32_t>(n_blocks * pool.block_size());
  m.first_position = static_cast<std::uint32_t>(chunk * options.chunk_tokens);
  return m;
}

void Engine::Impl::extend_chunk_keys(Sequence& seq, int n_chunks) const {
  if (static_cast<int>(seq.chunk_keys.size()) >= n_chunks) return;
  seq.chunk_keys = cache::chunk_keys(model.fingerprint(), kv_format, seq.request.cache_salt,
                                     std::span<const TokenId>(seq.tokens.data(), static_cast<std::size_t>(n_chunks) * options.chunk_tokens),
                                     static_cast<std::size_t>(options.chunk_tokens));
}

void Engine::Impl::pin_prefixes(Sequence& seq) {
  if (!options.prefix_cache) return;
  const int bs = pool.block_size(), bpc = options.chunk_tokens / bs;
  const int n_tokens = static_cast<int>(seq.tokens.size());
  for (const GenerationRequest::Pin& pin : seq.request.pins) {
    const int tokens = std::min(pin.tokens, n_tokens);
    if (tokens < bs || pin.ttl.count() <= 0) continue;
    seq.pinned_tokens = std::max(seq.pinned_tokens, tokens / bs * bs);
    const int full = tokens / options.chunk_tokens;
    const int blocks = tokens / bs;
    // The pool's blocks of the prefix (block_pool.h, pins): kept over unpinned cached blocks.
    extend_block_keys(seq, blocks);
    const std::size_t pool_pinned =
        pool.pin(std::span<const cache::ChunkKey>(seq.block_keys.data(), static_cast<std::size_t>(blocks)), pin.ttl);
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.pool_pinned_keys_total += static_cast<std::int64_t>(pool_pinned);
    }
    if (!options.kv_store) continue;
    const bool whole_next = (full + 1) * options.chunk_tokens <= n_tokens;
    extend_chunk_keys(seq, whole_next ? full + 1 : full);
    extend_block_keys(seq, blocks);
    std::vector<cache::ChunkKey> keys(seq.chunk_keys.begin(), seq.chunk_keys.begin() + full);
    if (blocks > full * bpc) {
      for (int b = full * bpc; b < blocks; ++b) keys.push_back(seq.block_keys[static_cast<std::size_t>(b)]);
      if (whole_next) keys.push_back(seq.chunk_keys[static_cast<std::size_t>(full)]);
    }
    const std::size_t pinned = options.kv_store->pin(keys, pin.ttl);
    std::lock_guard<std::mutex> lock(mu);
    stats.pinned_keys += static_cast<std::int64_t>(pinned);
  }
}

void Engine::Impl::enqueue_for_admission(std::unique_ptr<Sequence> seq, bool front) {
  if (!seq->request.pins.empty() && !front) pin_prefixes(*seq);  // once per request, not per preemption
  if (prefetcher) {
    // The full chunks beyond the pool's hits, leaving the last token to compute (its forward
    // pass gives the first generated token's logits).
    const int bpc = options.chunk_tokens / pool.block_size();
    const int max_blocks = (static_cast<int>(seq->tokens.size()) - 1) / pool.block_size();
    const int max_chunks = max_blocks / bpc;
    const int pool_hits = count_pool_hits(*seq);
    const int first = pool_hits / bpc;
    // Tails, so that at most one block of a stored prefix is computed again: where the run of
    // stored full chunks ends (a chunk the new prompt shares only the head of: the store finds its
    // leading blocks through prefix aliases), and after the last full chunk. Listed by chunk, each
    // chunk's shortest first. When the prompt ends on a chunk boundary, the longest after the last
    // full chunk is that whole chunk: install takes all its blocks but the one holding the last
    // token (a prompt exactly cached costs one block, not a chunk).
    extend_block_keys(*seq, max_blocks);
    std::vector<cache::ChunkMeta> tails;
    std::vector<std::size_t> tail_at;
    for (int c = first; c <= max_chunks; ++c) {
      const int n_max = c < max_chunks ? bpc - 1 : max_blocks - max_chunks * bpc;
      for (int k = 1; k <= n_max; ++k) {
        if (c * bpc + k <= pool_hits) continue;  // the pool has these blocks already
        tails.push_back(tail_meta(*seq, c, k));
        tail_at.push_back(static_cast<std::size_t>(c - first));
      }
    }
    const int prompt_chunks = static_cast<int>(seq->tokens.size()) / options.chunk_tokens;
    if (prompt_chunks > max_chunks && max_blocks > pool_hits) {
      extend_chunk_keys(*seq, max_chunks + 1);
      tails.push_back(chunk_meta(*seq, max_chunks));
      tail_at.push_back(static_cast<std::size_t>(max_chunks - first));
    }
    if (first < max_chunks || !tails.empty()) {
      extend_chunk_keys(*seq, max_chunks);
      std::vector<cache::ChunkMeta> metas;
      for (int c = first; c < max_chunks; ++c) metas.push_back(chunk_meta(*seq, c));
      seq->load_deadline = Clock::now() + options.store_load_timeout;
      seq->prefetch = prefetcher->submit(std::move(metas), std::move(tails), std::move(tail_at), seq->load_deadline);
      seq->prefetch_first_chunk = first;
      loading.push_back(std::move(seq));
      return;
    }
  }
  if (front) {
    waiting.push_front(std::move(seq));
  } else {
    waiting.push_back(std::move(seq));
  }
}

namespace {

// The bytes a finished load holds (its chunks and tail), until admission installs or drops them.
std::size_t held_bytes(const PrefetchJob& job) {
  std::size_t n = 0;
  for (const cache::LoadedChunk& c : job.chunks) n += c.bytes ? c.bytes->size() : 0;
  if (job.tail && job.tail->bytes) n += job.tail->bytes->size();
  return n;
}

}  // namespace

void Engine::Impl::poll_loads() {
  {
    std::lock_guard<std::mutex> lock(mu);
    load_finished = false;
  }
  const auto now = Clock::now();
  std::int64_t timed_out = 0, dropped = 0;
  // What the requests already waiting with a finished load hold: the bound counts them first.
  std::size_t held = 0;
  for (const auto& w : waiting) {
    if (w && w->prefetch && w->prefetch->done.load(std::memory_order_acquire)) held += held_bytes(*w->prefetch);
  }
  for (auto& s : loading) {
    const bool done = s->prefetch->done.load(std::memory_order_acquire);
    if (!done && now < s->load_deadline) continue;
    if (!done) {  // too slow: recompute instead; the job's result is dropped when it lands
      s->prefetch->abandoned.store(true, std::memory_order_relaxed);
      s->prefetch.reset();
      ++timed_out;
    } else if (const std::size_t bytes = held_bytes(*s->prefetch); held + bytes > options.max_prefetched_bytes) {
      // Holding it would pass the bound: many large loads queued behind a full batch must not
      // grow memory without limit. The request recomputes (same output).
      s->prefetch.reset();
      ++dropped;
    } else {
      held += bytes;
    }
    waiting.push_back(std::move(s));
  }
  loading.erase(std::remove(loading.begin(), loading.end(), nullptr), loading.end());
  std::lock_guard<std::mutex> lock(mu);
  stats.store_loads_timed_out += timed_out;
  stats.store_loads_dropped += dropped;
  stats.prefetched_bytes = static_cast<std::int64_t>(held);
}

int Engine::Impl::prefetched_blocks(const Sequence& seq) const {
  if (!seq.prefetch || !seq.prefetch->done.load(std::memory_order_acquire)) return 0;
  return static_cast<int>(held_bytes(*seq.prefetch) / pool.record_bytes());
}

int Engine::Impl::install_prefetched(Sequence& seq, int hits) {
  std::shared_ptr<PrefetchJob> job = std::move(seq.prefetch);
  if (!job || !job->done.load(std::memory_order_acquire)) return hits;
  const int bs = pool.block_size(), bpc = options.chunk_tokens / bs;
  const int first = seq.prefetch_first_chunk;
  // The pool may have lost blocks since the load started: a gap before the loaded run makes it
  // unusable (K is only valid at the positions it was made for, after its whole prefix).
  if (hits < first * bpc) return hits;
  // Copies n_blocks blocks of payload, the first at block index `at`, after the first `hits`;
  // false when the payload is not this pool's layout or the pool is out of blocks.
  const std::size_t block_bytes = pool.record_bytes();
  // Only the first n_use of them are installed (a whole last chunk: all but the last token's block).
  // Trust flows downhill: the chunk's own taint (its provenance) joins the sequence's, and each block
  // installed carries the sequence's (the KV it attends to is everything before it).
  auto install = [&](const cache::ChunkView& view, int at, int n_blocks, int n_use) {
    const std::span<const std::uint8_t> payload = view.payload;
    if (payload.size() != block_bytes * static_cast<std::size_t>(n_blocks)) return false;  // a miss
    seq.taint = merge_taint(seq.taint, taint_of(view.header.meta.provenance));
    for (int j = 0; j < n_use; ++j) {
      const int g = at + j;
      if (g < hits) continue;  // the pool already had this block
      auto b = pool.allocate();
      if (!b) return false;
      pool.copy_in(*b, payload.data() + static_cast<std::size_t>(j) * block_bytes);
      seq.block_table.push_back(*b);
      pool.set_taint(*b, seq.taint);
      pool.register_block(*b, seq.block_keys[static_cast<std::size_t>(g)]);
      hits = g + 1;
    }
    return true;
  };
  for (std::size_t i = 0; i < job->chunks.size(); ++i) {
    if (!install(job->chunks[i].view, (first + static_cast<int>(i)) * bpc, bpc, bpc)) return hits;
  }
  // The tail continues the loaded run (or the pool's blocks, if they reach into it).
  if (job->tail && hits >= (first + static_cast<int>(job->chunks.size())) * bpc) {
    // Found as a prefix alias, the payload is a longer chunk of which only the first use_blocks
    // are this prompt's.
    const int n_blocks = static_cast<int>(job->tail->view.header.meta.token_count) / bs;
    const int use_blocks = static_cast<int>(job->tail->use_tokens) / bs;
    const int max_blocks = (static_cast<int>(seq.tokens.size()) - 1) / bs;  // the last token is computed
    const int tail_start = (first + static_cast<int>(job->chunks.size())) * bpc, tail_chunk = tail_start / bpc;
    if (install(job->tail->view, tail_start, n_blocks, std::min(use_blocks, max_blocks - tail_start)) && use_blocks == bpc) {
      // A whole chunk the store holds already: not stored again once its last token is computed.
      seq.num_stored_chunks = std::max(seq.num_stored_chunks, tail_chunk + 1);
    }
  }
  return hits;
}

void Engine::Impl::store_tail(Sequence& seq) {
  if (!options.kv_store || !options.prefix_cache || seq.kv.compacted) return;
  const int bs = pool.block_size(), bpc = options.chunk_tokens / bs;
  store_full_chunks(seq);
  const int full_blocks = seq.num_computed_tokens / bs;
  const int chunk = full_blocks / bpc, n_blocks = full_blocks - chunk * bpc;
  if (n_blocks == 0 || full_blocks <= seq.stored_tail_end) return;
  extend_block_keys(seq, full_blocks);
  extend_chunk_keys(seq, chunk);
  if (store_blocks(seq, tail_meta(seq, chunk, n_blocks), chunk * bpc, n_blocks, chunk)) seq.stored_tail_end = full_blocks;
}

bool Engine::Impl::store_blocks(const Sequence& seq, const cache::ChunkMeta& meta, int first_block, int n_blocks,
                                int n_predecessors) {
  if (derives_from_banned(seq)) return false;
  const std::size_t block_bytes = pool.record_bytes();
  std::vector<std::uint8_t> payload(block_bytes * static_cast<std::size_t>(n_blocks));
  for (int j = 0; j < n_blocks; ++j) {
    // A block whose window layers' KV was freed cannot make a whole record (block_pool.h): the
    // chunk is not stored (a later request computes it; docs/chunk-format.md, kv_format v3).
    if (!pool.copy_out(seq.block_table[static_cast<std::size_t>(first_block + j)],
                       payload.data() + static_cast<std::size_t>(j) * block_bytes)) {
      std::lock_guard<std::mutex> lock(mu);
      ++stats.chunks_not_stored_window;
      return false;
    }
  }
  const std::span<const cache::ChunkKey> predecessors(seq.chunk_keys.data(), static_cast<std::size_t>(n_predecessors));
  // The block-chain keys at the end of each block but the last: the store writes a prefix alias
  // for each, so a prompt that shares only this chunk's first blocks still loads them.
  std::span<const cache::ChunkKey> leading;
  if (n_blocks > 1 && static_cast<int>(seq.block_keys.size()) >= first_block + n_blocks - 1) {
    leading = std::span<const cache::ChunkKey>(seq.block_keys.data() + first_block, static_cast<std::size_t>(n_blocks - 1));
  }
  // Its provenance: computed here, and unchecked when any KV it was computed on is (seq.taint).
  cache::ChunkMeta stored = meta;
  stored.provenance = provenance_of(seq.taint);
  if (!options.kv_store->store(stored, payload, predecessors, leading).is_ok()) return false;
  std::lock_guard<std::mutex> lock(mu);
  ++stats.chunks_stored;
  return true;
}

// Hands every newly computed full chunk to the store's write-behind queue (never blocks), with its
// predecessors so that every tier keeps a prefix's head longer than its tail.
void Engine::Impl::store_full_chunks(Sequence& seq) {
  if (!options.kv_store || seq.kv.compacted) return;  // compacted KV is not its prefix's
  const int bs = pool.block_size(), bpc = options.chunk_tokens / bs;
  const int full = seq.num_computed_tokens / options.chunk_tokens;
  if (seq.num_stored_chunks >= full) return;
  extend_chunk_keys(seq, full);
  extend_block_keys(seq, full * bpc);
  for (; seq.num_stored_chunks < full; ++seq.num_stored_chunks) {
    const int c = seq.num_stored_chunks;
    store_blocks(seq, chunk_meta(seq, c), c * bpc, bpc, c);
  }
}

}  // namespace kvstash
