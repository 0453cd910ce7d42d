// Several matmuls in one pool run, each with its own weights, input and token count: a MoE layer's
// experts, each over the tokens routed to it (model/moe.h). One expert's matrices (~1 MB at Q4_K
// for Qwen3-30B-A3B's 768 x 2048) are too small for the pool to split well alone; together they are
// one list of rows that the threads split as matmul_many() splits Q, K and V.
//
// Thread safety: reentrant; uses `pool` for the duration of the call (one call at a time per pool).
#pragma once

#include <span>

#include "kernels/kernels.h"

namespace kvstash::kernels {

// One product: y = w * x over n_tokens rows, laid out as matmul()'s.
struct MatmulJob {
  WeightView w;
  const float* x = nullptr;  // n_tokens rows of w.cols floats
  int n_tokens = 0;
  float* y = nullptr;        // n_tokens rows of w.rows floats
};

// The jobs the decode path splits over the pool in one run (one fork-join): a token's 8 experts'
// gate and up matrices (Qwen3-MoE) fit one.
inline constexpr int kMatmulJobsPerRun = 32;

// Every job's y is what matmul(w, x, n_tokens, y) writes, bit for bit. On the decode path the rows
// of up to kMatmulJobsPerRun jobs are split over the pool in one run, and jobs that read the same x
// (same pointer, token count and width) quantize it once; a job on the sgemm path (n_tokens at or
// above the opt-in threshold, weights not interleaved) runs alone, as matmul() runs it. Jobs with
// no tokens or no rows are skipped.
void matmul_jobs(std::span<const MatmulJob> jobs, ThreadPool& pool);

}  // namespace kvstash::kernels
