#include "engine/draft_model.h"

#include <algorithm>
#include <string>

#include "common/thread_pool.h"

namespace kvstash {

Status check_same_vocabulary(const Model& target, const Model& draft) {
  const int nt = target.config().n_vocab, nd = draft.config().n_vocab;
  if (nt != nd) {
    return invalid_argument("the draft model has " + std::to_string(nd) + " tokens (embedding rows); the target has " +
                            std::to_string(nt) + ": a draft model needs the target's vocabulary");
  }
  const Tokenizer& a = target.tokenizer();
  const Tokenizer& b = draft.tokenizer();
  if (a.vocab_size() != b.vocab_size()) {
    return invalid_argument("the draft model's vocabulary has " + std::to_string(b.vocab_size()) + " tokens; the target's has " +
                            std::to_string(a.vocab_size()) + ": a draft model needs the target's vocabulary");
  }
  // Every id must name the same token: a drafted id is verified as the target's token of that id.
  for (std::size_t id = 0; id < a.vocab_size(); ++id) {
    const auto t = static_cast<TokenId>(id);
    if (a.token_text(t) != b.token_text(t)) {
      return invalid_argument("the draft model's token " + std::to_string(id) + " is \"" + b.token_text(t) +
                              "\"; the target's is \"" + a.token_text(t) + "\": a draft model needs the target's vocabulary");
    }
  }
  return Status::ok();
}

void DraftKv::release() {
  if (pool_ != nullptr) pool_->release_table(blocks_);
  blocks_.clear();
  pool_ = nullptr;
  n_computed_ = 0;
}

DraftModelDrafter::DraftModelDrafter(const Model& draft, int block_size, std::int64_t kv_tokens, int max_catch_up)
    : model_(draft),
      pool_(draft.config(), block_size, std::max<std::int64_t>(1, (kv_tokens + block_size - 1) / block_size)),
      max_catch_up_(std::max(1, max_catch_up)) {}

bool DraftModelDrafter::reserve(DraftKv& kv, int n_tokens) {
  kv.pool_ = &pool_;
  const int need = (n_tokens + pool_.block_size() - 1) / pool_.block_size();
  while (kv.n_blocks() < need) {
    auto b = pool_.allocate();
    if (!b) {
      kv.release();  // what it holds may let another sequence draft; it catches up again later
      return false;
    }
    kv.blocks_.push_back(*b);
  }
  return true;
}

void DraftModelDrafter::take_prefix(DraftKv& kv, std::span<const cache::ChunkKey> block_keys, int max_blocks) {
  if (kv.n_computed_ != 0 || kv.n_blocks() != 0) return;
  const int n = std::min(max_blocks, static_cast<int>(block_keys.size()));
  for (int b = 0; b < n; ++b) {
    auto hit = pool_.lookup(block_keys[static_cast<std::size_t>(b)]);
    if (!hit) break;
    kv.pool_ = &pool_;
    kv.blocks_.push_back(*hit);
    kv.n_computed_ += pool_.block_size();
    prefix_hit_tokens_ += pool_.block_size();
  }
}

void DraftModelDrafter::register_full(DraftKv& kv, int n, std::span<const cache::ChunkKey> block_keys) {
  const int full = std::min({n / pool_.block_size(), kv.n_blocks(), static_cast<int>(block_keys.size())});
  for (int b = 0; b < full; ++b) {
    const std::int32_t block = kv.blocks_[static_cast<std::size_t>(b)];
    if (!pool_.is_registered(block)) pool_.register_block(block, block_keys[static_cast<std::size_t>(b)]);
  }
}

void DraftModelDrafter::rollback(DraftKv& kv, int n, std::span<const cache::ChunkKey> block_keys) {
  if (kv.pool_ == nullptr) return;
  if (kv.n_computed_ <= n) {
    register_full(kv, kv.n_computed_, block_keys);
    return;
  }
  kv.n_computed_ = std::max(0, n);
  register_full(kv, kv.n_computed_, block_keys);
  const auto keep = static_cast<std::size_t>((kv.n_computed_ + pool_.block_size() - 1) / pool_.block_size());
  while (kv.blocks_.size() > keep) {
    kv.pool_->release(kv.blocks_.back());
    kv.blocks_.pop_back();
  }
}

Status DraftModelDrafter::draft(std::span<Job> jobs, ThreadPool& threads) {
  const int n_vocab = model_.config().n_vocab;
  // Which jobs still draft in the current pass (a catch-up chunk or a full pool ends a job's draft).
  std::vector<char> active(jobs.size(), 0);
  int passes = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    active[i] = 1;
    passes = std::max(passes, std::max(jobs[i].k, 1));  // k = 0: a catch-up pass alone
  }
  for (int pass = 0; pass < passes; ++pass) {
    ForwardBatch batch;
    std::vector<std::size_t> in_batch;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      Job& job = jobs[i];
      if (!active[i] || pass >= std::max(job.k, 1)) continue;
      DraftKv& kv = *job.kv;
      const int size = static_cast<int>(job.tokens.size());
      BatchSequence bs;
      bs.pos_start = kv.n_computed_;
      if (pass == 0) {
        // A fresh draft KV starts from the prefix cache: every whole block but the one holding
        // the last token (its row gives the first drafted token; a catch-up-only span ends
        // before the sequence's last token, so all of its whole blocks may come from the cache).
        take_prefix(kv, job.block_keys, job.k == 0 ? size / pool_.block_size() : (size - 1) / pool_.block_size());
        bs.pos_start = kv.n_computed_;
        // Catch up on every token the draft KV lacks, the sequence's last one included: its row
        // gives the first drafted token.
        bs.n_new = size - kv.n_computed_;
        if (job.k == 0) {  // catch up only, on every token of the span
          bs.n_new = std::min(bs.n_new, max_catch_up_);
          bs.want_logits = false;
          active[i] = 0;
          if (bs.n_new <= 0) continue;
        } else if (bs.n_new > max_catch_up_) {
          bs.n_new = max_catch_up_;
          bs.want_logits = false;  // still behind: this step only catches up
          active[i] = 0;
        }
        if (!reserve(kv, kv.n_computed_ + bs.n_new)) {
          active[i] = 0;
          continue;
        }
        batch.tokens.insert(batch.tokens.end(), job.tokens.begin() + kv.n_computed_, job.tokens.begin() + kv.n_computed_ + bs.n_new);
      } else {
        bs.n_new = 1;
        if (!reserve(kv, kv.n_computed_ + 1)) {
          active[i] = 0;  // the tokens drafted so far stand: their draft KV was just released
          continue;
        }
        batch.tokens.push_back(job.out->back());
      }
      bs.block_table = kv.blocks_.data();
      bs.n_blocks = kv.n_blocks();
      batch.sequences.push_back(bs);
      in_batch.push_back(i);
    }
    if (batch.sequences.empty()) break;
    logits_.resize(static_cast<std::size_t>(batch.logit_rows()) * static_cast<std::size_t>(n_vocab));
    if (Status st = model_.forward(batch, pool_.view(), logits_.data(), threads); !st) {
      for (Job& job : jobs) job.kv->release();
      return st;
    }
    int row = 0;
    for (std::size_t b = 0; b < in_batch.size(); ++b) {
      Job& job = jobs[in_batch[b]];
      job.kv->n_computed_ += batch.sequences[b].n_new;
      if (pass == 0) register_full(*job.kv, job.kv->n_computed_, job.block_keys);  // real tokens only
      if (!batch.sequences[b].want_logits) continue;
      const float* r = &logits_[static_cast<std::size_t>(row++) * static_cast<std::size_t>(n_vocab)];
      // Greedy: the draft's likeliest token (the lowest id on a tie), a point-mass proposal.
      job.out->push_back(static_cast<TokenId>(std::max_element(r, r + n_vocab) - r));
    }
  }
  return Status::ok();
}

}  // namespace kvstash
