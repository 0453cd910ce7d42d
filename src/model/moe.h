// The mixture-of-experts feed-forward on the CPU (qwen3moe, gpt-oss): a router scores every expert for each
// token, the token runs only the k best, and their SwiGLU outputs are summed with the router's
// weights. Computed so that a forward pass reads each expert's weights at most once, in few pool runs:
//   - a batch's tokens are grouped by expert, and each expert multiplies all of its tokens in one
//     matmul (its weights streamed once for them all);
//   - the experts' matmuls go to the pool together (kernels::matmul_jobs): all gate and up
//     matrices in one run (for one token: its k experts' 2k matrices, whose rows the threads split
//     as one list, the input quantized once), then all down matrices, each on its own input, in one
//     more (a batch's experts 16 at a time). So the threads split the work by expert and by rows,
//     and a decode step's MoE layer costs three fork-joins (router, gate/up, down): one expert's
//     matrices (~1 MB at Q4_K) are too small to split well alone.
// A token's output depends on its own routing only, summed in its top-k order (as llama.cpp's
// build_moe_ffn does): the batch it rides in changes nothing but the matmul path (kernels.h).
//
// Thread safety: moe_feed_forward uses `pool` for the duration of the call; weights are read only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "model/model_config.h"

namespace kvstash {

// One MoE layer's weights. The GGUF stores each of gate/up/down as one 3-D tensor, experts along
// the slowest dimension; each view here is one expert's slice of it.
struct ExpertWeights {
  kernels::WeightView router;                       // ffn_gate_inp: n_experts rows of n_embd
  std::vector<kernels::WeightView> gate, up, down;  // per expert: n_ff_expert x n_embd, the same, n_embd x n_ff_expert
  // MoeSpec::router_bias: n_experts values; MoeSpec::expert_biases: per expert n_ff_expert values
  // (gate, up) and n_embd (down), expert after expert. Empty otherwise.
  std::vector<float> router_bias, gate_bias, up_bias, down_bias;
};

// The router's choice for T tokens: experts[t * n_used + j] is token t's j-th expert (best first)
// and weights[...] its weight. From router logits [T][n_experts] (bias included), per
// spec.gating: kSoftmaxTopK, softmax over all experts, the n_used largest probabilities (ties: the
// lower expert index first), divided by their sum when spec.renormalize (the sum clamped below at
// 2^-14, as llama.cpp does); kTopKSoftmax, the n_used largest logits, weighted by the softmax over
// those n_used alone.
//
// The expert's activation (spec.activation): SwiGLU, or gpt-oss's clamped one (model_config.h).
void route_tokens(const MoeSpec& spec, const float* router_logits, int n_tokens, int* experts, float* weights);

// out[t] = sum_j weights[t][j] * down_e(act(gate_e(x_t), up_e(x_t))), e = experts[t][j] (each
// projection + its bias where the spec has them), for the
// T rows of x (n_embd floats each). Returns the bytes of weight matrices it read (the router and
// each expert used by some token, once), for ForwardProfile.
std::int64_t moe_feed_forward(const MoeSpec& spec, const ExpertWeights& w, const float* x, int n_tokens, int n_embd,
                              float* out, ThreadPool& pool);

}  // namespace kvstash
