// Internal to kernels: the table of per-instruction-set implementations behind kernels.h, and the
// run-time choice among them.
//
// Each SIMD level (scalar, AVX2+FMA+F16C, AVX-512) fills one KernelTable in its own translation unit,
// compiled with that level's -m flags, so that the generic code never executes an instruction the
// CPU lacks. active_kernels() picks the best table the CPU supports once (lowered by KVSTASH_SIMD);
// tests switch tables with set_simd_path_for_testing().
//
// Thread safety: active_kernels() is safe from any thread. set_simd_path_for_testing() must not
// run concurrently with any kernel call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace kvstash::kernels {

enum class SimdPath { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
const char* simd_path_name(SimdPath path);

// Activations quantized for the q8_0 decode kernels: per 32-value block an f32 scale d and int8
// values q with x ~= d * q (d = max|x| / 127, q = round-to-nearest-even(x / d)). Every path
// quantizes identically, so every path's integer block dot products agree exactly.
//
// The slice-form types (quant_formats.h: w = scale u - min per 16 weights) also need each group of
// 4 activations' sum, d * (q0 + q1 + q2 + q3): the min's share of a dot product, taken per
// 4-value lane so that every SIMD width reads it as one vector.
struct QuantizedActivations {
  const float* scales = nullptr;     // [n_tokens * blocks_per_row]
  const std::int8_t* values = nullptr;  // [n_tokens * cols]
  const float* lane_sums = nullptr;  // [n_tokens * cols / 4]; only for slice-form weights
  const float* group_sums = nullptr;  // [n_tokens * cols / 16]: the same per 16 values (K types' mins)
  // Only for the interleaved Q8_0, Q4_0 and Q5_0: the sum of each block's values.
  const std::int32_t* block_sums = nullptr;  // [n_tokens * blocks_per_row]
  // Only for the interleaved K types (cols % 256 == 0): the activations quantized again with one
  // scale per 256 values (a super-block, as llama.cpp's Q8_K), so that a super-block's sub-block
  // sums are scaled in integers and converted once (interleaved16.h), and their sums per 32 values
  // (int16: at most 32 x 127 in magnitude) and per 16.
  const float* k_scales = nullptr;        // [n_tokens * cols / 256]
  const std::int8_t* k_values = nullptr;  // [n_tokens * cols]
  const std::int16_t* k_sums32 = nullptr;  // [n_tokens * cols / 32]
  const std::int32_t* k_sums16 = nullptr;  // [n_tokens * cols / 16]
};

struct KernelTable {
  SimdPath path = SimdPath::kScalar;

  // Decode matmul on rows [row_begin, row_end): y[t * y_stride + r] for t < n_tokens.
  // x is f32 [n_tokens * cols] for f32/f16/bf16 weights; xq is used (x ignored) for quantized ones.
  void (*matmul_rows)(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                      std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride) = nullptr;
  // Rows [row_begin, row_end) of w as f32, packed with stride cols.
  void (*dequantize_rows)(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) = nullptr;
  // n floats into QuantizedActivations layout: per `block` values (32, or 256 for the K types'
  // k_scales / k_values; n a multiple of it) one scale, the absolute maximum over 127, and the
  // values over it rounded to nearest, ties to even (scales[n / block], values[n]).
  void (*quantize_activations)(const float* x, std::int64_t n, int block, float* scales, std::int8_t* values) = nullptr;

  void (*rms_norm)(const float* x, const float* weight, int n, float eps, float* out) = nullptr;
  void (*softmax_inplace)(float* x, int n) = nullptr;
  void (*silu_mul)(const float* gate, const float* up, int n, float* out) = nullptr;
  void (*add_inplace)(float* y, const float* x, int n) = nullptr;
  float (*dot_f32)(const float* a, const float* b, int n) = nullptr;
  float (*dot_f32_f16)(const float* a, const std::uint16_t* b, int n) = nullptr;
  void (*axpy_f16)(float alpha, const std::uint16_t* x, float* y, int n) = nullptr;
  void (*dot_f32_f16_rows)(const float* q, int n_heads, const std::uint16_t* rows, std::size_t row_stride,
                           int n_rows, int n, float scale, float* out, std::size_t out_stride) = nullptr;
  void (*axpy_f16_rows)(const float* alpha, std::size_t alpha_stride, int n_heads, const std::uint16_t* rows,
                        std::size_t row_stride, int n_rows, int n, float* y) = nullptr;
  void (*f32_to_f16_row)(const float* x, std::uint16_t* out, int n) = nullptr;
  void (*f16_to_f32_row)(const std::uint16_t* x, float* out, int n) = nullptr;
  // Sums bytes (a multiple of 64, 64-byte aligned) as 64-bit integers with the widest loads; used
  // by the stream-read measurement so the read cannot be optimised away.
  std::uint64_t (*read_sum)(const void* data, std::size_t bytes) = nullptr;
};

// One table per level; avx2/avx512 tables exist in every build but may only be called when the CPU
// supports them (cpu_supports).
const KernelTable& scalar_kernel_table();
const KernelTable& avx2_kernel_table();
const KernelTable& avx512_kernel_table();

bool cpu_supports(SimdPath path);
// The paths this CPU can run, lowest first (scalar always). Tests run each kernel on each of these:
// a path the CPU lacks is not instantiated, since it cannot run here (and a skip would be a failure).
std::vector<SimdPath> supported_simd_paths();
// Whether this CPU is AMD's: some prefetch choices differ by vendor (matmul_avx512.cc).
bool amd_core();
// The table in use: the best the CPU supports, lowered by KVSTASH_SIMD, or the one a test set.
const KernelTable& active_kernels();
// Returns false (and changes nothing) when the CPU cannot run `path`.
bool set_simd_path_for_testing(SimdPath path);
// Back to the choice made from the CPU and the environment.
void reset_simd_path_for_testing();

// matmul() uses the sgemm path from this many tokens on; by default never, because a token's result
// would then depend on its batch's size (matmul.cc explains). Tests and the crossover benchmark move
// it to run either path at any n_tokens; < 1 restores the default.
int prefill_min_tokens();
void set_prefill_min_tokens_for_testing(int n_tokens);
// The same, for `--sgemm-prefill-min-tokens`: an operator's opt-in to sgemm for steps of at least
// n_tokens tokens (faster prefill of f16/bf16/f32 weights at large batches, not batch-invariant);
// 0 = never (the default). Process-wide; set before the first request.
void set_sgemm_prefill_min_tokens(int n_tokens);

}  // namespace kvstash::kernels
