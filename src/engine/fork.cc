// Forks for n > 1: a request's choices share its prompt's KV.
//
// A request with n > 1 runs as one sequence until its prompt's KV is complete (prefilled once,
// with the prefix cache and the store like any other). At its first sampling, fork_choices makes
// n - 1 more sequences with the same tokens, counters and block table; each block gains one
// reference per choice. Full blocks are never written again, so sharing them is safe; the last
// partial block receives each choice's own tokens, so the first write into it goes to a private
// copy (unshare_write_block, called by the scheduler before every forward). The last holder
// writes the original. From then on every choice is an ordinary sequence: it may be preempted
// (dropping only its own references), cancelled (with its request) or finish on its own.
//
// Thread safety: engine thread only, like everything in Engine::Impl.
#include <cstring>
#include <vector>

#include "engine/engine_impl.h"

namespace kvstash {

std::uint64_t choice_seed(std::uint64_t seed, int index) {
  if (index == 0) return seed;
  // SplitMix64 (Steele, Lea, Flood 2014): a bijective mixer, so distinct (seed + i) stay distinct.
  std::uint64_t z = seed + static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<std::unique_ptr<Sequence>> Engine::Impl::fork_choices(Sequence& parent) {
  std::vector<std::unique_ptr<Sequence>> children;
  const int n = parent.request.n;
  parent.forked = true;
  for (int i = 1; i < n; ++i) {
    GenerationRequest req = parent.request;
    req.sampling.seed = choice_seed(parent.request.sampling.seed, i);
    auto child = std::make_unique<Sequence>(parent.id, std::move(req), parent.on_token);
    Sequence& c = *child;
    c.choice = i;
    c.forked = true;
    c.submitted = parent.submitted;
    c.tokens = parent.tokens;
    c.block_table = parent.block_table;
    c.window_dropped = parent.window_dropped;  // it needs the window parts its parent needs
    for (std::size_t b = 0; b < c.block_table.size(); ++b) {
      pool.retain(c.block_table[b], static_cast<int>(b) >= c.window_dropped);
    }
    c.num_computed_tokens = parent.num_computed_tokens;
    c.num_slots = parent.num_slots;
    c.kv_budget = parent.kv_budget;
    c.kv = parent.kv;
    c.num_cached_tokens = parent.num_cached_tokens;
    c.pinned_tokens = parent.pinned_tokens;
    c.taint = parent.taint;
    c.block_keys = parent.block_keys;
    c.num_registered_blocks = parent.num_registered_blocks;
    c.chunk_keys = parent.chunk_keys;
    c.num_stored_chunks = parent.num_stored_chunks;
    c.stored_tail_end = parent.stored_tail_end;
    c.admitted_before = true;
    c.ttft_s = parent.ttft_s;
    children.push_back(std::move(child));
  }
  std::lock_guard<std::mutex> lock(mu);
  stats.forks += n - 1;
  return children;
}

bool Engine::Impl::unshare_write_block(Sequence& seq) {
  const int bs = pool.block_size();
  const auto index = static_cast<std::size_t>(seq.num_slots / bs);
  // Only a partially filled block can be both written and shared: the blocks after it were just
  // allocated for this step, the ones before it are full and never written again.
  if (seq.num_slots % bs == 0 || index >= seq.block_table.size()) return true;
  const std::int32_t old = seq.block_table[index];
  if (pool.ref_count(old) == 1) return true;
  auto fresh = pool.allocate();
  if (!fresh) return false;
  // Both groups' KV (the window layers' too: the block is the last one, inside the window).
  std::vector<std::uint8_t> record(pool.record_bytes());
  if (!pool.copy_out(old, record.data())) {
    pool.release(*fresh);
    return false;
  }
  pool.copy_in(*fresh, record.data());
  pool.set_taint(*fresh, pool.taint(old));
  pool.release(old);
  seq.block_table[index] = *fresh;
  std::lock_guard<std::mutex> lock(mu);
  ++stats.blocks_copied_on_write;
  return true;
}

}  // namespace kvstash
