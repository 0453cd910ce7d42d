#include "engine/kv_compactor.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <numeric>

#include "common/fp16.h"
#include "common/thread_pool.h"

namespace kvstash {
namespace {

// The rotated pair i of a head: its two element indices in the RoPE convention of the model.
std::pair<int, int> pair_elems(RopeStyle style, int i, int head_dim) {
  return style == RopeStyle::kInterleaved ? std::pair{2 * i, 2 * i + 1} : std::pair{i, i + head_dim / 2};
}

// The future query positions the kept keys must serve: next, then doubling offsets up to the
// budget (a compacted key may be read for up to `budget` more tokens before its next test).
std::vector<double> future_positions(int next_position, int budget) {
  std::vector<double> out;
  for (int d = 1; d <= std::max(budget, 1); d *= 2) out.push_back(static_cast<double>(next_position) + d);
  return out;
}

// TriAttention scores of `candidates` (slot indices), higher = keep.
std::vector<double> triattention_scores(const Model& model, const KvPoolView& kv, const std::vector<std::int32_t>& table,
                                        const KvCompactionState& state, const std::vector<int>& candidates, int budget) {
  const ModelConfig& c = model.config();
  const int half = c.head_dim / 2, group = c.n_heads / c.n_kv_heads;
  const auto& inv_freq = model.rope_inv_freq();
  const int next_position = state.slot_positions.empty() ? 0 : state.slot_positions.back() + 1;
  const auto future = future_positions(next_position, budget);
  // mean_p e^{iω_f p} per pair, shared by every head and layer.
  std::vector<std::complex<double>> rotation(static_cast<std::size_t>(half));
  for (int f = 0; f < half; ++f) {
    std::complex<double> sum = 0;
    for (double p : future) sum += std::polar(1.0, p * inv_freq[static_cast<std::size_t>(f)]);
    rotation[static_cast<std::size_t>(f)] = sum / static_cast<double>(future.size());
  }
  const QueryStats& q = *state.queries;
  const double n = std::max(q.count, 1);
  std::vector<double> total(candidates.size(), 0.0), layer_best(candidates.size());
  std::vector<double> head_scores(candidates.size());
  std::vector<std::complex<double>> center(static_cast<std::size_t>(half));
  std::vector<double> spread(static_cast<std::size_t>(half));
  std::vector<float> k_row(static_cast<std::size_t>(c.head_dim));
  for (int l = 0; l < c.n_layers; ++l) {
    std::fill(layer_best.begin(), layer_best.end(), -1e300);
    for (int h = 0; h < c.n_heads; ++h) {
      const float* qs = q.sums.data() + (static_cast<std::size_t>(l) * c.n_heads + h) * half * 3;
      for (int f = 0; f < half; ++f) {
        const std::complex<double> mu(qs[3 * f] / n, qs[3 * f + 1] / n);
        center[static_cast<std::size_t>(f)] = mu * rotation[static_cast<std::size_t>(f)];
        spread[static_cast<std::size_t>(f)] = std::max(0.0, qs[3 * f + 2] / n - std::abs(mu));
      }
      const int kvh = h / group;
      double mean = 0, sq = 0;
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        const int slot = candidates[i];
        const std::uint16_t* row = kv.k_at(table[static_cast<std::size_t>(slot / kv.block_size)], l, slot % kv.block_size, kvh);
        double s = 0;
        for (int f = 0; f < half; ++f) {
          const auto [a, b] = pair_elems(c.rope_style, f, c.head_dim);
          const std::complex<double> k(f16_to_f32(row[a]), f16_to_f32(row[b]));
          s += (center[static_cast<std::size_t>(f)] * std::conj(k)).real() + spread[static_cast<std::size_t>(f)] * std::abs(k);
        }
        head_scores[i] = s;
        mean += s;
        sq += s * s;
      }
      mean /= static_cast<double>(candidates.size());
      const double sd = std::sqrt(std::max(sq / static_cast<double>(candidates.size()) - mean * mean, 1e-12));
      for (std::size_t i = 0; i < candidates.size(); ++i) layer_best[i] = std::max(layer_best[i], (head_scores[i] - mean) / sd);
    }
    for (std::size_t i = 0; i < candidates.size(); ++i) total[i] += layer_best[i];
  }
  return total;
}

}  // namespace

Expected<QueryStats> calibrate_queries(const Model& model, int n_tokens) {
  const ModelConfig& c = model.config();
  const int bs = 16;
  BlockPool pool(c, bs, (n_tokens + bs - 1) / bs);
  std::vector<std::int32_t> table;
  for (int b = 0; b * bs < n_tokens; ++b) table.push_back(*pool.allocate());
  QueryStats stats;
  stats.sums.assign(static_cast<std::size_t>(c.n_layers) * c.n_heads * (c.head_dim / 2) * 3, 0.0f);
  stats.count = n_tokens;
  ForwardBatch batch;
  std::mt19937_64 rng(0x6b767374617368ull);  // "kvstash": fixed, so every machine calibrates alike
  for (int i = 0; i < n_tokens; ++i) batch.tokens.push_back(static_cast<TokenId>(rng() % static_cast<std::uint64_t>(c.n_vocab)));
  BatchSequence s;
  s.block_table = table.data();
  s.n_blocks = static_cast<int>(table.size());
  s.n_new = n_tokens;
  s.want_logits = false;
  s.q_stats = stats.sums.data();
  batch.sequences.push_back(s);
  ThreadPool threads(1);
  if (Status st = model.forward(batch, pool.view(), nullptr, threads); !st) return st;
  return stats;
}

Status validate_budget(const KvBudgetOptions& o, int block_size) {
  if (o.budget == 0) return Status::ok();
  if (o.budget < 0 || o.compact_every < 1 || o.sinks < 0 || o.recent < 0) {
    return invalid_argument("KV budget settings must be non-negative and compact_every positive");
  }
  const int needed = o.sinks + o.recent + block_size + o.compact_every;
  if (o.budget < needed) {
    return invalid_argument("a KV budget of " + std::to_string(o.budget) + " tokens cannot hold the " + std::to_string(o.sinks) +
                            " sink tokens, the " + std::to_string(o.recent) + "-token recent window and one " +
                            std::to_string(block_size) + "-token block after evicting " + std::to_string(o.compact_every) +
                            " tokens per compaction: it must be at least " + std::to_string(needed));
  }
  return Status::ok();
}

std::vector<int> choose_survivors(const KvBudgetOptions& o, const Model& model, const KvPoolView& kv,
                                  const std::vector<std::int32_t>& table, KvCompactionState& state, int keep) {
  const int n = static_cast<int>(state.slot_positions.size());
  std::vector<int> kept;
  if (keep >= n) {
    kept.resize(static_cast<std::size_t>(n));
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  const int sinks = std::min(o.sinks, keep), recent = std::min(o.recent, keep - sinks);
  std::vector<int> candidates;
  for (int s = sinks; s < n - recent; ++s) candidates.push_back(s);
  const int quota = keep - sinks - recent;
  std::vector<int> chosen;
  switch (o.policy) {
    case EvictionPolicy::kWindow:
      chosen.assign(candidates.end() - quota, candidates.end());
      break;
    case EvictionPolicy::kRandom:
      chosen = candidates;
      std::shuffle(chosen.begin(), chosen.end(), state.rng);
      chosen.resize(static_cast<std::size_t>(quota));
      break;
    case EvictionPolicy::kTriAttention: {
      const auto scores = triattention_scores(model, kv, table, state, candidates, o.budget);
      std::vector<std::size_t> order(candidates.size());
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + quota, order.end(),
                        [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
      for (int i = 0; i < quota; ++i) chosen.push_back(candidates[order[static_cast<std::size_t>(i)]]);
      break;
    }
  }
  for (int s = 0; s < sinks; ++s) kept.push_back(s);
  kept.insert(kept.end(), chosen.begin(), chosen.end());
  for (int s = n - recent; s < n; ++s) kept.push_back(s);
  std::sort(kept.begin(), kept.end());
  return kept;
}

CompactionResult compact_slots(BlockPool& pool, std::vector<std::int32_t>& table, KvCompactionState& state,
                               const std::vector<int>& kept) {
  CompactionResult result;
  const int bs = pool.block_size();
  const int n_kept = static_cast<int>(kept.size());
  int first_moved = n_kept;
  for (int i = 0; i < n_kept; ++i) {
    if (kept[static_cast<std::size_t>(i)] != i) {
      first_moved = i;
      break;
    }
  }
  // Copy-on-write, decided and allocated before anything is written: every block that receives a
  // moved slot and is shared or registered gets a private copy. Without a free block, a registered
  // block only this sequence holds is unregistered instead (the prefix cache loses the entry, the
  // KV stays right); a block another sequence holds must be copied, or the compaction waits.
  const int first_block = first_moved / bs, end_block = (n_kept + bs - 1) / bs;
  std::vector<std::pair<int, std::int32_t>> copies;  // (table index, new block)
  std::vector<std::int32_t> to_unregister;
  for (int b = first_block; b < end_block; ++b) {
    const std::int32_t block = table[static_cast<std::size_t>(b)];
    if (pool.ref_count(block) == 1 && !pool.is_registered(block)) continue;
    auto fresh = pool.allocate();
    if (fresh) {
      copies.push_back({b, *fresh});
    } else if (pool.ref_count(block) == 1) {
      to_unregister.push_back(block);
    } else {
      for (auto& [index, nb] : copies) pool.release(nb);
      return result;  // no room for a copy: try again after the next token
    }
  }
  for (std::int32_t block : to_unregister) pool.unregister(block);
  for (auto& [index, fresh] : copies) {
    const std::int32_t old = table[static_cast<std::size_t>(index)];
    std::memcpy(pool.block_bytes(fresh).data(), pool.block_bytes(old).data(), pool.view().block_bytes());
    table[static_cast<std::size_t>(index)] = fresh;
    pool.release(old);
  }
  // Slide survivors forward (kept[i] >= i, ascending: a source is never overwritten before it is read).
  const KvPoolView& kv = pool.view();
  const std::size_t head_bytes = static_cast<std::size_t>(kv.head_dim) * sizeof(std::uint16_t);
  for (int i = first_moved; i < n_kept; ++i) {
    const int from = kept[static_cast<std::size_t>(i)];
    if (from == i) continue;
    const std::int32_t src = table[static_cast<std::size_t>(from / bs)], dst = table[static_cast<std::size_t>(i / bs)];
    for (int l = 0; l < kv.n_layers; ++l) {
      for (int h = 0; h < kv.n_kv_heads; ++h) {
        std::memcpy(kv.k_at(dst, l, i % bs, h), kv.k_at(src, l, from % bs, h), head_bytes);
        std::memcpy(kv.v_at(dst, l, i % bs, h), kv.v_at(src, l, from % bs, h), head_bytes);
      }
    }
  }
  // Blocks past the survivors: released last block first (tail-first, as everywhere).
  std::vector<std::int32_t> emptied(table.begin() + end_block, table.end());
  table.resize(static_cast<std::size_t>(end_block));
  result.blocks_freed = static_cast<int>(emptied.size());
  pool.release_table(emptied);
  std::vector<int> positions;
  positions.reserve(kept.size());
  for (int s : kept) positions.push_back(state.slot_positions[static_cast<std::size_t>(s)]);
  result.evicted = static_cast<int>(state.slot_positions.size()) - n_kept;
  state.slot_positions = std::move(positions);
  state.compacted = state.compacted || result.evicted > 0;
  result.done = true;
  return result;
}

}  // namespace kvstash
