// CPU math for the model: matrix multiplication against weights in their stored type, and the
// small vector operations of a transformer layer. The SIMD path (AVX-512, AVX2+FMA, scalar) is
// chosen once at run time from the CPU's features; every path gives the same results up to
// floating-point reassociation.
//
// Kernels know nothing of models: they see pointers, shapes and weight types.
//
// Thread safety: all functions are reentrant. Functions taking a ThreadPool use it for the
// duration of the call (one call at a time per pool).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/thread_pool.h"

namespace kvstash::kernels {

// Weight types in their GGUF block layouts (quant_formats.h describes the quantized ones), and
// kQ8_0x16, kQ4_0x16, kQ5_0x16, kQ4_1x16, kQ5_1x16, kQ2_Kx16, kQ3_Kx16, kQ4_Kx16, kQ5_Kx16, kQ6_Kx16,
// kF16x16, kMxfp4x16: those GGUF types interleaved by 16 rows for the AVX-512 kernels (interleaved16.h), made
// only by repack_for_decode, never read from or written to a file.
enum class WeightType {
  kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K,
  kQ8_0x16, kQ4_Kx16, kQ6_Kx16, kQ4_0x16, kQ5_0x16, kF16x16, kQ5_Kx16, kQ4_1x16, kQ5_1x16, kQ3_Kx16, kQ2_Kx16,
  kMxfp4,  // GGUF MXFP4 (gpt-oss's experts): 32 E2M1 values and an E8M0 scale per 17 bytes (mxfp4.h)
  kMxfp4x16,
};
inline bool is_interleaved(WeightType type) {
  return type == WeightType::kQ8_0x16 || type == WeightType::kQ4_Kx16 || type == WeightType::kQ6_Kx16 ||
         type == WeightType::kQ4_0x16 || type == WeightType::kQ5_0x16 || type == WeightType::kF16x16 ||
         type == WeightType::kQ5_Kx16 || type == WeightType::kQ4_1x16 || type == WeightType::kQ5_1x16 ||
         type == WeightType::kQ3_Kx16 || type == WeightType::kQ2_Kx16 || type == WeightType::kMxfp4x16;
}
// The interleaved K types, which multiply activations quantized per 256 (QuantizedActivations::k_*)
// rather than per 32.
inline bool is_k_interleaved(WeightType type) {
  return type == WeightType::kQ2_Kx16 || type == WeightType::kQ3_Kx16 || type == WeightType::kQ4_Kx16 ||
         type == WeightType::kQ5_Kx16 || type == WeightType::kQ6_Kx16;
}
// The interleaved types, and the GGUF type each is made from (interleaved_source; a GGUF type is
// its own).
inline constexpr WeightType kAllInterleavedTypes[] = {
    WeightType::kQ8_0x16, WeightType::kQ4_0x16, WeightType::kQ5_0x16, WeightType::kQ4_1x16, WeightType::kQ5_1x16,
    WeightType::kQ2_Kx16, WeightType::kQ3_Kx16, WeightType::kQ4_Kx16, WeightType::kQ5_Kx16, WeightType::kQ6_Kx16,
    WeightType::kF16x16, WeightType::kMxfp4x16};
WeightType interleaved_source(WeightType type);
// The GGUF types (the interleaved ones are not).
inline constexpr WeightType kAllWeightTypes[] = {
    WeightType::kF32,  WeightType::kF16,  WeightType::kBF16, WeightType::kQ8_0, WeightType::kQ4_0,
    WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ2_K, WeightType::kQ3_K,
    WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kMxfp4};
const char* weight_type_name(WeightType type);
// Elements per block (1 for float types, kF16x16 included; 32 for Q4_0..Q8_0, 256 for the K types)
// and its bytes.
int weight_block_elems(WeightType type);
std::size_t weight_block_bytes(WeightType type);
inline bool is_quantized(WeightType type) { return weight_block_elems(type) > 1; }

// Q8_0 as GGUF stores it: blocks of 32 values, an f16 scale then 32 int8s (34 bytes).
inline constexpr int kQ8_0BlockElems = 32;
inline constexpr int kQ8_0BlockBytes = 34;

// A row-major matrix of `rows` rows (outputs) by `cols` columns (inputs), each row `row_bytes`
// long, read in place (e.g. from a mapped GGUF file). cols is a multiple of the type's block
// (weight_block_elems).
struct WeightView {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::size_t row_bytes = 0;
};
std::size_t row_bytes_for(WeightType type, std::int64_t cols);

// Weights copied at load may be laid out for the SIMD path in use. repack_bytes(w) is the size of
// w's repacked copy, or 0 when w keeps its layout. On the AVX-512 path, with rows % 16
// == 0: Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 matrices of cols % 64 == 0 become kQ8_0x16, kQ4_0x16,
// kQ5_0x16, kQ4_1x16 and kQ5_1x16, the same size; Q2_K, Q3_K, Q4_K, Q5_K and Q6_K ones become
// kQ2_Kx16 (the same size), kQ3_Kx16 (116/110 of the size), kQ4_Kx16 (148/144), kQ5_Kx16
// (180/176) and kQ6_Kx16 (212/210); F16 ones (any cols) become kF16x16, the same size; MXFP4 ones
// (any whole blocks) become kMxfp4x16 (the same size for cols % 128 == 0, else up to 48 bytes per 16
// rows more: interleaved16.h). On the
// AVX2 path, only Q8_0, Q4_0, Q5_0, Q4_1, Q5_1 and Q4_K (the layouts its kernels multiply).
// repack_for_decode writes that copy to dst (64-byte aligned, repack_bytes(w) long) and returns its
// view (row_bytes stays the original's); matmul and dequantize_rows accept it on every path.
std::size_t repack_bytes(const WeightView& w);
WeightView repack_for_decode(const WeightView& w, void* dst);
// The version of the layouts repack_for_decode writes (and of which matrices it repacks on each
// path). Prepared weights saved to disk (model/weights_cache.h) are keyed by it: bump it with any
// change to an interleaved layout or to repack_bytes, or old files would be read as the new layout.
// 2: MXFP4 matrices repacked as kMxfp4x16 on the AVX-512 path.
inline constexpr std::uint32_t kInterleavedLayoutVersion = 2;

// The SIMD path in use: "avx512", "avx2" or "scalar". KVSTASH_SIMD=avx2|scalar in the environment
// forces a lower path (for tests and benchmarks).
const char* simd_path();

// y[t * rows + r] = sum_c w[r][c] * x[t * cols + c] for t < n_tokens, r < rows.
// Few tokens (decode): each weight row is read once for all tokens (memory bound).
// Many tokens (prefill): weight panels are converted to f32 and multiplied with OpenBLAS sgemm.
void matmul(const WeightView& w, const float* x, int n_tokens, float* y, ThreadPool& pool);
// matmul() for several weights that share one input (Q/K/V, gate/up): ys[i] = ws[i] * x, each
// with stride ws[i].rows. All ws have the same cols; ws.size() == ys.size(). On the decode path
// the rows of all matrices are split over the pool in one run (one fork-join instead of one per
// matrix); on the prefill path this is a loop of matmul().
void matmul_many(std::span<const WeightView> ws, const float* x, int n_tokens, std::span<float* const> ys,
                 ThreadPool& pool);

// Rows [row_begin, row_end) of w as f32, into out[(r - row_begin) * cols + c].
void dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out);
// Encodes n floats (n a multiple of 32) as Q8_0 blocks (round to nearest, scale = max|x| / 127).
void quantize_q8_0(const float* x, std::int64_t n, void* out);
// Encodes n floats (n a multiple of the type's block) in any quantized type (quantize.h).
void quantize_row(WeightType type, const float* x, std::int64_t n, void* out);

// Vector operations, all on f32 unless named.
void rms_norm(const float* x, const float* weight, int n, float eps, float* out);
void softmax_inplace(float* x, int n);
void silu_mul(const float* gate, const float* up, int n, float* out);  // silu(gate) * up
// gelu_tanh(gate) * up with llama.cpp's CPU GELU: gate rounded to f16, GELU from an f16 table
// (gelu.cc); gate <= -10 gives 0, gate >= 10 gives gate * up. out may alias gate or up.
void gelu_mul(const float* gate, const float* up, std::int64_t n, float* out);
void add_inplace(float* y, const float* x, int n);
float dot_f32(const float* a, const float* b, int n);
// For attention over an f16 KV cache.
float dot_f32_f16(const float* a, const std::uint16_t* b, int n);
void axpy_f16(float alpha, const std::uint16_t* x, float* y, int n);  // y += alpha * x
// The same over n_rows f16 rows at rows + j * row_stride (elements), e.g. one KV block's K or V
// rows of one KV head, for n_heads query heads (the heads of a GQA group, which read the same
// rows): one call per block instead of one per token and head (at 4k context the per-row calls
// cost more than decode's weight reads), and each row converted once for all the heads.
//   dot:  out[h * out_stride + j] = dot(q + h * n, row_j) * scale
//   axpy: y[h * n + i] += sum_j alpha[h * alpha_stride + j] * row_j[i]
// A head's results do not depend on n_heads or on the other heads (a token's attention is the same
// whichever heads one call takes together), nor a row's dot on the other rows.
void dot_f32_f16_rows(const float* q, int n_heads, const std::uint16_t* rows, std::size_t row_stride, int n_rows,
                      int n, float scale, float* out, std::size_t out_stride);
void axpy_f16_rows(const float* alpha, std::size_t alpha_stride, int n_heads, const std::uint16_t* rows,
                   std::size_t row_stride, int n_rows, int n, float* y);
void f32_to_f16_row(const float* x, std::uint16_t* out, int n);
void f16_to_f32_row(const std::uint16_t* x, float* out, int n);

}  // namespace kvstash::kernels
